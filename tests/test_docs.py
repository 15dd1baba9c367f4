"""The README and docs/ stay true to the code: the generated configuration reference, links, tables.

``docs/configuration.md`` is generated from the settings models
(``freshindex config reference``); these tests fail when the committed file
is stale, when a setting has no description, when a relative link in
README.md or docs/*.md points at a missing file or heading, and when a table
the code also states (exit codes, the parts) drifts from it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from freshindex.core.exit_codes import ExitCode
from freshindex.settings import model as settings_model
from freshindex.settings.reference import COMMAND, is_secret, iter_rows, missing_descriptions, render_reference
from tests.conftest import ROOT

DOCS = ROOT / "docs"
REFERENCE = DOCS / "configuration.md"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


# -- the generated configuration reference ----------------------------------------------------------------------


def test_the_committed_configuration_reference_is_the_generated_one() -> None:
    # Given the reference rendered from the settings models now
    rendered = render_reference()
    # Then docs/configuration.md holds exactly that
    committed = REFERENCE.read_text() if REFERENCE.exists() else ""
    assert committed == rendered, f"docs/configuration.md is stale: regenerate it with `{COMMAND}`"


def test_the_cli_prints_the_reference_and_writes_it(tmp_path: Path) -> None:
    # Given the installed command, run as a real process outside the checkout
    exe = Path(sys.executable).with_name("freshindex")
    env = {**os.environ, "FRESHINDEX_DATA_DIR": str(tmp_path / "data")}
    # When it prints the reference, and when it writes it to a file
    printed = subprocess.run([str(exe), "config", "reference"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=120)
    target = tmp_path / "configuration.md"
    written = subprocess.run([str(exe), "config", "reference", "--write", str(target)], capture_output=True,
                             text=True, env=env, cwd=tmp_path, timeout=120)
    # Then both are the rendered reference, and nothing else went to standard output
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == render_reference()
    assert written.returncode == 0 and written.stdout == "", written.stderr
    assert target.read_text() == render_reference()
    # And a file it cannot write is one error line, exit 2
    bad = subprocess.run([str(exe), "config", "reference", "--write", str(tmp_path / "missing" / "x.md")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("error: cannot write") and "Traceback" not in bad.stderr


def test_every_setting_has_a_description() -> None:
    assert missing_descriptions() == [], "add a description= to these fields in settings/sections/"


def test_a_field_without_a_description_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a settings model whose field lost its description
    field = settings_model.RegistrySettings.model_fields["pool_size"]
    monkeypatch.setattr(field, "description", None)
    # Then the check names it, and the rendered reference no longer matches the committed file
    assert missing_descriptions() == ["registry.pool_size"]
    assert render_reference() != REFERENCE.read_text()


def test_the_reference_lists_every_setting_with_its_type_default_and_secrets_hidden() -> None:
    text = render_reference()
    rows = list(iter_rows())
    assert len(rows) > 100
    for row in rows:
        line = next((x for x in text.splitlines() if x.startswith(f"| `{row.env}` |")), None)
        assert line is not None, row.env
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert len(cells) == 4 and cells[1] and cells[2] and cells[3], line
        if is_secret(row.field.annotation):
            assert "(secret)" in cells[1], line
            assert cells[2] in ("none", "(secret)"), line
    # Defaults as the models have them: a number, a JSON list, a boolean, a mapping's rows
    assert "| `FRESHINDEX_SYNC__RUN_LEASE_S` | float | `30.0` |" in text
    assert '| `FRESHINDEX_AUTH__JWT_ALGORITHMS` | JSON list of str | `["RS256","ES256"]` |' in text
    assert "| `FRESHINDEX_SNAPSHOTS__STRATEGY` | one of `copy`, `bluegreen` | `bluegreen` |" in text
    assert "| `fact` | none | 2000 | 5 | 2 |" in text
    assert "`FRESHINDEX_CONTEXT__BUDGETS__<KEY>__MAX_TOKENS`" in text


def test_a_secret_default_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a secret setting with a default value
    from pydantic import SecretStr

    field = settings_model.ApiSettings.model_fields["token"]
    monkeypatch.setattr(field, "default", SecretStr("hunter2-default"))
    # Then the reference says it is secret and does not show it
    text = render_reference()
    assert "hunter2" not in text
    assert "| `FRESHINDEX_API__TOKEN` | str, optional (secret) | (secret) |" in text


# -- links -----------------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _prose_lines(text: str) -> list[str]:
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose_lines(path.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """Every relative link of ``path`` whose file, or whose #anchor in that file, does not exist."""
    problems = []
    for line in _prose_lines(path.read_text()):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                problems.append(f"{path.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{path.name}: {target} (no such heading)")
    return problems


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    files = markdown_files()
    assert len(files) >= 8
    assert [p for f in files for p in broken_links(f)] == []


def test_the_link_check_catches_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    # Given a document with one good and two bad links
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading: here\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n[ok](other.md#a-code-heading-here) [self](#doc)\n"
                   "[gone](missing.md) [bad](other.md#nowhere)\n\n```\n[in code](ignored.md)\n```\n")
    # Then exactly the two bad ones are reported
    assert broken_links(doc) == ["doc.md: missing.md (no such file)", "doc.md: other.md#nowhere (no such heading)"]


# -- the README and the tables the code also states ----------------------------------------------------------


def test_the_readme_is_a_readme() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    # The two commands, exactly as CI calls them
    assert "make run    # " in text and "make test   # " in text
    for doc in ["architecture.md", "operations.md", "security.md", "api.md", "configuration.md", "benchmarks.md"]:
        assert f"](docs/{doc}" in text, doc


def _table_rows(text: str, header_start: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def test_the_exit_code_table_is_the_code_s() -> None:
    rows = _table_rows((DOCS / "api.md").read_text(), "| code | `ExitCode` |")
    assert [(int(r[0]), r[1].strip("`")) for r in rows] == [(int(c), c.name) for c in ExitCode]


def test_the_readme_parts_are_the_architecture_parts() -> None:
    readme = [r[0] for r in _table_rows((ROOT / "README.md").read_text(), "| part |")]
    arch = [r[0] for r in _table_rows((DOCS / "architecture.md").read_text(), "| part |")]
    assert [p for p in arch if p not in readme] == []
    for cell in readme:
        for name in re.findall(r"`([\w.]+)/`", cell):
            assert (ROOT / name).is_dir(), name


# -- docs/api.md's JSON examples against the OpenAPI schema of their route -------------------------------------

#: A JSON example's fence names its route and what it is: ```json POST /v1/query request | ```json GET /readyz 200
_EXAMPLE = re.compile(r"^```json(?:[ \t]+(?P<tag>[^\n]*))?\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
_TAG = re.compile(r"^(?P<method>GET|POST|PUT|DELETE|PATCH) (?P<path>/\S*) (?P<part>request|\d{3})$")


@dataclass(frozen=True)
class Example:
    method: str
    path: str
    part: str  # "request" or a status
    body: Any
    line: int

    @property
    def where(self) -> str:
        return f"line {self.line}: {self.method} {self.path} {self.part}"


def json_examples(text: str) -> tuple[list[Example], list[str]]:
    """Every fenced JSON block of ``text`` with its route tag, and the problems of those without a good one."""
    found, problems = [], []
    for m in _EXAMPLE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        tag = _TAG.match((m.group("tag") or "").strip())
        if tag is None:
            problems.append(f"line {line}: a JSON block without `METHOD /path request|STATUS` after ```json")
            continue
        try:
            body = json.loads(m.group("body"))
        except ValueError as exc:
            problems.append(f"line {line}: not JSON: {exc}")
            continue
        found.append(Example(tag["method"], tag["path"], tag["part"], body, line))
    return found, problems


@functools.cache
def api_spec() -> dict[str, Any]:
    """docs/openapi.json, which tests/api/test_openapi.py holds equal to the app's OpenAPI document."""
    return json.loads((DOCS / "openapi.json").read_text())


def _closed(node: Any) -> Any:
    """A copy of a schema where an object with declared properties takes no other field.

    The answer models allow extra fields (a newer server may add some), so the published schema would
    let an example show a field no route sends (``citations``); the docs may show only declared ones.
    """
    if isinstance(node, list):
        return [_closed(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _closed(v) for k, v in node.items()}
    if "properties" in out and not isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = False
    return out


def route_schema(spec: dict[str, Any], method: str, path: str, part: str) -> dict[str, Any] | None:
    """The JSON schema of ``part`` of the operation ``method path`` (a template or a concrete path), or None."""
    for template, item in spec["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path) and method.lower() in item:
            op = item[method.lower()]
            holder = op.get("requestBody") if part == "request" else op["responses"].get(part)
            content = (holder or {}).get("content", {}).get("application/json")
            return content["schema"] if content else None
    return None


def example_problems(example: Example, spec: dict[str, Any]) -> list[str]:
    """Where ``example`` breaks the schema of its route and part (closed: no undeclared field)."""
    import jsonschema

    schema = route_schema(spec, example.method, example.path, example.part)
    if schema is None:
        return [f"{example.where}: the API has no JSON {example.part} for this route"]
    root = {**_closed(schema), "components": _closed(spec["components"])}
    validator = jsonschema.Draft202012Validator(root)
    return [f"{example.where}: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in validator.iter_errors(example.body)]


def table_json_examples(text: str) -> list[Example]:
    """The JSON objects written inline in the routes table: each is a 200 answer of its row's route."""
    out = []
    for row in _table_rows(text, "| route |"):
        route = re.match(r"`(GET|POST|PUT|DELETE) (/\S+?)`$", row[0])
        for span in re.findall(r"`(\{[^`]*\})`", " | ".join(row[1:])):
            try:
                body = json.loads(span)
            except ValueError:
                continue
            assert route is not None, f"a JSON example in the row of {row[0]}, which names no single route"
            out.append(Example(route[1], route[2], "200", body, 0))
    return out


def test_every_json_example_in_the_api_doc_is_its_route_s_schema() -> None:
    text = (DOCS / "api.md").read_text()
    examples, problems = json_examples(text)
    examples += table_json_examples(text)
    spec = api_spec()
    assert problems + [p for ex in examples for p in example_problems(ex, spec)] == []
    # The query and the citation check are shown both ways, the query's answer and refusal included
    shown = {(ex.method, ex.path, ex.part) for ex in examples}
    assert {("POST", "/v1/query", "request"), ("POST", "/v1/query", "200"), ("POST", "/v1/query", "404"),
            ("POST", "/v1/citations/check", "request"), ("POST", "/v1/citations/check", "200"),
            ("GET", "/readyz", "200")} <= shown
    answers = [ex.body for ex in examples if (ex.path, ex.part) == ("/v1/query", "200")]
    assert {a["insufficient_evidence"] for a in answers} == {True, False}


def test_the_example_check_catches_what_the_doc_used_to_say() -> None:
    # Given the documented answer, and the same answer as the doc described it before
    spec = api_spec()
    examples, _ = json_examples((DOCS / "api.md").read_text())
    answer = next(ex for ex in examples if ex.path == "/v1/query" and ex.part == "200")
    assert example_problems(answer, spec) == []
    old = dict(answer.body, citations=[e["citation"] for e in answer.body["evidence"]],
               insufficient=answer.body["insufficient_evidence"], rendered=answer.body["context"])
    del old["insufficient_evidence"], old["context"]
    # Then the check names the missing fields and each field no route sends
    problems = " ".join(example_problems(Example("POST", "/v1/query", "200", old, 1), spec))
    for word in ("'insufficient_evidence' is a required property", "'context' is a required property",
                 "'citations'", "'insufficient'", "'rendered'"):
        assert word in problems, word
    # And a nested extra field, a wrong type, a route with no such answer, an untagged block are caught
    evidence = dict(answer.body["evidence"][0], url="https://x")
    assert example_problems(Example("POST", "/v1/query", "200", dict(answer.body, evidence=[evidence]), 1), spec)
    assert example_problems(Example("POST", "/v1/query", "request", {"question": "q", "limit": "5"}, 1), spec)
    assert example_problems(Example("GET", "/v1/query", "200", {}, 1), spec)
    assert json_examples('```json\n{"a": 1}\n```\n')[1] == [
        "line 1: a JSON block without `METHOD /path request|STATUS` after ```json"]


def test_the_citation_check_example_is_what_the_check_answers() -> None:
    from freshindex.injection.citations import check_answer

    examples, _ = json_examples((DOCS / "api.md").read_text())
    request = next(ex.body for ex in examples if (ex.path, ex.part) == ("/v1/citations/check", "request"))
    answer = next(ex.body for ex in examples if (ex.path, ex.part) == ("/v1/citations/check", "200"))
    assert check_answer(request["answer"], request["packet"]).as_dict() == answer


def test_the_json_to_python_table_is_the_packet_s() -> None:
    # Given the documented answer read back as the Python packet
    from freshindex.injection.types import ContextPacket

    text = (DOCS / "api.md").read_text()
    examples, _ = json_examples(text)
    body = next(ex.body for ex in examples if (ex.path, ex.part) == ("/v1/query", "200") and ex.body["evidence"])
    packet = ContextPacket.from_dict(body)
    rows = _table_rows(text, "| JSON | Python |")
    documented: set[str] = set()
    for row in rows:
        keys, attrs = re.findall(r"`([\w\[\].]+)`", row[0]), re.findall(r"`packet\.(\w+)(?:\(\))?`", row[1])
        assert keys and attrs and (len(keys) == 1 or len(keys) == len(attrs)), row
        # Then every JSON name and its Python attribute(s) hold the same value
        for key, attr in zip(keys, attrs, strict=True) if len(keys) > 1 else ((keys[0], a) for a in attrs):
            value = getattr(packet, attr)
            value = value() if callable(value) else value
            if key.endswith("[].citation"):
                wire = [e["citation"] for e in body[key.split("[]")[0]]]
            else:
                wire = body[key]
            assert _agrees(_plain(value), wire), (key, attr)
            documented.add(key.split("[]")[0])
    # And the table names every field of the answer
    assert documented == set(api_spec()["components"]["schemas"]["ContextPacketBody"]["properties"])


def _plain(value: Any) -> Any:
    """A packet value as JSON would hold it (dataclasses through their as_dict, tuples as lists)."""
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _agrees(python: Any, wire: Any) -> bool:
    """``python`` holds what ``wire`` shows: equal, except that an object may have fields the doc leaves out
    (an optional field; which fields an example may leave out is the schema's ``required``)."""
    if isinstance(wire, dict):
        return isinstance(python, dict) and all(k in python and _agrees(python[k], v) for k, v in wire.items())
    if isinstance(wire, list):
        return isinstance(python, list) and len(python) == len(wire) and all(map(_agrees, python, wire))
    return python == wire


# -- the one formats table against the parser registry --------------------------------------------------------

_FORMATS_HEADER = "| format | extensions |"
#: Extensions that must stay refused (legacy binary Office) or that a reader might expect, probed as well.
_NOT_PARSED = [".doc", ".xls", ".ppt", ".odt", ".rtf", ".json", ".xml", ".epub", ".zip"]


def formats_table() -> list[dict[str, Any]]:
    """The rows of docs/architecture.md's formats table: extensions, media types, parser name."""
    rows = _table_rows((DOCS / "architecture.md").read_text(), _FORMATS_HEADER)
    return [{"format": r[0], "extensions": re.findall(r"`(\.[\w.]+)`", r[1]), "bare": "none" in r[1].split(", "),
             "media_types": re.findall(r"`([\w.+-]+/[\w.+-]+)`", r[2]), "parser": r[3].strip("`")} for r in rows]


def parser_name(fn: Any) -> str:
    """The parse function a registry entry calls: its own name, or (a lambda binding options) the parse_* it calls."""
    if fn.__name__ != "<lambda>":
        return fn.__name__
    called = [n for n in fn.__code__.co_names if n.startswith("parse_")]
    assert len(called) == 1, called
    return called[0]


def registry_extensions() -> set[str]:
    """Every extension the parsing package names (string literals in its source, the code languages, the
    media types' extensions) plus a few it must not parse: the candidates to ask the registry about."""
    import ast
    import inspect

    from freshindex.workers import parsing
    from freshindex.workers.parsing.code import LANGUAGES

    literals = {n.value for n in ast.walk(ast.parse(inspect.getsource(parsing)))
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"\.[a-z0-9]+", n.value)}
    return literals | set(LANGUAGES) | set(parsing.MEDIA_TYPES.values()) | set(_NOT_PARSED)


def format_problems(rows: list[dict[str, Any]]) -> list[str]:
    """Where the table and the registry disagree, both ways."""
    from freshindex.workers.parsing import MEDIA_TYPES, Parsers

    parsers, problems, listed = Parsers(), [], set()
    for row in rows:
        for ext in row["extensions"]:
            listed.add(ext)
            for key in (f"docs/file{ext}", f"docs/FILE{ext.upper()}"):
                if not parsers.supports(key):
                    problems.append(f"{row['format']}: {key} has no parser")
                elif parser_name(parsers.for_key(key)) != row["parser"]:
                    problems.append(f"{row['format']}: {key} is read by {parser_name(parsers.for_key(key))}")
        if row["bare"] and parser_name(parsers.for_key("docs/README")) != row["parser"]:
            problems.append(f"{row['format']}: a key without an extension is not read by {row['parser']}")
        for media in row["media_types"]:
            if MEDIA_TYPES.get(media) not in row["extensions"]:
                problems.append(f"{row['format']}: {media} is read as {MEDIA_TYPES.get(media)}")
    problems += [f"{ext} is parsed but not in the table" for ext in sorted(registry_extensions() - listed)
                 if parsers.supports(f"docs/file{ext}")]
    documented = {m for row in rows for m in row["media_types"]}
    problems += [f"{media} is parsed but not in the table" for media in sorted(set(MEDIA_TYPES) - documented)]
    if sum(row["bare"] for row in rows) != 1:
        problems.append("one row reads keys without an extension")
    return problems


def test_the_formats_table_is_the_parser_registry() -> None:
    rows = formats_table()
    assert {"Word", "PowerPoint", "Excel", "PDF", "Markdown", "HTML"} <= {r["format"] for r in rows}
    assert format_problems(rows) == []


def test_legacy_office_files_are_refused_as_the_table_says() -> None:
    from freshindex.workers.parsing import Parsers

    text = (DOCS / "architecture.md").read_text()
    assert "legacy binary Office files (`.doc`, `.xls`, `.ppt`)" in text
    assert not any(Parsers().supports(f"x{ext}") for ext in (".doc", ".xls", ".ppt"))


def test_the_formats_check_catches_a_missing_row_a_wrong_parser_and_a_stray_extension() -> None:
    rows = formats_table()
    without_office = [r for r in rows if r["format"] not in ("Word", "PowerPoint", "Excel")]
    problems = format_problems(without_office)
    assert {".docx is parsed but not in the table", ".pptx is parsed but not in the table",
            ".xlsx is parsed but not in the table"} <= set(problems)
    assert any("wordprocessingml" in p for p in problems)
    wrong = [dict(r, parser="parse_plain") if r["format"] == "PDF" else r for r in rows]
    assert format_problems(wrong) == ["PDF: docs/file.pdf is read by parse_pdf", "PDF: docs/FILE.PDF is read by parse_pdf"]
    stray = [dict(r, extensions=[*r["extensions"], ".doc"]) if r["format"] == "Word" else r for r in rows]
    assert format_problems(stray) == ["Word: docs/file.doc has no parser", "Word: docs/FILE.DOC has no parser"]


def test_the_readme_names_office_and_links_the_one_table() -> None:
    text = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md#supported-formats)" in text
    assert all(word in text for word in ("Word", "PowerPoint", "Excel"))
    assert ".docx" not in text  # the extensions are listed once, in the table


# -- the integration lines say which knowledge base they ask ---------------------------------------------------

_ASKS = re.compile(r"FreshIndexRetriever\(|client\.retrieve\(")


def calls_without_kb(text: str) -> list[str]:
    """Lines of code (fenced or inline) that build a retriever or ask a client, naming no kb. (The MCP
    tools take a kb in every call, so an MCP command line may leave it to the settings.)"""
    code = [line for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M) for line in m.group(1).splitlines()]
    code += re.findall(r"`([^`\n]+)`", "\n".join(_prose_lines(text)))
    return [line.strip() for line in code if _ASKS.search(line) and "kb=" not in line]


@pytest.mark.parametrize("doc", ["README.md", "docs/api.md"])
def test_integration_lines_name_their_knowledge_base(doc: str) -> None:
    # (an integration line without kb quietly asks `default`)
    assert calls_without_kb((ROOT / doc).read_text()) == []


def test_a_line_without_kb_is_caught() -> None:
    old = ("```python\nFreshIndexRetriever(base_url=url, token=key).invoke(q)\n"
           "packet = client.retrieve(q, kb=\"default\")\n```\nor `FreshIndexRetriever(url, token=key)`\n")
    assert calls_without_kb(old) == ["FreshIndexRetriever(base_url=url, token=key).invoke(q)",
                                     "FreshIndexRetriever(url, token=key)"]

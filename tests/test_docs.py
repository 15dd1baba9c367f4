"""The README and docs/ stay true to the code: the generated configuration reference, links, tables.

``docs/configuration.md`` is generated from the settings models
(``freshindex config reference``); these tests fail when the committed file
is stale, when a setting has no description, when a relative link in
README.md or docs/*.md points at a missing file or heading, and when a table
the code also states (exit codes, the parts) drifts from it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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

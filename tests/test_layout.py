"""The repository follows the design card: real top-level parts, imports one way."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT

PARTS = ["core", "settings", "registry", "vectorstore", "workers", "snapshots", "acl", "schedules", "injection",
         "health", "api", "freshindex"]


def part_of(module: str) -> str:
    """The part a ``freshindex.<part>...`` module belongs to (``freshindex`` for the CLI package itself)."""
    names = module.split(".")
    if names[0] != "freshindex":
        return names[0]
    return names[1] if len(names) > 1 and names[1] in PARTS else "freshindex"


def imports_of(package: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(part_of(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "freshindex":
                    found.update(a.name if a.name in PARTS else "freshindex" for a in node.names)
                else:
                    found.add(part_of(node.module))
    return found


@pytest.mark.parametrize("part", PARTS)
def test_every_part_holds_real_code(part: str) -> None:
    code = [p for p in (ROOT / part).rglob("*.py") if p.name != "__init__.py" or len(p.read_text()) > 400]
    assert code, f"{part}/ has no code"
    assert sum(len(p.read_text().splitlines()) for p in code) > 30


@pytest.mark.parametrize(
    ("part", "forbidden"),
    [
        ("core", set(PARTS) - {"core"}),
        ("injection", {"workers", "freshindex", "api", "registry"}),
        ("workers", {"freshindex", "api"}),
        ("snapshots", {"workers", "freshindex", "api", "injection"}),
        ("registry", {"workers", "snapshots", "injection", "api", "freshindex", "vectorstore"}),
        ("vectorstore", {"workers", "snapshots", "registry", "injection", "api", "freshindex"}),
        ("acl", {"workers", "freshindex", "api", "registry"}),
    ],
)
def test_imports_flow_one_way(part: str, forbidden: set[str]) -> None:
    assert not (imports_of(part) & forbidden)


def test_top_level_layout_matches_the_design_card() -> None:
    for name in ["pyproject.toml", "workers", "schedules", "snapshots", "acl", "tests", "infra", "runbooks",
                 "bench", "examples", "Makefile", "README.md", ".ci/run"]:
        assert (ROOT / name).exists(), name

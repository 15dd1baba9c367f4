"""The repository follows the design card: real top-level parts, imports one way.

:data:`ARROWS` is the one statement of which part may import which; the
parts table in docs/architecture.md says the same and a test compares them.  The check is
transitive: every ``freshindex.*`` import of every module (module level and
inside functions, package ``__init__`` files included, ``TYPE_CHECKING``
blocks excluded because they never run) is followed through the other parts,
and what a part reaches must stay within its arrows.  What it does not see:
imports built from strings at run time (``importlib.import_module(name)``).
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.conftest import ROOT

PARTS = ["core", "settings", "models", "registry", "vectorstore", "workers", "snapshots", "acl", "schedules",
         "injection", "health", "api", "integrations", "evaluation", "cli", "freshindex"]

#: part -> the parts it may import, directly or through any chain of imports.
ARROWS: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "settings": frozenset({"core"}),
    # Embedders, token counters and rerank models: one home for both lines.
    "models": frozenset({"core", "settings"}),
    "registry": frozenset({"core", "settings"}),
    "vectorstore": frozenset({"core"}),
    "health": frozenset({"core"}),
    "acl": frozenset({"core", "vectorstore"}),
    "injection": frozenset({"core", "settings", "models", "acl", "vectorstore"}),
    "snapshots": frozenset({"core", "settings", "models", "registry", "vectorstore", "health"}),
    "schedules": frozenset({"core", "settings", "registry", "health"}),
    "workers": frozenset({"core", "settings", "models", "registry", "vectorstore", "health", "snapshots", "schedules",
                          "acl"}),
    "api": frozenset({"core", "settings", "models", "registry", "vectorstore", "health", "acl", "injection"}),
    # LangChain, LlamaIndex, MCP: thin, over the HTTP client; never the service.
    "integrations": frozenset({"core", "acl", "vectorstore", "injection"}),
    # Golden sets asked through the injection client; the registry and store are read through the services given.
    "evaluation": frozenset({"core", "settings", "models", "acl", "vectorstore", "injection"}),
    # The command line (freshindex/cli/): the one part that reads argv and prints; nothing else imports it.
    "cli": frozenset(PARTS) - {"cli"},
    # The composition root, the Celery entry point, serve's dispatcher, logging: everything but the CLI.
    "freshindex": frozenset(PARTS) - {"freshindex", "cli"},
}


def part_of(module: str) -> str:
    """The part a ``freshindex.<part>...`` module belongs to (``freshindex`` for the root modules).

    ``freshindex.__main__`` (``python -m freshindex``) is the CLI's: it only calls :func:`freshindex.cli.main`.
    """
    if module == "freshindex.__main__":
        return "cli"
    names = module.split(".")
    return names[1] if len(names) > 1 and names[1] in PARTS and names[1] != "freshindex" else "freshindex"


#: The design card's parts stay at the repository's top level; every other part lives inside freshindex/.
CARD_PARTS = ("workers", "schedules", "snapshots", "acl")


def part_dir(root: Path, part: str) -> Path:
    """The folder holding ``part`` in a tree rooted at ``root``."""
    if part == "freshindex" or part in CARD_PARTS:
        return root / part
    return root / "freshindex" / part


def module_files(root: Path) -> dict[str, Path]:
    """``freshindex.<part>.x.y`` -> its file, for every part folder under ``root`` (migrations left out)."""
    found: dict[str, Path] = {}
    for part in PARTS:
        for path in part_dir(root, part).rglob("*.py"):
            rel = path.relative_to(part_dir(root, part)).with_suffix("").parts
            if "migrations" in rel or (part == "freshindex" and len(rel) > 1 and rel[0] in PARTS):
                continue
            if rel[-1] == "__init__":
                rel = rel[:-1]
            prefix = ["freshindex"] if part == "freshindex" else ["freshindex", part]
            found[".".join([*prefix, *rel])] = path
    return found


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node except those under ``if TYPE_CHECKING:`` (imports for annotations never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _with_parents(module: str, known: dict[str, Path]) -> set[str]:
    """``module`` and every package ``__init__`` importing it runs (``a.b.c`` runs ``a.b``).

    The namespace package ``freshindex`` itself is left out as a parent: its
    ``__init__`` only extends ``__path__`` and imports nothing, and every
    import runs it.  Importing it by name (``from freshindex import __version__``)
    is still an arrow to the root.
    """
    names = module.split(".")
    return {".".join(names[:i]) for i in range(2, len(names) + 1)} & known.keys()


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the ``freshindex.*`` modules importing it runs directly (package ``__init__`` files included)."""
    files = module_files(root)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges: set[str] = set()
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    edges |= _with_parents(alias.name, files) | ({"freshindex"} & {alias.name})
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                edges |= _with_parents(target, files)
                for alias in node.names:  # `from freshindex.x import y` where y is a submodule
                    submodule = f"{target}.{alias.name}"
                    if submodule in files:
                        edges |= _with_parents(submodule, files)
                    elif target == "freshindex":  # a name of the root package itself
                        edges.add(target)
        graph[module] = edges - {module}
    return graph


def reach(graph: dict[str, set[str]], start: Iterable[str]) -> dict[str, list[str]]:
    """Every module reachable from ``start``, each with one import chain that gets there."""
    paths = {m: [m] for m in start}
    todo = list(paths)
    while todo:
        module = todo.pop()
        for dep in sorted(graph.get(module, ())):
            if dep not in paths:
                paths[dep] = [*paths[module], dep]
                todo.append(dep)
    return paths


def violations(graph: dict[str, set[str]], arrows: dict[str, frozenset[str]]) -> dict[str, list[str]]:
    """part -> the import chains by which it reaches a part its arrows do not allow."""
    bad: dict[str, list[str]] = {}
    for part, allowed in arrows.items():
        own = [m for m in graph if part_of(m) == part]
        for module, chain in sorted(reach(graph, own).items()):
            if part_of(module) not in allowed | {part}:
                bad.setdefault(part, []).append(" -> ".join(chain))
    return bad


def _copy_tree(dest: Path) -> Path:
    shutil.copytree(ROOT / "freshindex", dest / "freshindex", ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    for part in CARD_PARTS:
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    return dest


@pytest.mark.parametrize("part", PARTS)
def test_every_part_holds_real_code(part: str) -> None:
    code = [p for p in part_dir(ROOT, part).rglob("*.py") if p.name != "__init__.py" or len(p.read_text()) > 400]
    assert code, f"{part}/ has no code"
    assert sum(len(p.read_text().splitlines()) for p in code) > 30


def test_the_arrows_name_every_part_and_only_parts() -> None:
    assert set(ARROWS) == set(PARTS)
    assert all(allowed <= set(PARTS) - {part} for part, allowed in ARROWS.items())


def test_imports_flow_one_way_transitively() -> None:
    # Given the real tree's import graph, When each part's reach is followed, Then it stays within its arrows
    graph = import_graph(ROOT)
    assert len(graph) > 50  # the walk found the tree
    assert violations(graph, ARROWS) == {}


def test_a_planted_function_level_import_is_caught_where_it_is_and_by_who_imports_it(tmp_path: Path) -> None:
    # Given a copy of the tree where acl (which injection imports) reaches into the workers inside a function
    tree = _copy_tree(tmp_path)
    principal = tree / "acl" / "principal.py"
    principal.write_text(principal.read_text() + "\n\ndef _planted():\n    from freshindex.workers import pipeline\n")
    # When the checker runs, Then both acl and, through it, injection are reported with the chain
    bad = violations(import_graph(tree), ARROWS)
    assert "acl" in bad and "injection" in bad
    assert any("freshindex.acl.principal -> freshindex.workers" in chain for chain in bad["injection"])
    assert "api" in bad  # api imports acl too


def test_a_planted_import_in_a_package_init_is_caught(tmp_path: Path) -> None:
    # Given a copy where vectorstore's package __init__ imports the registry
    tree = _copy_tree(tmp_path)
    init = part_dir(tree, "vectorstore") / "__init__.py"
    init.write_text(init.read_text() + "\nfrom freshindex.registry import Registry  # noqa\n")
    bad = violations(import_graph(tree), ARROWS)
    # Then the injection client is caught, although it imports only freshindex.vectorstore.base
    assert "vectorstore" in bad and "injection" in bad and "acl" in bad
    assert "snapshots" not in bad  # snapshots may import the registry


def test_the_cli_lives_in_its_package_and_nothing_else_imports_it(tmp_path: Path) -> None:
    # Given the real tree, Then every module that imports click (reads a command line) is in freshindex/cli/
    files = module_files(ROOT)
    clicking = {m for m, p in files.items() for node in _runtime_nodes(ast.parse(p.read_text()))
                if isinstance(node, ast.Import | ast.ImportFrom) and "click" in ast.unparse(node).split()[1:2]}
    assert "freshindex.cli.sync" in clicking and {part_of(m) for m in clicking} == {"cli"}
    assert not list((ROOT / "freshindex").glob("*_commands.py"))
    # Given a copy where the composition root reaches into the CLI inside a function, Then that is caught
    tree = _copy_tree(tmp_path)
    services = tree / "freshindex" / "services.py"
    services.write_text(services.read_text() + "\n\ndef _planted():\n    from freshindex.cli import support\n")
    bad = violations(import_graph(tree), ARROWS)
    assert any("freshindex.services -> freshindex.cli" in chain for chain in bad["freshindex"])


def _documented_arrows() -> dict[str, frozenset[str]]:
    """The ``imports`` column of the parts table in docs/architecture.md (its Parts section)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Parts", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| part |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    col = next(i for i, c in enumerate(columns) if c.startswith("imports"))
    table: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`(?:freshindex/)?(\w+)/`", cells[0]) if line.startswith("| `") else None
        if name is None or name.group(1) not in PARTS:
            continue
        cell = cells[col]
        names = frozenset(re.findall(r"`(\w+)`", cell))
        # "every part" or "every part but `x`"
        table[name.group(1)] = frozenset(PARTS) - {name.group(1)} - names if "every part" in cell else names
    return table


def test_the_documented_parts_table_states_the_same_arrows() -> None:
    assert _documented_arrows() == ARROWS


def test_top_level_layout_matches_the_design_card() -> None:
    for name in ["pyproject.toml", "workers", "schedules", "snapshots", "acl", "tests", "infra", "runbooks",
                 "bench", "examples", "Makefile", "README.md", ".ci/run"]:
        assert (ROOT / name).exists(), name


def test_no_part_is_imported_under_a_second_name() -> None:
    # Every import of a part goes through `freshindex.`: `registry.db` and `freshindex.registry.db` would be two
    # module objects with two sets of globals.
    bare = set(PARTS) - {"freshindex"}
    files = [*module_files(ROOT).values(), *(p for d in ("tests", "bench", "examples") for p in (ROOT / d).rglob("*.py"))]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in bare]
    assert len(files) > 200 and found == []


#: Reading limits (issue: a house a newcomer can change): a function a reader can hold, a module by concern.
MAX_FUNCTION_LINES, MAX_MODULE_LINES = 100, 600


def test_no_function_over_100_lines_and_no_module_over_600() -> None:
    long_functions, long_modules = [], []
    for module, path in module_files(ROOT).items():
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            long_modules.append(f"{module}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{module}.{node.name}: {lines} lines")
    assert long_functions == [] and long_modules == []


#: Write-side modules that still write a metric themselves, with why (everything else reports to the observer).
OWN_METRICS = {
    "freshindex.workers.task_base": "the task layer's own counter (freshindex_tasks_total), as a Dramatiq middleware",
    "freshindex.workers.runner": "an inline run aborted by an exception: closed and counted by the runner",
}


def _metric_writes(text: str) -> list[int]:
    """Lines reaching into a ``metrics`` object (``ctx.metrics.documents...``, ``metrics.builds...``)."""
    return sorted({node.lineno for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Attribute)
                   and ((isinstance(node.value, ast.Attribute) and node.value.attr == "metrics")
                        or (isinstance(node.value, ast.Name) and node.value.id == "metrics"))})


def test_write_side_steps_report_to_the_observer_and_write_no_metric() -> None:
    # Given every module of the workers and snapshots parts (steps, stages, the builder and its mixins)
    files = {m: p for m, p in module_files(ROOT).items() if part_of(m) in ("workers", "snapshots")}
    assert "freshindex.workers.pipeline" in files and "freshindex.snapshots.builder" in files
    # Then none writes a metric: its events go to health.observer.SyncObserver, which writes metrics and logs
    found = {m: lines for m, p in files.items() if m not in OWN_METRICS and (lines := _metric_writes(p.read_text()))}
    assert found == {}
    assert _metric_writes("ctx.metrics.documents.labels('s', 'added').inc()\n") == [1]  # the check sees one


# -- typed edges (issue #41 item 7): no import cycle, no long parameter list ---------------------------------------


def module_edges(root: Path) -> dict[str, set[str]]:
    """Module -> the ``freshindex.*`` modules its import statements name (module level and inside functions,
    ``TYPE_CHECKING`` blocks excluded).

    Unlike :func:`import_graph`, the package ``__init__`` files an import runs on the way are not edges: a
    package that re-exports its submodules, each importing a sibling by its full name, is not a cycle (the
    package is already being initialised).  ``from freshindex.registry import X`` inside the registry still
    is one: it names the package, whose ``__init__`` imports the module back.
    """
    files = module_files(root)

    def named(target: str) -> set[str]:  # the deepest known module a dotted name is in
        names = target.split(".")
        return next(({m} for i in range(len(names), 1, -1) if (m := ".".join(names[:i])) in files), set())

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        edges: set[str] = set()
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(m for alias in node.names for m in named(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    edges |= {f"{target}.{alias.name}"} if f"{target}.{alias.name}" in files else named(target)
        graph[module] = edges - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of two or more modules (Tarjan), sorted, as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # recursive: the import graph is a few hundred modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while (top := stack.pop()) != node:
                group.append(top)
            if group:
                groups.append(sorted([*group, node]))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(groups)


#: Import cycles left in files their owners are changing now, each with why; empty: none is allowed.
ALLOWED_CYCLES: list[list[str]] = []


def test_no_import_cycle_between_modules() -> None:
    # Given the real tree's module-to-module imports (function-level ones too), Then no group of modules
    # imports itself round: each could only be loaded in one order, and a function-level import hides that
    cycles = import_cycles(module_edges(ROOT))
    assert [c for c in cycles if c not in ALLOWED_CYCLES] == []
    assert [c for c in ALLOWED_CYCLES if c not in cycles] == []  # a broken cycle leaves the list


def test_a_planted_function_level_cycle_is_found(tmp_path: Path) -> None:
    # Given a copy where acl.model imports acl.access inside a function (acl.access imports acl.model)
    tree = _copy_tree(tmp_path)
    model = tree / "acl" / "model.py"
    original = model.read_text()
    model.write_text(original + "\n\ndef _planted():\n    from freshindex.acl import access\n")
    pair = {"freshindex.acl.access", "freshindex.acl.model"}
    # Then that cycle is reported, and the same import under TYPE_CHECKING is not
    assert any(pair <= set(c) for c in import_cycles(module_edges(tree)))
    model.write_text(original + "\n\nif TYPE_CHECKING:\n    from freshindex.acl import access\n")
    assert not any(pair <= set(c) for c in import_cycles(module_edges(tree)))


#: The most parameters a function takes: more is a record (a dataclass of settings or of one thing's fields).
MAX_PARAMETERS = 8

#: Functions over :data:`MAX_PARAMETERS` in files owned by others right now (issue #41 item 7 moved everything
#: else to records), each with its count today; the gate fails if one grows or a new one appears, and when an
#: entry is fixed it leaves the list.  Qualified name: ``freshindex.<part>.<module>.<Class>.<function>``.
PARAMETER_ALLOWANCE: dict[str, int] = {
    # empty since issue #41: a function that needs more takes a record (a click command: cli/grouped.py)
}


def _is_record(cls: ast.ClassDef) -> bool:
    """A dataclass, a pydantic model, a NamedTuple or a TypedDict: a class whose fields are its parameters."""
    names = {ast.unparse(d.func if isinstance(d, ast.Call) else d).rpartition(".")[2] for d in cls.decorator_list}
    bases = {ast.unparse(b).rpartition(".")[2] for b in cls.bases}
    return "dataclass" in names or bool(bases & {"BaseModel", "NamedTuple", "TypedDict"})


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool, record: bool) -> int:
    """How many parameters ``fn`` takes, for :data:`MAX_PARAMETERS`.

    Counted: positional-only, positional-or-keyword and keyword-only parameters.  Not counted: ``self`` or
    ``cls`` of a function defined in a class body (``method``); ``*args`` and ``**kwargs``; and the keyword-only
    parameters of the ``__init__`` of a record (``record``: a class that :func:`_is_record`), which are its
    named fields.  "Outside records" means every other function: module functions, nested functions, every
    method of a non-record class, and a record's methods other than ``__init__``.
    """
    args = fn.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    if method and positional[:1] in (["self"], ["cls"]):
        positional = positional[1:]
    keyword = [] if record and fn.name == "__init__" else args.kwonlyargs
    return len(positional) + len(keyword)


def long_parameter_lists(root: Path) -> dict[str, int]:
    """Qualified name -> parameter count, for every function over :data:`MAX_PARAMETERS` under ``root``."""
    found: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str, cls: ast.ClassDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}.{child.name}", child)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                count = parameter_count(child, method=cls is not None, record=cls is not None and _is_record(cls))
                if count > MAX_PARAMETERS:
                    found[f"{prefix}.{child.name}"] = count
                walk(child, f"{prefix}.{child.name}", None)
            else:
                walk(child, prefix, cls)

    for module, path in module_files(root).items():
        walk(ast.parse(path.read_text()), module, None)
    return found


def test_no_function_takes_more_than_8_parameters_outside_the_allowance() -> None:
    found = long_parameter_lists(ROOT)
    assert {name: n for name, n in found.items() if n > PARAMETER_ALLOWANCE.get(name, MAX_PARAMETERS)} == {}
    modules = set(module_files(ROOT)) - {"freshindex"}  # the root package holds no function
    gone = [name for name in PARAMETER_ALLOWANCE if name not in found
            and any(name.startswith(f"{m}.") for m in modules)]  # an entry whose module moved waits for the move
    assert gone == [], "fixed: take these out of PARAMETER_ALLOWANCE"


def test_the_parameter_count_skips_self_star_args_and_record_fields() -> None:
    source = (
        "class C:\n    def m(self, a, b, c, d, e, f, g, h, *args, **kwargs): ...\n"
        "def f(a, b, c, d, e, f, g, h, i): ...\n"
        "@dataclass\nclass R:\n    def __init__(self, a, *, b, c, d, e, f, g, h, i, j): ...\n"
        "class S:\n    def __init__(self, a, *, b, c, d, e, f, g, h, i, j): ...\n"
    )
    tree = ast.parse(source)
    counts = {}
    for node in tree.body:
        cls = node if isinstance(node, ast.ClassDef) else None
        for fn in (cls.body if cls else [node]):
            assert isinstance(fn, ast.FunctionDef)
            counts[f"{cls.name}." if cls else ""] = parameter_count(fn, method=cls is not None,
                                                                     record=cls is not None and _is_record(cls))
    assert counts == {"C.": 8, "": 9, "R.": 1, "S.": 10}

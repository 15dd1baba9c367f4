"""The wheel installs one import name, ``freshindex``, and everything the service needs at run time.

The design card's parts are folders at the repository's top level; installed,
they must live under ``freshindex.*`` so that an application importing the
client next to its own ``settings`` or ``api`` module breaks nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

PARTS = ["core", "settings", "models", "registry", "vectorstore", "workers", "snapshots", "acl", "schedules", "injection",
         "health", "api"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools writes build/ and *.egg-info into the source tree, and a stale
    # build/ of the checkout could smuggle deleted modules into the wheel.
    src = tmp_path_factory.mktemp("src") / "freshindex"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info",
                                                                "__pycache__", ".freshindex*", ".pytest_cache"))
    # --no-build-isolation: the venv already has setuptools; no download needed.
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300, cwd=out,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("freshindex-*.whl")
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def test_the_wheel_installs_nothing_generic_at_the_top_level(wheel: list[str]) -> None:
    tops = {name.split("/", 1)[0] for name in wheel}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"freshindex"}, sorted(tops)
    for part in PARTS:
        assert f"freshindex/{part}/__init__.py" in wheel, part
        assert not any(name.startswith(f"{part}/") for name in wheel), part


def test_the_wheel_carries_the_migrations_and_subpackages(wheel: list[str]) -> None:
    names = set(wheel)
    assert "freshindex/registry/migrations/env.py" in names
    assert "freshindex/registry/migrations/script.py.mako" in names
    versions = sorted(n for n in names if n.startswith("freshindex/registry/migrations/versions/"))
    on_disk = sorted((ROOT / "freshindex/registry/migrations/versions").glob("*.py"))
    assert len(versions) == len(on_disk) >= 4
    for sub in ("chunking", "connectors", "embedding", "parsing"):
        assert f"freshindex/workers/{sub}/__init__.py" in names
    assert "freshindex/cli/__init__.py" in names and "freshindex/cli/context.py" in names
    assert "freshindex/dispatch.py" in names and "freshindex/__main__.py" in names


def test_the_source_checkout_resolves_parts_under_the_namespace() -> None:
    code = ("import importlib.util, freshindex.settings, freshindex.workers.parsing;"
            "print(freshindex.settings.__file__);"
            "print([importlib.util.find_spec(n) is None for n in ('settings', 'core', 'api', 'workers')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/",
                         timeout=60).stdout.splitlines()
    assert Path(out[0]) == ROOT / "freshindex" / "settings" / "__init__.py"
    assert out[1] == "[True, True, True, True]"

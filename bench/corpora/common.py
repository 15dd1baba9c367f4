"""What every corpus module shares: the cache folder, one Debian package fetched and unpacked, the
golden questions, the command line, and the page scanner that turns a PDF page into an image.

A corpus module (``bench/corpora/<name>.py``) exposes ``materialise(cache, dest)`` and
``verify(dest, questions)``; these are the pieces they are built from.  Imports nothing of freshindex,
so the golden sets can be verified without the product installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pymupdf

GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def cache_dir(name: str) -> Path:
    """``$FRESHINDEX_BENCH_CACHE/<name>`` (default ``~/.cache/freshindex-bench/<name>``)."""
    return Path(os.environ.get("FRESHINDEX_BENCH_CACHE", Path.home() / ".cache" / "freshindex-bench")) / name


def run(cmd: list[str], cwd: Path | None = None) -> bool:
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def fetch_deb(package: str, version: str, cache: Path) -> Path:
    """The .deb of ``package=version`` in ``cache``, downloaded when absent (``apt-get update`` only if the
    first try fails)."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = cache / f"{package}_{version.replace(':', '%3a')}_all.deb"
    if deb.is_file():
        return deb
    spec = f"{package}={version}"
    if not run(["apt-get", "download", spec], cwd=cache):
        run(["apt-get", "update"])
        if not run(["apt-get", "download", spec], cwd=cache):
            raise RuntimeError(f"apt-get download {spec} failed (is the version still in the archive?)")
    if not deb.is_file():
        raise RuntimeError(f"apt-get download {spec} did not leave {deb.name} in {cache}")
    return deb


def fetch_pool_deb(url: str, sha256: str, cache: Path) -> Path:
    """A .deb from the Debian archive's pool by URL (a release that the apt sources here do not list), in
    ``cache``, downloaded when absent and checked against ``sha256`` (from that release's Packages index)."""
    cache.mkdir(parents=True, exist_ok=True)
    deb = cache / url.rsplit("/", 1)[1]
    if deb.is_file() and hashlib.sha256(deb.read_bytes()).hexdigest() == sha256:
        return deb
    part = deb.with_name(deb.name + ".part")
    with urllib.request.urlopen(url, timeout=120) as r, part.open("wb") as out:
        shutil.copyfileobj(r, out)
    got = hashlib.sha256(part.read_bytes()).hexdigest()
    if got != sha256:
        part.unlink()
        raise RuntimeError(f"{url}: SHA-256 {got}, the release's Packages index says {sha256}")
    part.rename(deb)
    return deb


def unpack(deb: Path, root: Path, marker: Path) -> Path:
    """``deb`` unpacked into ``root`` (once: kept while ``root / marker`` exists); returns ``root``."""
    if (root / marker).exists():
        return root
    tmp = root.with_name(f"unpacking-{root.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    if not run(["dpkg-deb", "-x", str(deb), str(tmp)]):
        raise RuntimeError(f"dpkg-deb -x {deb} failed")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


def moved(q: dict, move: Callable[[str], str]) -> dict:
    """Golden question ``q`` with its page and distractor pages passed through ``move`` (into a version folder)."""
    out = {**q, "page": move(q["page"])}
    if "distractor_pages" in q:
        out["distractor_pages"] = [move(p) for p in q["distractor_pages"]]
    return out


def versioned_questions(golden: list[dict], new_dir: str) -> list[dict]:
    """The answerable questions of ``golden``, moved into the newer release's folder ``new_dir``."""
    return [moved(q, lambda p: f"{new_dir}/{p}") for q in golden if q["kind"] != "unanswerable"]


def unversioned(q: dict, new_dir: str) -> dict:
    """A question of :func:`versioned_questions` as its golden set has it."""
    return moved(q, lambda p: p.removeprefix(f"{new_dir}/"))


def verify_versioned(verify: Callable[[Path, list[dict]], list[str]], golden: list[dict], dest: Path,
                     dirs: tuple[str, str], questions: list[dict]) -> list[str]:
    """Problems of a two-release corpus in ``dest`` (``dirs``: the newer release's folder, the older's) shared by
    every pair: the WHOLE golden set against the newer side (its counts hold for the whole set), each question
    asked being a golden one, and nothing but the two folders in ``dest``."""
    problems = verify(dest / dirs[0], golden)
    known = {q["id"]: q for q in golden}
    problems += [f"{q['id']}: not the golden question" for q in questions
                 if known.get(q["id"]) != unversioned(q, dirs[0])]
    found = sorted(p.name for p in dest.iterdir())
    if found != sorted(dirs):
        problems.append(f"dest holds {found}, expected {list(dirs)}")
    return problems


def load_questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(doc: str, name: str, materialise: Callable[[Path, Path], Path],
         verify: Callable[[Path, list[dict]], list[str]], pattern: str) -> None:
    """``python -m bench.corpora.<name>``: materialise the corpus, verify its golden set, exit 1 on a problem."""
    default = cache_dir(name)
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=default)
    parser.add_argument("--dest", type=Path, default=default / "corpus")
    parser.add_argument("--questions", type=Path, default=GOLDENS / name / "questions.jsonl")
    args = parser.parse_args()
    root = materialise(args.cache, args.dest)
    found = list(root.rglob(pattern))
    print(f"corpus: {root} ({len(found)} documents, {sum(p.stat().st_size for p in found)} bytes)")
    problems = verify(root, load_questions(args.questions))
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


def scan_page(src: pymupdf.Document, pno: int, *, dpi: int = 200, angle: float = 0.6, seed: int = 1,
              noise: float = 0.003) -> pymupdf.Document:
    """Page ``pno`` (0-based) of ``src`` as an image-only page: rotated, blurred, speckled, no text layer."""
    r = src[pno].rect
    tmp = pymupdf.open()
    pg = tmp.new_page(width=r.width, height=r.height)
    pg.draw_rect(pg.rect, color=None, fill=(1, 1, 1))
    pg.show_pdf_page(pg.rect, src, pno, rotate=angle, keep_proportion=True)
    pix = pg.get_pixmap(dpi=dpi, colorspace=pymupdf.csGRAY, alpha=False)
    small = pymupdf.Pixmap(pix, int(pix.width * 0.7), int(pix.height * 0.7))  # blur: down and up again
    pix = pymupdf.Pixmap(small, pix.width, pix.height)
    buf = bytearray(pix.samples)
    rnd = random.Random(seed)
    for _ in range(int(len(buf) * noise)):
        buf[rnd.randrange(len(buf))] = rnd.choice((140, 190, 225))
    pix = pymupdf.Pixmap(pymupdf.csGRAY, pix.width, pix.height, bytes(buf), False)
    out = pymupdf.open()
    page = out.new_page(width=r.width, height=r.height)
    page.insert_image(page.rect, stream=pix.tobytes("png"))
    return out

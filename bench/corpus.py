"""A deterministic generated corpus for benchmarks: Markdown runbooks and guides."""

from __future__ import annotations

import random
from pathlib import Path

_WORDS = (
    "service deploy rollback replica shard index queue broker worker latency budget alert page owner "
    "migration schema ledger invoice billing customer region cluster node disk memory cache token "
    "retry backoff timeout quota tenant audit policy access credential rotate certificate expire "
    "snapshot restore archive retention compliance incident postmortem dashboard metric threshold"
).split()


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 16))]
    return " ".join(words).capitalize() + "."


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))


def make_document(n: int) -> str:
    rng = random.Random(n)
    lines = [f"# Runbook {n}: {rng.choice(_WORDS)} {rng.choice(_WORDS)}", "", _paragraph(rng), ""]
    for s in range(rng.randint(2, 3)):
        lines += [f"## Step {s + 1}: {rng.choice(_WORDS)}", "", _paragraph(rng), ""]
    return "\n".join(lines)


def write_corpus(root: Path, documents: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n in range(documents):
        folder = root / f"team-{n % 20:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"runbook-{n:05d}.md").write_text(make_document(n))
    return root

"""Where benchmarks write: ``bench/results/<name>.json`` and ``<name>.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results"


def table(header: list[str], align: list[str], rows: list[list[Any]]) -> list[str]:
    """Markdown table lines; ``align`` is ``l`` or ``r`` per column."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def write(name: str, data: dict[str, Any], markdown: list[str]) -> None:
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (OUT / f"{name}.md").write_text("\n".join(markdown) + "\n")
    print("\n".join(markdown))

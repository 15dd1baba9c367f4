"""Give the C heap's free pages back to the operating system.

glibc keeps memory that Python, onnxruntime and the vector engine have
freed inside its heap arenas, where the process's resident size still
counts it; another thread's arena cannot reuse it.  ``malloc_trim(0)``
returns every whole free page.  Measured by sampling the process's
anonymous resident memory on full builds of PostgreSQL 15's 1,167-page
manual: 78 MB returned after a build without a model, 47 MB at the start of
a build with one, and 226 MB once the ONNX session was let go (its figures
in docs/benchmarks.md, throughput).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc (musl, macOS): nothing to trim
        return None
    return trim


def trim_heap() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot (or had none to give)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


__all__ = ["trim_heap"]

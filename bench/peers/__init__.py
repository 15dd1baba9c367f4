"""Other indexing systems run beside freshindex by ``bench.throughput``: one module each, one child process a run.

Benchmark code only: nothing under ``freshindex/`` imports these, and their libraries (CocoIndex, asyncpg) are in
the ``bench`` extra, never a runtime dependency.  They do not judge results; ``bench.throughput`` does.
"""

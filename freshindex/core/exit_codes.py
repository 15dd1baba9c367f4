"""The process exit codes of the ``freshindex`` command, in one place.

The runner derives a sync's code from its report (:attr:`SyncReport.exit_code`),
the CLI exits with these members, and docs/api.md's table lists the same numbers:
a script that reads them can rely on each meaning exactly one thing.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # done; a partial sync (some documents failed) is still OK
    FAILED = 1  # nothing indexed, the source could not be listed, or a command failed
    USAGE = 2  # bad usage or configuration, or the server extras are not installed
    VERIFICATION_HELD = 3  # a check failed: verification held the build (the last snapshot serves), or a check command found a problem
    DELETIONS_HELD = 4  # the deletion guard held the sync's deletions


__all__ = ["ExitCode"]

"""Errors a user can act on: each says what went wrong, where, and how to fix it."""

from __future__ import annotations

import errno

# OS errors that mean "this place cannot be written" (read-only mount, permissions, full disk): the CLI
# turns them into one line naming the path, and read-only caches fall back to memory where they can.
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC})


def unwritable_message(err: OSError) -> str:
    """One line for an OSError in :data:`UNWRITABLE`: what, where, how to fix."""
    where = err.filename if err.filename is not None else "a file"
    return (f"cannot write {where}: {err.strerror}; finished work is kept\n"
            "  how to fix: make that folder writable, or pass another --cache-dir (STEM_CACHE_DIR) / --out")


class StemError(Exception):
    """Base class for errors shown to users without a traceback by the CLI."""


class DataError(StemError):
    """Bad or missing input data, located by file and (when known) line."""

    def __init__(self, what: str, *, path: str | None = None, line: int | None = None, fix: str | None = None):
        self.what = what
        self.path = path
        self.line = line
        self.fix = fix
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        message = f"{where}{what}"
        if fix:
            message += f"\n  how to fix: {fix}"
        super().__init__(message)


class CacheError(StemError):
    """An embedding or plan cache that is incomplete, corrupt or built for other inputs."""


class ConfigError(StemError, ValueError):
    """Settings out of range: one line per violation, each naming the flag and what it allows.

    Also a ValueError, as the type errors of config overrides are, so callers catching those keep working.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        noun = "setting is" if len(self.problems) == 1 else "settings are"
        super().__init__(f"{len(self.problems)} {noun} out of range (nothing was run):\n  "
                         + "\n  ".join(self.problems))

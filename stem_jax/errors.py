"""Errors a user can act on: each says what went wrong, where, and how to fix it."""

from __future__ import annotations


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

"""Crash-safe small files: what resumable caches record their progress with."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so a kill leaves either the old or the new file, never half.

    The temp file lives in the same folder (same filesystem, so ``os.replace`` is atomic), has a
    unique name (two writers never share one, as a fixed ``*.tmp`` name would make them do) and is
    fsynced before the rename.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            try:  # mkstemp makes the file owner-only (0600): keep the replaced file's mode, else a plain file's
                mode = target.stat().st_mode & 0o777
            except OSError:
                mode = 0o644
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(target: Path, text: str) -> None:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    write_bytes_atomic(target, text.encode("utf-8"))


def write_json_atomic(target: Path, payload: dict[str, Any]) -> None:
    write_text_atomic(target, json.dumps(payload, indent=1, sort_keys=True) + "\n")

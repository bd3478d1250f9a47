"""Crash-safe small files: what resumable caches record their progress with."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` so a kill leaves either the old or the new file, never half.

    The temp file lives in the same folder (same filesystem, so ``os.replace`` is atomic) and is
    fsynced before the rename.
    """
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(target: Path, payload: dict[str, Any]) -> None:
    write_text_atomic(target, json.dumps(payload, indent=1, sort_keys=True) + "\n")

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


def write_arrays_with_manifest(folder: Path, prefix: str, arrays: dict[str, Any], manifest: str,
                               meta: dict[str, Any]) -> None:
    """Save ``arrays`` as ``<prefix>-<sha256[:16]>.npz`` and then ``manifest`` (JSON: ``meta`` plus ``arrays`` and
    ``arrays_sha256``, naming that file), each atomically, and only then remove older ``<prefix>*.npz``: a kill
    at any point leaves the old pair or the new one, never a mixed pair. Raises OSError."""
    import hashlib
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    name = f"{prefix}-{digest[:16]}.npz"
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(folder / name, data)
    text = json.dumps({**meta, "arrays": name, "arrays_sha256": digest}, indent=1, sort_keys=True, default=str)
    write_text_atomic(folder / manifest, text + "\n")
    for stale in folder.glob(f"{prefix}*.npz"):
        if stale.name != name:
            stale.unlink(missing_ok=True)


def save_model_files(folder: Path, prefix: str, arrays: dict[str, Any], manifest: str, meta: dict[str, Any], *,
                     what: str, fix: str) -> None:
    """:func:`write_arrays_with_manifest` for a trained model, an OSError reported as a StemError naming ``what``
    could not be written and how to ``fix`` it."""
    from stem_jax.errors import StemError

    try:
        write_arrays_with_manifest(Path(folder), prefix, arrays, manifest, meta)
    except OSError as err:
        raise StemError(f"{folder}: cannot write the {what} ({err.strerror or err})\n  how to fix: {fix}") from None


def read_arrays_with_manifest(folder: Path, manifest: str, damaged: Any) -> tuple[dict[str, Any], dict[str, Any], str]:
    """What :func:`write_arrays_with_manifest` wrote: (meta, arrays, the arrays' sha256). A missing or unreadable
    file, or arrays whose sha256 differs from the recorded one, raise ``damaged(why)`` (an exception to raise)."""
    import hashlib
    import io

    import numpy as np

    try:
        meta = json.loads((Path(folder) / manifest).read_bytes())
        data = (Path(folder) / meta["arrays"]).read_bytes()
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise damaged(str(err).splitlines()[0] if str(err) else type(err).__name__) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("arrays_sha256"):
        raise damaged("its arrays' sha256 differs from the one recorded")
    with np.load(io.BytesIO(data)) as npz:
        return meta, {k: npz[k] for k in npz.files}, digest

"""XLA's persistent compilation cache under the stem_jax cache folder.

Every ``stem-jax`` process compiles the same tracers (one per strategy, steps bucket, capacity
level and padded batch size), and on a CPU compiling them takes longer than the tracing they do
in a MetaQA eval. JAX can keep compiled executables on disk, keyed by the program, the compile
options, the jaxlib version and the device, so a later process loads them instead
(docs/performance.md, "Figures behind the code's constants").
The results are the same executables, so outputs do not change.

``STEM_COMPILE_CACHE`` turns it off (``0``, ``off``, ``false``) or names another folder. A folder
that cannot be written (a read-only cache) leaves the cache off: compiling is only slower.
The folder is kept under 1 GiB by one scan when a process opens it (the oldest programs go first, down to
half), not by JAX's own limit: with that, JAX reads every entry's size and access time on each write, which
adds up in a folder of thousands of programs. ``JAX_COMPILATION_CACHE_MAX_SIZE`` (bytes; ``-1``: no limit)
hands the limit back to JAX instead.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "STEM_COMPILE_CACHE"
FOLDER = "xla-compiled"
MAX_BYTES = 1 << 30  # past this, opening the cache drops the oldest programs down to half
MAX_BYTES_ENV = "JAX_COMPILATION_CACHE_MAX_SIZE"  # JAX's own variable for that limit

_enabled: Path | None = None


def compile_cache_folder(cache_root: Path) -> Path | None:
    """Where executables are kept for ``cache_root``, or None when ``$STEM_COMPILE_CACHE`` turns it off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("0", "off", "false", "no"):
        return None
    return Path(value).expanduser() if value else Path(cache_root) / FOLDER


def prune_compile_cache(folder: Path, max_bytes: int = MAX_BYTES) -> int:
    """Keep ``folder`` under ``max_bytes`` in one scan: past it, the programs written longest ago go first (or
    read longest ago, where JAX's own limit kept access times), down to half, so the next prune is many new
    programs away. Returns the bytes removed; a missing folder, or entries another process removes meanwhile,
    are not an error."""
    entries = []
    try:
        for program in folder.glob("*-cache"):
            try:
                stat = program.stat()
                atime = program.with_name(program.name[: -len("cache")] + "atime")
                used = max(stat.st_mtime_ns, atime.stat().st_mtime_ns if atime.exists() else 0)
            except OSError:
                continue
            entries.append((used, stat.st_size, program, atime))
    except OSError:
        return 0
    total = sum(size for _, size, _, _ in entries)
    if total <= max_bytes:
        return 0
    removed = 0
    for _, size, program, atime in sorted(entries, key=lambda entry: entry[0]):
        if total - removed <= max_bytes // 2:
            break
        program.unlink(missing_ok=True)
        atime.unlink(missing_ok=True)  # JAX's access-time record, where its own limit wrote one
        removed += size
    return removed


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError:
        return False
    return True


def enable_compile_cache(cache_root: Path) -> Path | None:
    """Keep compiled XLA programs in ``cache_root``/xla-compiled (once per process; the first folder wins,
    since JAX opens its cache at the first compile). Returns the folder in use, or None."""
    global _enabled
    if _enabled is not None:
        return _enabled
    folder = compile_cache_folder(cache_root)
    if folder is None or not _writable(folder):
        return None
    import jax

    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # small tracers add up to seconds
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    own_limit = os.environ.get(MAX_BYTES_ENV)
    if own_limit is None:  # one scan now instead of JAX's scan on every write
        prune_compile_cache(folder)
    jax.config.update("jax_compilation_cache_max_size", int(own_limit) if own_limit is not None else -1)
    _enabled = folder
    return folder

"""One exclusive lock per output folder, on ``<folder>/.lock``, holding the holder's pid.

* :func:`acquire_folder_lock` (run folders, GNN runs, pattern planners): a second writer is refused at
  once with one line naming the holder's pid, instead of both writing and one destroying the other's files.
* :func:`build_lock` (resumable cache tables): a second builder waits for the first, with one line on
  stderr naming its pid, then finds the table finished (or, when the holder was killed and the OS dropped
  its lock, resumes it from the chunks it wrote).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from stem_jax.errors import StemError

LOCK_FILE = ".lock"


def acquire_folder_lock(folder: Path, what: str) -> int:
    """An exclusive, non-blocking ``flock`` on ``folder/.lock``, which then holds our pid; returns the open
    descriptor (close it to release). ``what`` names the folder in errors ("run folder", "pattern planner folder").

    Raises:
      StemError: the lock file cannot be written, or another process (or another open in this one) holds it.
    """
    lock_path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise StemError(f"{folder}: cannot write the {what} ({err.strerror or err})\n"
                        "  how to fix: make it writable, or pass --out a writable folder") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        holder = lock_path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
        if holder == str(os.getpid()):
            raise StemError(f"{what} {folder} is already open in this process (pid {holder}): two runs of one "
                            "command would write the same folder\n"
                            "  how to fix: give each run its own folder (e.g. sweep values that differ)") from None
        raise StemError(f"{what} {folder} is in use by another stem-jax process (pid {holder})\n"
                        "  how to fix: wait for it to finish, or pass another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


@contextlib.contextmanager
def build_lock(folder: Path, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder/.lock`` (``folder`` created if absent) for the ``with`` body.

    When another process holds it, print one line to stderr naming its pid and ``what`` ("embedding
    cache") and wait for it: the lock is dropped when the holder leaves the block, exits or is killed.
    The file is never deleted (a waiter would lock a deleted inode while a newcomer locks a new file);
    it holds the holder's pid, and is emptied on release.

    Raises:
      OSError: ``folder`` or its lock file cannot be created (a read-only cache: the caller decides).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            by = "elsewhere in this process" if holder == str(os.getpid()) else "by another process"
            print(f"note: {what} {folder} is being built {by}; waiting for pid {holder}", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the flock

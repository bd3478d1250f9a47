"""One exclusive lock per output folder (run folders, GNN runs, pattern planners): a second writer is refused
at once with one line naming the holder's pid, instead of both writing and one destroying the other's files."""

from __future__ import annotations

import errno
import fcntl
import os
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

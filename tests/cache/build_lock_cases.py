"""Set-ups shared by the build-lock tests: a holder stopped inside its build with a second builder started
against it, a build lock that the filesystem refuses, and a cache folder mounted read-only."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from build_lock_harness import TIMEOUT, wait_until_waiting_or_done


class LockPair(NamedTuple):
    holder: Any  # process A, stopped at its pause point until ``go`` is set
    waiter: Any  # process B, started once A had stopped
    go: Any  # Event: lets A go on
    waiting: Any  # Event: set by B when it waits for A's lock
    events: tuple  # every synchronisation object, kept referenced until the children have unpickled them

    def release(self) -> None:
        """Let A go on and wait for both: each must exit 0, and B must have waited for A's lock."""
        self.go.set()
        self.holder.join(TIMEOUT), self.waiter.join(TIMEOUT)
        assert (self.holder.exitcode, self.waiter.exitcode) == (0, 0)
        assert self.waiting.is_set()

    def kill_holder(self) -> None:
        """SIGKILL A while B waits for its lock (the OS drops A's flock) and wait for B, which must finish."""
        assert self.waiting.is_set(), "the second builder did not wait for the first"
        self.holder.kill()
        self.holder.join(TIMEOUT), self.waiter.join(TIMEOUT)
        assert self.holder.exitcode == -9 and self.waiter.exitcode == 0


def holder_and_waiter(ctx: Any, procs: list, target: Any, args_a: tuple, args_b: tuple, **pause: Any) -> LockPair:
    """Start A as ``target(*args_a)`` stopping where ``pause`` says, wait until it has stopped, then start B
    as ``target(*args_b)`` and wait until B waits for A's lock (or has ended: without the lock it never
    waits). Both processes go on ``procs`` (the fixture that kills what a failing test leaves)."""
    paused, go, waiting, idle = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
    a = ctx.Process(target=target, args=args_a, kwargs={"paused": paused, "go": go, **pause})
    procs.append(a)
    a.start()
    assert paused.wait(TIMEOUT)
    b = ctx.Process(target=target, args=args_b, kwargs={"waiting": waiting, "paused": idle, "go": idle})
    procs.append(b)
    b.start()
    wait_until_waiting_or_done(b, waiting)
    return LockPair(a, b, go, waiting, (paused, go, waiting, idle))


def race(ctx: Any, procs: list, target: Any, args_of: Any) -> None:
    """Builders ``a`` and ``b`` (``target(*args_of(name))``) started together at one barrier on a cold folder;
    returns once both have ended, each with exit status 0."""
    barrier, idle = ctx.Barrier(2), ctx.Event()
    pair = [ctx.Process(target=target, args=args_of(name), kwargs={"paused": idle, "go": idle, "barrier": barrier})
            for name in ("a", "b")]
    procs += pair
    for proc in pair:
        proc.start()
    for proc in pair:
        proc.join(TIMEOUT)
    assert [p.exitcode for p in pair] == [0, 0]


def refuse_build_lock(monkeypatch: Any, module: Any, table: Path) -> dict[Path, int]:
    """Make ``module.build_lock`` fail as on a read-only filesystem, after dropping the complete ``table``'s
    lock file (as a table written before the lock, or copied read-only); the modification times of the
    table's files, to check that reading it changed nothing."""
    (table / ".lock").unlink(missing_ok=True)

    def read_only(folder, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(folder))

    monkeypatch.setattr(module, "build_lock", read_only)
    return file_times(table)


def file_times(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")}


def run_on_read_only_mount(cache: Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python <command>`` with ``cache`` bind-mounted read-only in a user namespace; skips the test where
    ``unshare`` cannot do that."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount --bind -o ro {cache} {cache} && "
                            f"! touch {cache}/probe 2>/dev/null"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {probe.stderr.decode().strip()}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", f'mount --bind -o ro {cache} {cache} && '
                           f'exec "{sys.executable}" {command}'], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT)

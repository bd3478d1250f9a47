"""``eval --workers N``: one machine's cores as N local processes, each scoring every N-th question, merged.

A run's host work (planning, ranking, records) is Python and holds the interpreter lock, so threads give a
second core only the compiled tracer's share; processes give it all of it. This is the multi-process eval of
:mod:`stem_jax.cli.distributed` started for the user on one machine, without its coordination service (the
processes share nothing but the run folder): this process takes share 0 and starts the others with the same
flags and ``--worker-share I/N``; each evaluates every N-th question into ``<out>/shard-<I>-of-<N>/``
(resumable), and when all have finished the shards are merged into ``<out>/predictions.jsonl`` and scored, as
``stem-jax score`` does. Rerunning the same command resumes every shard. Each process holds its own engine, so
memory grows N-fold.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from stem_jax.cli.distributed import score_run
from stem_jax.devices import host_cores, positive_count
from stem_jax.errors import StemError

_FLAG = "--workers"


def parse_workers(value: str | int) -> int:
    """``value`` as a process count: ``auto`` -> one per core this process may run on, else a whole number >= 1."""
    text = str(value).strip().lower()
    if text == "auto":
        return host_cores()
    count = positive_count(text)
    if count is None:
        raise StemError(f"--workers {value!r}: expected a whole number of processes, 1 or more, or auto\n"
                        "  how to fix: --workers 2 (two processes), --workers auto (one per core) or --workers 1 "
                        "(this process alone)")
    return count


def without_workers(argv: list[str]) -> list[str]:
    """``argv`` without its ``--workers N`` / ``--workers=N``."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == _FLAG:
            i += 2
            continue
        if not argv[i].startswith(_FLAG + "="):
            out.append(argv[i])
        i += 1
    return out


def eval_on_workers(args: argparse.Namespace, workers: int,
                    evaluate_share: Callable[[argparse.Namespace], Path]) -> int:
    """Evaluate ``args``' run on ``workers`` local processes (this one is process 0), then merge and score.

    ``evaluate_share(args)`` evaluates this process's share and returns the run folder (the shards' parent).

    Raises:
      StemError: ``--num-processes`` given as well, or a worker that did not finish (with its last lines).
    """
    if getattr(args, "num_processes", None) not in (None, 1):
        raise StemError("--workers starts its own processes on this machine; --num-processes is for processes "
                        "you start yourself (several hosts)\n  how to fix: pass one of the two")
    argv = without_workers(list(getattr(args, "argv", []) or []))
    logs = [tempfile.TemporaryFile() for _ in range(1, workers)]
    children = [subprocess.Popen([sys.executable, "-m", "stem_jax.cli.main", *argv, "--no-progress",
                                  "--worker-share", f"{i}/{workers}"], stdout=subprocess.DEVNULL, stderr=log)
                for i, log in enumerate(logs, start=1)]
    args.worker_share = (0, workers)
    finished = False
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # process 0's share table: the merged one follows
            out = evaluate_share(args)
        codes = [child.wait() for child in children]
        finished = True
    finally:
        if not finished:  # an error or Ctrl-C here: the workers stop too (each keeps what it wrote)
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=60)
    failed = [(i, code) for i, code in enumerate(codes, start=1) if code != 0]
    if failed:
        i, code = failed[0]
        logs[i - 1].seek(0)
        tail = logs[i - 1].read().decode(errors="replace").strip().splitlines()[-8:]
        raise StemError(f"eval worker {i} of {workers} exited with status {code}:\n  " + "\n  ".join(tail)
                        + "\n  how to fix: mend what it reports and rerun the same command; finished shards resume")
    print(f"{workers} worker processes (--workers {workers}) scored {out}/shard-<i>-of-{workers}/")
    score_run(out, getattr(args, "argv", []))
    return 0

"""Killing process 0 of a multi-process eval leaves the others to finish.

The failure pinned: if process 0 hosts JAX's coordination service (``jax.distributed.initialize`` starts it there),
killing it makes every other process abort inside jaxlib, rc 134 with a C++ stack dump
("Terminating process because the JAX distributed service detected fatal errors"). The service
runs in a helper process of its own (:mod:`stem_jax.coordination`): the survivor finishes its shard,
waits one ``--heartbeat-timeout`` for the dead peer and exits 0, the helper exits after it and frees
the port, and rerunning the job resumes process 0's shard; ``score`` then gives one process's metrics.
Two CLI processes, a rerun and a reference run: ~35 s on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from stem_jax.cli.main import main

pytestmark = pytest.mark.slow

EVAL = ["eval", "--dataset", "demo", "--hops", "1", "--limit", "6", "--encoder.name=hashing", "--no-progress",
        "--engine.batch_precision=32", "--engine.batch_breadth=8"]
CODE = "import sys, jax; from stem_jax.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _eval(out, cache, *extra):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, "-c", CODE, *EVAL, "--cache-dir", str(cache), "--out", str(out), *extra],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc):
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    assert "Check failure" not in output and "Terminating process" not in output
    return output


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _records(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.pop("ms", None)
    return rows


def test_killing_process_0_leaves_the_other_to_finish_and_the_job_resumes(tmp_path):
    with socket.socket() as s:  # a free localhost port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, cache = tmp_path / "run", tmp_path / "cache"
    # the single-process reference first: it also fills the embedding cache, which two processes building it
    # at once can race on (a separate problem of the cache, not of the coordination)
    _finish(_eval(tmp_path / "alone", cache))
    job = [["--num-processes", "2", "--process-id", str(i), "--coordinator", f"127.0.0.1:{port}",
            "--heartbeat-timeout", "10"] for i in (0, 1)]
    first, survivor = _eval(out, cache, *job[0]), _eval(out, cache, *job[1])
    started = out / "shard-0-of-2" / "run.json"  # process 0 joined the job (so did process 1) and began its share
    deadline = time.monotonic() + 300
    while not started.exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[0][-3000:]
        time.sleep(0.05)
    first.kill()  # kill -9 process 0: no clean-up of any kind
    first.communicate()
    _finish(survivor)  # after one heartbeat timeout (10 s) without process 0
    assert len((out / "shard-1-of-2" / "predictions.jsonl").read_text().splitlines()) == 3  # complete
    deadline = time.monotonic() + 30  # the helper leaves right after the survivor: the port is free again
    while _listening(port):
        assert time.monotonic() < deadline, f"the coordination service still listens on {port}"
        time.sleep(0.1)

    rerun = [_eval(out, cache, *flags) for flags in job]  # the same flags: process 0 resumes, process 1 has nothing left
    for proc in rerun:
        _finish(proc)
    assert main(["score", "--out", str(out)]) == 0
    assert _records(out / "predictions.jsonl") == _records(tmp_path / "alone" / "predictions.jsonl")
    merged = json.loads((out / "metrics.json").read_text())
    single = json.loads((tmp_path / "alone" / "metrics.json").read_text())
    assert merged["overall"] == single["overall"] and merged["processes"] == 2

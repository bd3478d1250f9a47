"""One process of a multi-process eval dying does not abort the others.

The failure pinned: process 1 killed, process 0 writes its complete shard, then sits in jax.distributed's shutdown
barrier until the coordination service's heartbeat timeout (100 s) and aborts with rc 134 and a C++
stack dump ("Terminating process because the JAX distributed service detected fatal errors").
Processes share no collectives, so the job's coordination service runs in recoverable mode (in a helper
process of its own, :mod:`stem_jax.coordination`) and, at exit, each process waits for the peers still
alive (a dead one drops out after ``--heartbeat-timeout``). Killing process 0:
tests/distributed/test_distributed_coordinator_killed.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from stem_jax.cli.main import main

EVAL = ["eval", "--dataset", "demo", "--hops", "1", "--limit", "6", "--encoder.name=hashing", "--no-progress",
        "--engine.batch_precision=32", "--engine.batch_breadth=8"]


def test_a_killed_peer_leaves_the_other_process_to_finish_cleanly(tmp_path):
    with socket.socket() as s:  # a free localhost port for the coordinator
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = tmp_path / "run"
    code = "import sys, jax; from stem_jax.cli.main import main; sys.exit(main(sys.argv[1:]))"
    began = time.perf_counter()
    survivor = subprocess.Popen([sys.executable, "-c", code, *EVAL, "--cache-dir", str(tmp_path / "cache"),
                                 "--out", str(out), "--num-processes", "2", "--process-id", "0",
                                 "--coordinator", address, "--heartbeat-timeout", "10"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    # process 1 joins the job, then dies at once (kill -9: no clean-up of any kind)
    victim = subprocess.run([sys.executable, "-c", (
        "import argparse, os, signal; from stem_jax.cli.distributed import join_processes\n"
        f"join_processes(argparse.Namespace(num_processes=2, process_id=1, coordinator={address!r}, "
        "heartbeat_timeout=10))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")], env=env, capture_output=True, text=True, timeout=300)
    assert victim.returncode == -9, victim.stderr[-2000:]
    output, _ = survivor.communicate(timeout=600)
    assert survivor.returncode == 0, output[-3000:]
    assert "Check failure" not in output and "Terminating process" not in output
    assert time.perf_counter() - began < 90  # waits for the dead peer one heartbeat timeout (10 s), no more
    assert len((out / "shard-0-of-2" / "predictions.jsonl").read_text().splitlines()) == 3
    assert main(["score", "--out", str(out)]) == 2  # the dead process's shard is missing: score says which

"""Scoring sharded over 8 local devices, and over 2 processes (jax.distributed on localhost), gives
the predictions of one device in one process (demo KG, hashing encoder, subprocesses)."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from stem_jax.errors import StemError
from stem_jax.eval.sharding import BatchSharding

EVAL = ["eval", "--dataset", "demo", "--hops", "2,3", "--limit", "12", "--encoder.name=hashing", "--no-progress",
        "--engine.batch_precision=32", "--engine.batch_breadth=8", "--engine.frontier=4", "--engine.node_matches=2",
        "--engine.max_frontier=8", "--engine.chunk_questions=8"]


def _run(args, *, devices=1, cache, wait=True):
    """``stem-jax ARGS`` in a fresh interpreter with ``devices`` forced host devices (asserted)."""
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')}"
                                       f" --xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu"}
    check = "" if "--num-processes" in args else f"assert jax.local_device_count() == {devices}; "
    # (jax.distributed.initialize must run before anything touches the backend)
    code = f"import sys, jax; from stem_jax.cli.main import main; {check}sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", code, *args] + (["--cache-dir", str(cache)] if args[0] == "eval" else [])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return _finish(proc) if wait else proc


def _finish(proc):
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    return out


def _predictions(path):
    """Records in file order, without timings and run-folder stamps; scores to 1e-5."""
    rows = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        record.pop("ms", None)
        record.pop("question_sha", None)  # a run-folder stamp, not a result
        record["scores"] = np.round(record["scores"], 5).tolist()
        rows.append(record)
    return rows


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    root = tmp_path_factory.mktemp("one")
    _run([*EVAL, "--out", str(root / "run")], cache=root / "cache")
    return root


def test_eight_local_devices_give_single_device_predictions(one_device, tmp_path):
    _run([*EVAL, "--out", str(tmp_path / "run")], devices=8, cache=one_device / "cache")
    single = _predictions(one_device / "run" / "predictions.jsonl")
    assert len(single) == 24
    assert _predictions(tmp_path / "run" / "predictions.jsonl") == single


@pytest.mark.slow  # ~15 s: two jax.distributed processes; the 8-device test stays quick
def test_two_processes_merge_to_single_process_predictions(one_device, tmp_path):
    with socket.socket() as s:  # a free localhost port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [_run([*EVAL, "--out", str(tmp_path / "run"), "--num-processes", "2", "--process-id", str(i),
                   "--coordinator", f"127.0.0.1:{port}"], cache=one_device / "cache", wait=False) for i in (0, 1)]
    for proc in procs:
        _finish(proc)
    shards = [_predictions(tmp_path / "run" / f"shard-{i}-of-2" / "predictions.jsonl") for i in (0, 1)]
    assert [len(s) for s in shards] == [12, 12]
    _run(["score", "--out", str(tmp_path / "run")], cache=None)
    single = _predictions(one_device / "run" / "predictions.jsonl")
    assert _predictions(tmp_path / "run" / "predictions.jsonl") == single
    merged = json.loads((tmp_path / "run" / "metrics.json").read_text())
    alone = json.loads((one_device / "run" / "metrics.json").read_text())
    assert merged["overall"] == alone["overall"] and merged["processes"] == 2


def test_batch_sharding_rounds_and_checks_batches():
    import jax

    sharding = BatchSharding(jax.local_devices()[:1])
    assert not sharding.active and sharding.round_up(5) == 5 and sharding.shard_batch("x") == "x"
    fake = BatchSharding.__new__(BatchSharding)
    fake.devices, fake.mesh = [None] * 8, None
    assert [fake.round_up(n) for n in (1, 8, 9, 64)] == [8, 8, 16, 64]


def test_score_refuses_incomplete_shards(tmp_path):
    from stem_jax.cli.distributed import merge_shards

    with pytest.raises(StemError, match="no shard folders"):
        merge_shards(tmp_path)
    (tmp_path / "shard-0-of-2").mkdir()
    with pytest.raises(StemError, match=r"shards \[1\] of 2 are missing"):
        merge_shards(tmp_path)

"""A KG sharded over devices traces exactly like one device: the shard CSR against a plain loop and the
whole KG's CSR, and the sharded tracer's arrays against ``trace_batch`` on random KGs over 8 forced host
devices and over 2 ``jax.distributed`` processes x 4 devices (subprocesses: the device count is fixed
when JAX starts)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stem_jax.kg.index import build_index
from stem_jax.shard.partition import ALIGN_ROWS, plan_layout, shard_incidence, shard_incidence_reference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import kg_shard_cases  # noqa: E402


@pytest.mark.parametrize("seed", range(5))
def test_shard_incidence_equals_loop_and_whole_csr(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 40))
    triples = np.stack([rng.integers(0, n, 200), rng.integers(0, 4, 200), rng.integers(0, n, 200)], 1).astype(np.int32)
    triples[::7, 2] = triples[::7, 0]  # self-loops are listed once
    offsets, incidence = shard_incidence(triples, n)
    ref_offsets, ref_incidence = shard_incidence_reference(triples, n)
    assert offsets.dtype == np.int32 and np.array_equal(offsets, ref_offsets)
    assert np.array_equal(incidence, ref_incidence)
    # the shards' lists, shifted to global ids and joined per node, are the whole KG's CSR
    index = build_index([(f"e{h}", f"r{r}", f"e{t}") for h, r, t in triples.tolist()])
    devices = int(rng.integers(1, 6))
    layout = plan_layout(index.triples, index.num_entities, devices)
    assert layout.rows_per_shard % ALIGN_ROWS == 0 and layout.rows_per_shard * devices >= index.num_triples
    parts = []
    for shard in range(devices):
        lo, hi = layout.bounds(shard)
        parts.append((lo, *shard_incidence(index.triples[lo:hi], index.num_entities)))
        assert len(parts[-1][2]) <= layout.incidence_per_shard
    for v in range(index.num_entities):
        joined = [lo + t for lo, off, inc in parts for t in inc[off[v]:off[v + 1]].tolist()]
        assert joined == index.incident(v).tolist()


def test_one_device_mesh_equals_trace_batch():
    import jax

    for seed in (3, 4):
        case = kg_shard_cases.case_inputs(seed)
        want = kg_shard_cases.one_device(case)
        got = kg_shard_cases.sharded(case, jax.devices()[:1])
        assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))


def _env(devices):
    return {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')}"
                                       f" --xla_force_host_platform_device_count={devices}", "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


# slow: ~40 s: 12 cases on 2, 3 and 8 devices in a subprocess; test_one_device_mesh_equals_trace_batch stays
# quick
@pytest.mark.slow
def test_sharded_tracer_equals_one_device_on_eight_local_devices():
    proc = subprocess.run([sys.executable, str(HERE / "kg_shard_cases.py"), "--cases", "12", "--devices", "2,3,8"],
                          env=_env(8), capture_output=True, text=True, timeout=900)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert len(rows) == 12 and all(r["identical"] for r in rows)
    assert {r["devices"] for r in rows} == {2, 3, 8} and {r["precision"] for r in rows} == {True, False}
    assert {r["backend"] for r in rows} == {"blocks", "flat"}


@pytest.mark.slow  # ~20 s: two jax.distributed processes
def test_two_processes_of_four_devices_equal_one_device(tmp_path):
    with socket.socket() as s:  # a free localhost port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "sharded.npz"
    procs = [subprocess.Popen([sys.executable, str(HERE / "kg_shard_cases.py"), "--cases", "4", "--seed", "20",
                               "--processes", "2", "--process-id", str(i), "--coordinator", f"127.0.0.1:{port}",
                               "--out", str(out)], env=_env(4), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for i in (0, 1)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
    info = [json.loads(line) for log in logs for line in log.splitlines() if line.startswith("{")]
    assert [(i["devices"], i["local_devices"]) for i in info] == [(8, 4), (8, 4)]
    got = np.load(out)
    for seed in range(20, 24):
        want = kg_shard_cases.one_device(kg_shard_cases.case_inputs(seed))
        for i, a in enumerate(want):
            assert np.array_equal(a, got[f"{seed}_{i}"]), (seed, i)

"""A Triple-GNN checkpoint loads on a machine whose devices differ from the one that wrote it (a
CPU-trained checkpoint on a GPU machine): orbax must restore onto this process's devices."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np

from stem_jax.gnn.checkpoint import CheckpointStore, abstract_params
from stem_jax.gnn.model import ModelSpec
from stem_jax.gnn.train import init_params

SPEC = ModelSpec(layers=2, d_gnn=8, d_pem=16, num_relations=3)


def test_abstract_params_are_placed_on_a_local_device():
    for leaf in jax.tree.leaves(abstract_params(SPEC)):
        assert leaf.sharding is not None and leaf.sharding.device_set <= set(jax.local_devices())


def test_checkpoint_written_on_another_device_restores_here(tmp_path):
    # the writer has two devices and keeps the parameters on the second one, which this process lacks
    writer = textwrap.dedent(f"""
        import jax
        from stem_jax.gnn.checkpoint import CheckpointStore
        from stem_jax.gnn.model import ModelSpec
        from stem_jax.gnn.train import init_params
        spec = ModelSpec(layers=2, d_gnn=8, d_pem=16, num_relations=3)
        params = jax.device_put(init_params(spec, jax.random.key(3)), jax.devices()[1])
        store = CheckpointStore({str(tmp_path)!r})
        store.save(7, params, {{"unused": jax.numpy.zeros(2)}}, {{"step": 7}})
        store.close()
    """)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", writer], check=True, env=env, timeout=300)
    reader = textwrap.dedent(f"""
        import jax, numpy as np
        from stem_jax.gnn.checkpoint import CheckpointStore
        from stem_jax.gnn.model import ModelSpec
        from stem_jax.gnn.train import init_params
        assert jax.local_device_count() == 1
        spec = ModelSpec(layers=2, d_gnn=8, d_pem=16, num_relations=3)
        restored = CheckpointStore({str(tmp_path)!r}).restore_params(7, spec)
        expected = init_params(spec, jax.random.key(3))
        for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        print("restored", len(jax.tree.leaves(restored)))
    """)
    one = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", reader], env=one, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "restored" in done.stdout


def test_checkpoint_round_trip_in_process(tmp_path):
    params = init_params(SPEC, jax.random.key(1))
    store = CheckpointStore(tmp_path)
    store.save(1, params, {"unused": jax.numpy.zeros(2)}, {"step": 1})
    restored = store.restore_params(1, SPEC)
    store.close()
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

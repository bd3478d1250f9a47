"""Checkpoints (:mod:`stem_jax.checkpoints`) load on a machine whose devices differ from the one that
wrote them (a CPU-trained checkpoint on a GPU machine): orbax must restore onto this process's
devices. Both users of the shared store are checked: the Triple-GNN run folder and SCR's."""

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from stem_jax.checkpoints import CheckpointStore, abstract_on_local_device, on_local_device
from stem_jax.gnn.checkpoint import abstract_params
from stem_jax.gnn.model import ModelSpec, init_params

SPEC = ModelSpec(layers=2, d_gnn=8, d_pem=16, num_relations=3)


def _on_local_device(tree) -> bool:
    return all(leaf.sharding is not None and leaf.sharding.device_set <= set(jax.local_devices())
               for leaf in jax.tree.leaves(tree))


def test_abstract_params_are_placed_on_a_local_device():
    assert _on_local_device(abstract_params(SPEC))
    assert _on_local_device(abstract_on_local_device(lambda: {"w": jax.numpy.zeros((2, 3))}))
    # plain eval_shape output (what SCR passes) is placed too, shapes and dtypes kept
    placed = on_local_device(jax.eval_shape(lambda: init_params(SPEC, jax.random.key(0))))
    assert _on_local_device(placed)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), placed) == jax.tree.map(lambda x: (x.shape, x.dtype),
                                                                               abstract_params(SPEC))


# One writer and one reader per user of the store. The writer keeps the parameters on the second of
# two devices, which the reader's process lacks.
WRITERS = {
    "gnn": """
        from stem_jax.checkpoints import CheckpointStore
        from stem_jax.gnn.model import ModelSpec, init_params
        spec = ModelSpec(layers=2, d_gnn=8, d_pem=16, num_relations=3)
        params = jax.device_put(init_params(spec, jax.random.key(3)), jax.devices()[1])
        folder = root / "checkpoints"
        (root / "model.json").write_text(json.dumps({"spec": spec.as_dict()}))
    """,
    "scr": """
        from stem_jax.checkpoints import CheckpointStore
        from stem_jax.methods.scr.model import ScrSpec
        from stem_jax.methods.scr.train import init_params
        spec = ScrSpec(layers=1, dim=8, head_layers=1, text_dim=16, num_relations=3, max_steps=2, tau=0.1,
                       neighbours=4)
        params = jax.device_put(init_params(spec, jax.random.key(3)), jax.devices()[1])
        folder = root / "checkpoints"
        (root / "scr.json").write_text(json.dumps({"spec": spec.as_dict(), "seed": 0}))
    """,
}
READERS = {
    "gnn": """
        from stem_jax.gnn.checkpoint import load_checkpoint
        from stem_jax.gnn.model import init_params
        spec, restored, info = load_checkpoint(root)
        assert info["step"] == 7
    """,
    "scr": """
        from stem_jax.methods.scr.train import init_params, load_run
        spec, restored, info = load_run(root)
        assert info["step"] == 7
    """,
}


@pytest.mark.parametrize("user", sorted(WRITERS))
def test_checkpoint_written_on_another_device_restores_here(tmp_path, user):
    # the suite's compiled programs ($STEM_COMPILE_CACHE, which conftest sets): the eager init's small compiles
    # are most of each script's time
    head = (f"import json, pathlib\nimport jax, numpy as np\nroot = pathlib.Path({str(tmp_path)!r})\n"
            "from stem_jax.compile_cache import enable_compile_cache\nfrom stem_jax.config import default_cache_dir\n"
            "enable_compile_cache(default_cache_dir())\n")
    writer = head + textwrap.dedent(WRITERS[user]) + textwrap.dedent("""
        store = CheckpointStore(folder)
        store.save(7, params, {"unused": jax.numpy.zeros(2)}, {"step": 7})
        store.close()
    """)
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')}"
                                       f" --xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", writer], check=True, env=env, timeout=300)
    reader = head + "assert jax.local_device_count() == 1\n" + textwrap.dedent(READERS[user]) + textwrap.dedent("""
        expected = init_params(spec, jax.random.key(3))
        for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(expected), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        print("restored", len(jax.tree.leaves(restored)))
    """)
    one = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')}"
                                       f" --xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", reader], env=one, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "restored" in done.stdout


def test_checkpoint_round_trip_in_process(tmp_path):
    params = init_params(SPEC, jax.random.key(1))
    opt_state = {"count": jax.numpy.zeros((), jax.numpy.int32), "mu": jax.numpy.ones(2)}
    with CheckpointStore(tmp_path) as store:
        store.save(1, params, opt_state, {"step": 1, "history": [1.5]})
        assert store.latest_step() == 1
        restored = store.restore_params(1, abstract_params(SPEC))
        again, state, meta = store.restore(1, params, opt_state)
    for a, b, c in zip(jax.tree.leaves(restored), jax.tree.leaves(again), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(c))
        np.testing.assert_array_equal(np.asarray(b), np.asarray(c))
    assert meta == {"step": 1, "history": [1.5]}
    assert jax.tree.map(np.asarray, state)["count"].dtype == np.int32

"""Training the small Triple-GNN on the demo KG: the loss falls, checkpoints round-trip bit for bit,
and a run killed after a checkpoint resumes to exactly the parameters of an uninterrupted run."""

import json

import jax
import numpy as np
import pytest
from gnn_cases import train_on_demo

from stem_jax.checkpoints import CheckpointStore
from stem_jax.gnn.checkpoint import load_checkpoint, params_fingerprint
from stem_jax.gnn.train import StepData, TrainConfig, train

# The same tiny architecture as tests/gnn/test_gnn.py, so one pytest process compiles it once.
CONFIG = TrainConfig(steps=8, graphs_per_step=4, lr=1e-2, warmup=1, synthetic_ratio=0.0, val_questions=4,
                     val_every=8, ckpt_every=4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    # four questions and four graphs per step: every step has the same shape (one compile)
    return train_on_demo(tmp_path_factory, CONFIG)


def test_loss_falls_and_checkpoint_round_trips(setup):
    full = setup["full"]
    losses = [loss for _, loss in json.loads((setup["dir"] / "history.json").read_text())["loss"]]
    assert len(losses) == CONFIG.steps
    assert np.mean(losses[-2:]) < 0.8 * np.mean(losses[:2])
    assert full["val"][-1]["recall"] >= full["val"][0]["recall"]
    spec, params, info = load_checkpoint(setup["dir"])
    assert spec == setup["spec"] and info["step"] == CONFIG.steps
    assert params_fingerprint(params) == full["params_sha"]  # bit-identical to the trained parameters
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(params))
    assert (setup["dir"] / "curves.png").stat().st_size > 0


def test_killed_run_resumes_to_the_same_parameters(setup, tmp_path):
    run = tmp_path / "run"
    first = train(setup["factory"], setup["pairs"], setup["pairs"], setup["spec"], CONFIG, run, show_progress=False,
                  stop_at=4)
    assert first["steps_total"] == 4 and CheckpointStore(run / "checkpoints").latest_step() == 4
    logs = []
    resumed = train(setup["factory"], setup["pairs"], setup["pairs"], setup["spec"], CONFIG, run, show_progress=False,
                    log=logs.append)
    assert any("resuming from checkpoint step 4" in line for line in logs)
    assert resumed["steps_this_run"] == 4 and resumed["params_sha"] == setup["full"]["params_sha"]


def test_step_data_is_a_function_of_the_step(setup):
    config = TrainConfig(graphs_per_step=6, synthetic_ratio=0.5, seed=3)
    a = StepData(setup["factory"], setup["pairs"], config)
    b = StepData(setup["factory"], setup["pairs"], config)
    for step in (5, 0, 5):
        left, right = a(step), b(step)
        assert [e.key for e in left] == [e.key for e in right]
        assert all(np.array_equal(x.entities, y.entities) for x, y in zip(left, right, strict=True))
    keys = [e.key for s in range(10) for e in a(s)]
    assert any(k.startswith("walk/") for k in keys) and any(not k.startswith("walk/") for k in keys)

"""Training the small Triple-GNN on the demo KG: the loss falls, checkpoints round-trip bit for bit,
and a run killed after a checkpoint resumes to exactly the parameters of an uninterrupted run."""

import json

import jax
import numpy as np
import pytest

from stem_jax.checkpoints import CheckpointStore
from stem_jax.config import SubgraphConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.gnn.checkpoint import load_checkpoint, params_fingerprint
from stem_jax.gnn.data import ExampleFactory, question_examples
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.gnn.model import ModelSpec
from stem_jax.gnn.train import StepData, TrainConfig, train
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import OraclePlanner

# The same tiny architecture as tests/gnn/test_gnn.py, so one pytest process compiles it once.
CONFIG = TrainConfig(steps=8, graphs_per_step=4, lr=1e-2, warmup=1, synthetic_ratio=0.0, val_questions=4,
                     val_every=8, ckpt_every=4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    dataset = load_dataset(DatasetSpec(name="demo", split="train"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder(dim=32)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=1024, progress=False)
    factory = ExampleFactory(index, SchemaFeaturizer(index, embeddings, encoder), SubgraphConfig())
    pairs, _ = question_examples(factory, [q for q in dataset.questions if q.hops == 1][:4], OraclePlanner().plan)
    spec = ModelSpec(layers=2, d_gnn=16, d_pem=32, num_relations=index.num_relations)
    # four questions and four graphs per step: every step has the same shape (one compile)
    full_dir = tmp_path_factory.mktemp("full")
    full = train(factory, pairs, pairs, spec, CONFIG, full_dir, show_progress=False)
    return {"factory": factory, "pairs": pairs, "spec": spec, "full": full, "dir": full_dir}


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

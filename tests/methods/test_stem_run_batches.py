"""STEM's per-chunk host passes over runs equal their per-run forms: buckets, groups, EXACT anchors, batch layout."""


import numpy as np
import pytest

from stem_jax.methods.stem.pipeline import Run, run_buckets
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, ground
from stem_jax.trace.tracer import EXACT, FOLDED


@pytest.fixture(scope="module")
def pipeline(random_kg_pipeline):
    return random_kg_pipeline("batches", seed=0, entities=40, triples=150, relations=4, lam=1.7)


def _random_run(pipeline, rng) -> Run:
    """A grounded chain plan of 1-5 steps from a random entity, Precision or Breadth, some steps backwards."""
    n = int(rng.integers(1, 6))
    hops = [("entity 0" if s == 0 else f"[ENT{s}]", f"rel_{int(rng.integers(0, 4))}", f"[ENT{s + 1}]") for s in range(n)]
    triples = tuple(SchemaTriple(t, r, h) if rng.random() < 0.3 else SchemaTriple(h, r, t) for h, r, t in hops)
    schema = SchemaGraph(triples, f"[ENT{n}]", "Precision" if rng.random() < 0.5 else "Breadth")
    anchor = int(rng.integers(0, pipeline.index.num_entities))
    kind = rng.integers(0, 4)
    if kind == 0:
        named = ((anchor, EXACT),) + tuple((int(e), FOLDED) for e in rng.integers(0, 40, rng.integers(0, 3)))
    elif kind == 1:
        named = tuple((int(e), EXACT) for e in rng.integers(-1, 40, int(rng.integers(1, 6))))
    elif kind == 2:
        named = tuple((int(e), FOLDED) for e in rng.integers(0, 40, 2))
    else:
        named = ()
    return Run(0, ground(schema, "entity 0", pipeline.index), anchor, named=named)


@pytest.mark.parametrize("seed", range(12))
def test_chunk_passes_equal_per_run_forms(pipeline, seed):
    rng = np.random.default_rng(seed)
    runs = [_random_run(pipeline, rng) for _ in range(int(rng.integers(1, 30)))]
    assert run_buckets(runs).tolist() == [run.bucket for run in runs]
    groups: dict = {}
    for i, run in enumerate(runs):
        groups.setdefault((pipeline.is_precision(run), run.bucket), []).append(i)
    assert pipeline.groups(runs) == sorted(groups.items())
    guidance = np.full((len(runs), pipeline.shapes[True].guidance), -1, np.int32)
    for i in range(len(runs)):
        if rng.random() < 0.6:
            picked = rng.choice([e for e, _ in runs[i].named] + rng.integers(0, 40, 3).tolist(), size=3, replace=False)
            guidance[i, :3] = picked
    found, anchors, scores = pipeline.exact_anchors(runs, guidance)
    for i, run in enumerate(runs):
        one = pipeline.exact_anchor(run, guidance[i])
        assert found[i] == (one is not None)
        if one is not None:
            assert (int(anchors[i]), scores[i]) == one and scores[i].dtype == np.float32


@pytest.mark.parametrize("seed", range(6))
def test_trace_batch_lays_runs_out_as_per_run_stores(pipeline, seed):
    rng = np.random.default_rng(seed)
    runs = [_random_run(pipeline, rng) for _ in range(int(rng.integers(1, 9)))]
    pipeline.embed_texts([t for run in runs for t in run.plan.step_texts()], False)
    size, bucket = 16, int(run_buckets(runs).max())
    anchors, scores = rng.integers(0, 40, len(runs)).astype(np.int32), rng.random(len(runs)).astype(np.float32)
    got = pipeline.trace_batch(runs, anchors, scores, size, bucket)
    steps = np.full((size, bucket, 3), -1, np.int32)
    mask = np.zeros((size, bucket), bool)
    forward = np.ones((size, bucket), bool)
    step_emb = np.zeros((size, bucket, got.step_emb.shape[-1]), np.float32)
    for row, run in enumerate(runs):  # the per-run stores the batch is made of
        n = run.plan.num_steps
        steps[row, :n], forward[row, :n], mask[row, :n] = run.plan.steps, run.plan.orientation(), True
        step_emb[row, :n] = pipeline.step_embeddings(run)
    for name, want in (("steps", steps), ("step_mask", mask), ("forward", forward), ("step_emb", step_emb)):
        np.testing.assert_array_equal(getattr(got, name), want, err_msg=name)
    assert got.anchor[: len(runs)].tolist() == anchors.tolist() and (got.anchor[len(runs):] == -1).all()

"""The batch-1 latency path: Engine.warm_up leaves nothing to compile, the small padded batch and the
growing schema-text table give the same results as before."""

import numpy as np
import pytest

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides
from stem_jax.trace.tracer import trace_batch

# A small Breadth frontier so that demo runs overflow and climb the capacity ladder.
FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8",
        "engine.frontier": "2", "engine.node_matches": "2", "engine.max_frontier": "16"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    config = apply_overrides(StemConfig(), FAST)
    return Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path_factory.mktemp("cache"), limit=8)


def _outputs(engine, questions):
    method = engine.method("stem")
    method.forget([q.qid for q in questions])
    method.prepare(questions)
    runs = [run for q in questions for run in method.runs[q.qid]]
    outputs, _ = method.pipeline.trace(runs)
    return runs, outputs


@pytest.mark.slow  # ~25 s: compiles every shape a call reaches
def test_warm_up_compiles_every_shape_a_call_reaches(engine):
    questions = engine.dataset.questions
    steps = sorted({max(q.hops or 1, 1) for q in questions})
    info = engine.warm_up(1, step_buckets=steps)
    assert info["tracer_shapes"] > 0 and info["max_runs"] == engine.config.planner.beam
    before = trace_batch._cache_size()
    escalated = 0
    for question in questions:  # one question at a time: the batch-1 path
        _, outputs = _outputs(engine, [question])
        escalated += sum(int(o["capacity"]) > 2 for o in outputs)
    assert escalated > 0  # some runs did climb the ladder ...
    assert trace_batch._cache_size() == before  # ... into shapes warm_up had compiled


def test_small_padded_batch_matches_the_old_minimum(engine, monkeypatch):
    evaluator = engine.method("stem").pipeline
    questions = engine.dataset.questions[:6]
    runs, small = _outputs(engine, questions[:1])
    monkeypatch.setattr(evaluator, "MIN_BATCH", 8)
    _, padded = _outputs(engine, questions[:1])
    assert len(runs) <= 4 and evaluator.batch_size(64, len(runs)) == 8
    monkeypatch.setattr(evaluator, "MIN_BATCH", 4)
    assert evaluator.batch_size(64, len(runs)) == 4
    for a, b in zip(small, padded, strict=True):
        for key in ("nodes", "scores", "via", "parents", "overflow", "capacity"):
            np.testing.assert_array_equal(a[key], b[key])


def test_schema_texts_appended_in_place_keep_their_rows(engine):
    method = engine.method("stem")
    evaluator = method.pipeline
    method.embed(["first text here"], False)
    for i in range(40):  # enough appends to grow the buffer at least once
        method.embed([f"schema text {i}", "first text here", f"schema text {i // 2}"], False)
    texts = ["first text here"] + [f"schema text {i}" for i in range(40)]
    expected = engine.encoder.encode(texts).astype(np.float16).astype(np.float32)
    got = evaluator.text_emb[[evaluator.text_rows[t] for t in texts]]
    np.testing.assert_array_equal(got, expected)
    assert len(evaluator.text_emb) == len(evaluator.text_rows)


def test_warm_up_with_gnn_guidance_compiles_the_reach_shapes_of_small_calls(tmp_path):
    """With guidance on, warm_up runs the GNN on the split's questions one at a time, so that later
    one-question calls reuse its reach shapes instead of compiling (a compile was ~0.4 s a call)."""
    from stem_jax.cli.main import main
    from stem_jax.gnn.infer import _REACH_SHAPES, reach_forward_fn

    run = tmp_path / "gnn"
    assert main(["train-gnn", "--dataset", "demo", "--encoder.name=hashing", "--steps", "2", "--graphs-per-step", "4",
                 "--val-every", "2", "--ckpt-every", "2", "--val-questions", "4", "--out", str(run),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    # a one-level capacity ladder: this pins the GNN's shapes, and each ladder level is one more tracer shape per
    # steps bucket for warm_up to compile
    config = apply_overrides(StemConfig(), {**FAST, "engine.max_frontier": FAST["engine.frontier"]})
    engine = Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path / "cache", limit=12,
                         guidance=run)
    info = engine.warm_up(1)
    forward = reach_forward_fn(engine.guidance.spec.layers)
    assert "gnn_shapes" in info and _REACH_SHAPES.get(engine.guidance.spec)
    compiled = forward._cache_size()
    answers = [engine.ask(question) for question in engine.dataset.questions[:6]]
    assert forward._cache_size() == compiled
    assert answers[0].answers
    assert not any((tmp_path / "cache").glob("demo/gnn-guidance/*"))  # one-question tables are not cached

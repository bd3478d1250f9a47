"""STEM's stages called one at a time over explicit data: anchor agrees with its plain reference, trace at
several points gives each point what it alone gives, and rank over a ``Traced`` is what the holder answers."""

import numpy as np
import pytest

from stem_jax.data.types import Question
from stem_jax.methods.stem.anchor import anchor, guidance_rows
from stem_jax.methods.stem.rank import rank
from stem_jax.methods.stem.trace import trace
from stem_jax.methods.stem.types import Anchored, Run, StemHyper, Traced, split_by_question
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, ground
from stem_jax.trace.reference import anchor_reference
from stem_jax.trace.tracer import EXACT, FOLDED


@pytest.fixture(scope="module")
def res(random_kg_pipeline):
    return random_kg_pipeline("stages", seed=3, entities=40, triples=160, relations=4, lam=1.5)


def _runs(res, rng, n: int) -> list[Run]:
    runs = []
    for _ in range(n):
        steps = int(rng.integers(1, 4))
        hops = [("entity 0" if s == 0 else f"[ENT{s}]", f"rel_{int(rng.integers(0, 4))}", f"[ENT{s + 1}]")
                for s in range(steps)]
        schema = SchemaGraph(tuple(SchemaTriple(*h) for h in hops), f"[ENT{steps}]",
                             "Precision" if rng.random() < 0.5 else "Breadth")
        entity = int(rng.integers(0, res.index.num_entities))
        named = ((entity, EXACT),) if rng.random() < 0.5 else ((int(rng.integers(0, 40)), FOLDED),)
        run = Run(0, ground(schema, "entity 0", res.index), entity, named=named)
        if rng.random() < 0.5:
            run.guidance = rng.integers(0, res.index.num_entities, 3).astype(np.int32)
        runs.append(run)
    return runs


@pytest.mark.parametrize("seed", range(4))
def test_anchor_stage_agrees_with_the_reference(res, seed):
    rng = np.random.default_rng(seed)
    runs = _runs(res, rng, 9)
    hypers = (StemHyper(1.0, 0.0, 0.3), StemHyper(1.8, 0.2, 0.3))
    anchored = anchor(res, runs, hypers)
    assert isinstance(anchored, Anchored) and anchored.entity.shape == (2, len(runs))
    entity_emb = np.asarray(res.embeddings.entities.array, dtype=np.float32)
    rows = guidance_rows(res, runs)
    for p, hyper in enumerate(hypers):
        for i, run in enumerate(runs):
            mask = np.zeros(res.index.num_entities, bool)
            mask[rows[i][rows[i] >= 0]] = True
            want = anchor_reference(entity_emb, entity_emb[run.anchor_entity], res.config.tracer.top_n, hyper.lam,
                                    mask if mask.any() else None, named=run.named[: res.NAMED_WIDTH])
            assert anchored.entity[p, i] == want[0]
            assert np.isclose(anchored.score[p, i], want[1], rtol=1e-6)


def test_trace_stage_gives_every_point_what_it_alone_gives(res):
    rng = np.random.default_rng(7)
    runs = _runs(res, rng, 12)
    res.embed_texts([t for run in runs for t in run.plan.step_texts()], False)
    hypers = (StemHyper(1.0, 0.0, 0.2), StemHyper(1.5, 0.3, 0.5))
    together = trace(res, anchor(res, runs, hypers))
    assert isinstance(together, Traced) and len(together.outputs) == 2
    for p, hyper in enumerate(hypers):
        alone = trace(res, anchor(res, runs, [hyper])).outputs[0]
        for got, want in zip(together.outputs[p], alone, strict=True):
            for key in ("nodes", "scores", "via", "parents"):
                np.testing.assert_array_equal(got[key], want[key])


def test_rank_stage_is_what_the_holder_answers(res):
    rng = np.random.default_rng(11)
    runs = _runs(res, rng, 6)
    res.embed_texts([t for run in runs for t in run.plan.step_texts()], False)
    questions = [Question(f"q{i}", "question", ("entity 0",), ("entity 1",), hops=1) for i in range(3)]
    per_question = [runs[:2], runs[2:5], runs[5:]]
    hyper = res.hyper
    traced = trace(res, anchor(res, runs, [hyper]))
    outputs = split_by_question(traced.outputs[0], per_question)
    got = rank(res.index, res.rank_rules(), questions, per_question, outputs, hyper, display=res.context.display)
    want = res.retrievals(questions, per_question, outputs, None, hyper)
    assert [(r.answers, r.evidence, r.info) for r in got] == [(r.answers, r.evidence, r.info) for r in want]


def test_plan_stage_counts_a_plan_lost_only_when_no_topic_anchors_it(res):
    from stem_jax.methods.stem.plan import plan

    def path(topic):
        return SchemaGraph((SchemaTriple(topic, "rel_0", "[ENT1]"),), "[ENT1]", "Precision")

    question = Question("two", "rel_0 of entity 1 and entity 2", ("entity 1", "entity 2"), ())
    runs, skipped = plan(res, [question], lambda q, index: [path("entity 1"), path("Rimloumjaith")])
    # the first plan anchors (the other topic it leaves out is no failure); the second names no topic: lost once
    assert len(runs[0]) >= 1 and {r.beam for r in runs[0]} == {0}
    assert skipped == {"no schema node matches a topic entity": 1}


def test_plan_stage_traces_a_named_topic_from_it_alone_not_from_a_similarly_named_one(res):
    from stem_jax.methods.stem.plan import plan

    schema = SchemaGraph((SchemaTriple("entity 1", "rel_0", "[ENT1]"),), "[ENT1]", "Precision")
    # "entity 2" fuzzily matches the constant "entity 1" too (difflib ratio 0.875); the plan means entity 1
    question = Question("two", "rel_0 of entity 1 and entity 2", ("entity 2", "entity 1"), ())
    runs, skipped = plan(res, [question], lambda q, index: [schema])
    assert [r.mention for r in runs[0]] == ["entity 1"]
    assert skipped == {}
    # a topic that only fuzzily matches still anchors the plan when no closer topic claims the constant
    alone = Question("one", "rel_0 of entity 2", ("entity 2",), ())
    runs, _ = plan(res, [alone], lambda q, index: [schema])
    assert [r.mention for r in runs[0]] == ["entity 2"]


def test_anchor_closeness_prefers_exact_then_case_then_similar_names():
    from stem_jax.plan.schema import anchor_closeness

    assert anchor_closeness("Billy Ray Cyrus", "Billy Ray Cyrus") > anchor_closeness("Billy Ray Cyrus", "billy ray cyrus")
    assert anchor_closeness("Billy Ray Cyrus", "billy ray cyrus") > anchor_closeness("Billy Ray Cyrus", "Miley Cyrus")
    assert 0.6 <= anchor_closeness("Billy Ray Cyrus", "Miley Cyrus") < 1.0

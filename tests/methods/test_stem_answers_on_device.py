"""STEM's answers ranked by the jitted kernel (``engine.answers_on=device``) equal the host ranking's."""

import math

import numpy as np
import pytest

from stem_jax.data.types import Question
from stem_jax.methods.stem.pipeline import Run, StemPipeline
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, ground


@pytest.fixture(scope="module")
def pipeline(random_kg_pipeline):
    # few relations over few entities: Breadth runs bind many answers, shared across beams
    return random_kg_pipeline("answers-on", seed=3, entities=30, triples=200, relations=3, theta=0.0)


def _runs(pipeline, rng, qi: int, topic: str) -> list[Run]:
    """A beam of 1-4 chain plans of 1-2 steps from ``topic``, with probabilities."""
    runs = []
    for beam in range(int(rng.integers(1, 5))):
        n = int(rng.integers(1, 3))
        hops = [(topic if s == 0 else f"[ENT{s}]", f"rel_{int(rng.integers(0, 3))}", f"[ENT{s + 1}]") for s in range(n)]
        schema = SchemaGraph(tuple(SchemaTriple(*h) for h in hops), f"[ENT{n}]", "Breadth")
        prob = float(rng.choice([0.1, 0.2, 0.3, 0.4]))
        runs.append(Run(qi, ground(schema, topic, pipeline.index), pipeline.index.entity_ids[topic], beam=beam,
                        beam_prob=prob, mention=topic))
    return runs


@pytest.mark.parametrize(("rank", "gap"), [("beam", 0.5), ("beam", math.inf), ("max", 0.5)])
def test_device_answers_equal_host_answers(pipeline, rank, gap):
    rng = np.random.default_rng(7)
    topics = [f"entity {int(i)}" for i in rng.integers(0, 30, 12)]
    questions = [Question(f"q{i}", "?", [t], [t]) for i, t in enumerate(topics)]
    per_question = [_runs(pipeline, rng, qi, t) for qi, t in enumerate(topics)]
    texts = [t for rs in per_question for r in rs for t in r.plan.step_texts()]
    pipeline.embed_texts(texts, show_progress=False)
    flat = [r for rs in per_question for r in rs]
    outputs, _ = pipeline.trace(flat)
    starts = np.cumsum([0, *map(len, per_question)]).tolist()
    outs = [outputs[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    answers = {}
    for where in ("host", "device"):
        other = pipeline.with_conventions(answers_on=where, rank=rank, beam_gap=gap)
        answers[where] = [r.answers for r in other.retrievals(questions, per_question, outs)]
    assert answers["device"] == answers["host"]
    assert sum(map(len, answers["host"])) > len(questions)  # the case ranks something


def test_many_answers_come_back_in_full(pipeline, monkeypatch):
    """A question with more answers than the first device call returns is asked again with room for all."""
    monkeypatch.setattr(StemPipeline, "DEVICE_ANSWERS", 1)
    test_device_answers_equal_host_answers(pipeline, "max", 0.5)


def test_warm_up_compiles_the_device_ranking_of_one_question(pipeline):
    """A warmed device pipeline ranks one question's beam without compiling again."""
    from kernels.answers import _rank

    other = pipeline.with_conventions(answers_on="device")
    other.warm_up([1, 2], 4)
    compiled = _rank._cache_size()
    rng = np.random.default_rng(11)
    runs = _runs(other, rng, 0, "entity 3")
    other.embed_texts([t for r in runs for t in r.plan.step_texts()], show_progress=False)
    outputs, _ = other.trace(runs)
    assert other.retrievals([Question("q", "?", ["entity 3"], [])], [runs], [outputs])[0].answers
    assert _rank._cache_size() == compiled

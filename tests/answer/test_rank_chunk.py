"""ChunkAnswers (many questions ranked in numpy passes) against QuestionAnswers (the per-binding reference)."""

import math

import numpy as np
import pytest

from stem_jax.answer.rank import ChunkAnswers
from stem_jax.answer.reference import QuestionAnswers


def _random_run(rng: np.random.Generator) -> dict:
    """A traced run as the tracer returns it: [slots, F] nodes / scores / via, -1 / -inf where empty."""
    slots, width = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    nodes = rng.integers(0, 12, (slots, width)).astype(np.int32)  # few entities: repeats across runs and beams
    nodes[rng.random((slots, width)) < 0.3] = -1
    # scores from a small set so that ties (in S, in the length-fair score, in support) are common
    scores = rng.choice(np.asarray([0.25, 0.5, 0.75, 1.0, 1.5, 2.0], np.float32), (slots, width))
    scores[nodes < 0] = -np.inf
    nodes[0, 0] = int(rng.integers(0, 12))
    scores[0, 0] = rng.choice(np.asarray([0.5, 1.0], np.float32))
    via = np.where(nodes >= 0, rng.integers(0, 40, (slots, width)), -1).astype(np.int32)
    via[0] = -1
    answer_slot = int(rng.integers(-1, slots)) if rng.random() < 0.2 else slots - 1
    return {"nodes": nodes, "scores": scores, "via": via, "answer_slot": answer_slot,
            "overflow": int(rng.integers(0, 3)), "beam": int(rng.integers(0, 4)),
            "prob": float(rng.choice([0.1, 0.2, 0.3, 1 / 3, 0.7])), "depth": int(rng.integers(0, 4))}


@pytest.mark.parametrize("seed", range(60))
def test_chunk_ranking_equals_the_per_question_reference(seed):
    rng = np.random.default_rng(seed)
    n_questions = int(rng.integers(1, 9))
    runs = [(int(rng.integers(0, n_questions)), _random_run(rng)) for _ in range(int(rng.integers(0, 25)))]
    exclude = {q: set(rng.integers(0, 12, int(rng.integers(0, 3))).tolist()) for q in range(n_questions)}
    chunk = ChunkAnswers(n_questions)
    reference = [QuestionAnswers() for _ in range(n_questions)]
    for q, r in runs:
        chunk.add_run(q, r["nodes"], r["scores"], r["via"], r["answer_slot"], r["overflow"], beam=r["beam"],
                      beam_prob=r["prob"], depth=r["depth"])
        reference[q].add_run(r["nodes"], r["scores"], r["via"], r["answer_slot"], r["overflow"], beam=r["beam"],
                             beam_prob=r["prob"], depth=r["depth"], exclude=exclude[q])
    pairs = [(q, e) for q, ents in exclude.items() for e in ents]
    for rule, cut, gap in [("max", 0.0, math.inf), ("beam", 0.0, math.inf), ("beam", 0.5, math.inf),
                           ("beam", 0.5, 0.5), ("beam", 0.0, 0.0), ("beam", 0.9, 0.25)]:
        got = chunk.ranked(rule, cut, gap, exclude=pairs)
        want = [qa.ranked(rule, cut, gap) for qa in reference]
        assert got == want, (rule, cut, gap)  # entities, order and float scores, bit for bit
    gaps = rng.choice([0.0, 0.25, 0.5, math.inf], n_questions).tolist()  # one per question (guided or not)
    assert chunk.ranked("beam", 0.5, gaps, exclude=pairs) == [qa.ranked("beam", 0.5, g)
                                                              for qa, g in zip(reference, gaps, strict=True)]
    assert chunk.evidence() == [sorted(qa.evidence) for qa in reference]
    assert chunk.overflow.tolist() == [qa.overflow for qa in reference]


def test_support_is_summed_in_first_binding_order():
    """0.1 + 0.2 + 0.7 and 0.7 + 0.2 + 0.1 differ in the last bit: the chunk must add as the reference does."""
    assert 0.1 + 0.2 + 0.7 != 0.7 + 0.2 + 0.1
    nodes = np.asarray([[9, -1], [5, -1]], np.int32)
    scores = np.asarray([[1.0, -np.inf], [2.0, -np.inf]], np.float32)
    via = np.asarray([[-1, -1], [3, -1]], np.int32)
    chunk, reference = ChunkAnswers(1), QuestionAnswers()
    for beam, prob in ((2, 0.1), (0, 0.2), (1, 0.7)):  # beam ids out of first-binding order
        chunk.add_run(0, nodes, scores, via, 1, 0, beam=beam, beam_prob=prob, depth=1)
        reference.add_run(nodes, scores, via, 1, 0, beam=beam, beam_prob=prob, depth=1)
    assert chunk.ranked("beam") == [reference.ranked("beam")] == [[(5, 0.1 + 0.2 + 0.7)]]


def test_empty_chunk_and_unknown_rule():
    chunk = ChunkAnswers(3)
    assert chunk.ranked("beam", 0.5) == [[], [], []]
    assert chunk.evidence() == [[], [], []]
    with pytest.raises(ValueError, match="unknown answer ranking"):
        chunk.ranked("best")

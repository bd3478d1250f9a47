"""The jitted answer ranking (kernels/answers.py) against the plain per-question reference and ChunkAnswers."""

import math

import numpy as np
import pytest

from kernels.answers import pack_runs, rank_answers, ranked_lists
from stem_jax.answer.rank import ChunkAnswers
from stem_jax.answer.reference import QuestionAnswers

N_ENTITIES = 12


def _random_run(rng: np.random.Generator) -> dict:
    """A traced run as the tracer returns it: [slots, F] nodes / scores / via, -1 / -inf where empty."""
    slots, width = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    nodes = rng.integers(0, N_ENTITIES, (slots, width)).astype(np.int32)  # few entities: repeats across runs
    nodes[rng.random((slots, width)) < 0.3] = -1
    # scores from a small set so that ties (in S, in the length-fair score, in support) are common
    scores = rng.choice(np.asarray([0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 0.1], np.float32), (slots, width))
    scores[nodes < 0] = -np.inf
    nodes[0, 0] = int(rng.integers(0, N_ENTITIES))
    scores[0, 0] = rng.choice(np.asarray([0.5, 1.0, 0.3], np.float32))
    via = np.where(nodes >= 0, rng.integers(0, 40, (slots, width)), -1).astype(np.int32)
    answer_slot = int(rng.integers(-1, slots)) if rng.random() < 0.2 else slots - 1
    return {"nodes": nodes, "scores": scores, "via": via, "answer_slot": answer_slot,
            "beam": int(rng.integers(0, 6)), "prob": float(rng.choice([0.1, 0.2, 0.3, 1 / 3, 0.7, 0.0])),
            "depth": int(rng.integers(0, 4))}


def _device(chunk: ChunkAnswers, n_questions: int, rule: str, cut: float, gap, pairs, never, k: int = 16):
    nodes, scores, meta = chunk.answer_runs()
    # one padded shape for every random case (up to 24 runs of 6 bindings, 8 questions): few compiles
    runs = pack_runs(n_questions, nodes, scores, meta, gap, pairs, min_runs=32, min_bindings=256, min_questions=8)
    ranked = rank_answers(runs, never, n_questions=n_questions, rule=rule, cut=cut, k=k)
    return ranked, ranked_lists(ranked)


@pytest.mark.parametrize("seed", range(40))
def test_device_ranking_equals_the_reference(seed):
    rng = np.random.default_rng(1000 + seed)
    n_questions = int(rng.integers(1, 9))
    runs = [(int(rng.integers(0, n_questions)), _random_run(rng)) for _ in range(int(rng.integers(0, 25)))]
    exclude = {q: set(rng.integers(0, N_ENTITIES, int(rng.integers(0, 3))).tolist()) for q in range(n_questions)}
    never = rng.random(N_ENTITIES) < 0.15 if rng.random() < 0.5 else np.zeros(N_ENTITIES, bool)
    chunk = ChunkAnswers(n_questions)
    reference = [QuestionAnswers() for _ in range(n_questions)]
    for q, r in runs:
        chunk.add_run(q, r["nodes"], r["scores"], r["via"], r["answer_slot"], 0, beam=r["beam"],
                      beam_prob=r["prob"], depth=r["depth"])
        # the reference has no mediator mask: mediators are excluded like topic entities
        hidden = exclude[q] | set(np.flatnonzero(never).tolist())
        reference[q].add_run(r["nodes"], r["scores"], r["via"], r["answer_slot"], 0, beam=r["beam"],
                             beam_prob=r["prob"], depth=r["depth"], exclude=hidden)
    pairs = [(q, e) for q, ents in exclude.items() for e in ents]
    gaps = rng.choice([0.0, 0.25, 0.5, math.inf], n_questions).tolist()
    for rule, cut, gap in [("max", 0.0, math.inf), ("beam", 0.0, math.inf), ("beam", 0.5, math.inf),
                           ("beam", 0.5, 0.5), ("beam", 0.0, 0.0), ("beam", 0.9, 0.25), ("beam", 0.5, gaps)]:
        ranked, got = _device(chunk, n_questions, rule, cut, gap, pairs, never)
        per_q = gap if isinstance(gap, list) else [gap] * n_questions
        want = [qa.ranked(rule, cut, g) for qa, g in zip(reference, per_q, strict=True)]
        assert ranked.count.tolist() == [len(w) for w in want], (rule, cut, gap)
        assert got == want, (rule, cut, gap)  # entities, order and float64 scores, bit for bit
        assert got == chunk.ranked(rule, cut, gap, exclude=pairs, never=never), (rule, cut, gap)


def test_first_k_come_back_and_count_says_how_many_there_are():
    chunk = ChunkAnswers(2)
    nodes = np.asarray([[7, -1, -1, -1], [1, 2, 3, 4]], np.int32)
    scores = np.asarray([[1.0, -np.inf, -np.inf, -np.inf], [2.0, 3.0, 1.5, 3.0]], np.float32)
    chunk.add_run(1, nodes, scores, np.full_like(nodes, -1), 1, 0, depth=1)
    ranked, got = _device(chunk, 2, "max", 0.0, math.inf, [], None, k=2)
    assert ranked.count.tolist() == [0, 4]
    assert got == [[], [(2, 3.0), (4, 3.0)]]  # ties by entity id


def test_support_is_summed_in_first_binding_order():
    """0.1 + 0.2 + 0.7 and 0.7 + 0.2 + 0.1 differ in the last bit: the kernel must add as the reference does."""
    nodes = np.asarray([[9, -1], [5, -1]], np.int32)
    scores = np.asarray([[1.0, -np.inf], [2.0, -np.inf]], np.float32)
    chunk = ChunkAnswers(1)
    for beam, prob in ((2, 0.1), (0, 0.2), (1, 0.7)):  # beam ids out of first-binding order
        chunk.add_run(0, nodes, scores, np.full_like(nodes, -1), 1, 0, beam=beam, beam_prob=prob, depth=1)
    assert _device(chunk, 1, "beam", 0.0, math.inf, [], None)[1] == [[(5, 0.1 + 0.2 + 0.7)]]


def test_empty_chunk_and_unknown_rule():
    assert _device(ChunkAnswers(3), 3, "beam", 0.5, math.inf, [], None)[1] == [[], [], []]
    with pytest.raises(ValueError, match="unknown answer ranking"):
        _device(ChunkAnswers(1), 1, "best", 0.0, math.inf, [], None)

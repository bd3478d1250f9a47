"""Folding a chunk's runs in array passes gives what folding them one at a time gives.

:func:`~stem_jax.answer.rank.answer_depths` against :func:`~stem_jax.answer.rank.answer_depth` per plan, and
:meth:`ChunkAnswers.add_runs` against :meth:`ChunkAnswers.add_run` per run, on random inputs."""

import math

import numpy as np
import pytest

from stem_jax.answer.rank import ChunkAnswers, answer_depth, answer_depths


def _random_steps(rng: np.random.Generator) -> np.ndarray:
    """Steps as planners make them (DFS: child s + 1, parent before it) or arbitrary (repeats, loops, negatives)."""
    n = int(rng.integers(0, 6))
    if rng.random() < 0.5:
        parents = [int(rng.integers(0, s + 1)) for s in range(n)]
        return np.asarray([(p, s + 1, int(rng.integers(-1, 5))) for s, p in enumerate(parents)], np.int32).reshape(-1, 3)
    return rng.integers(-2, 7, (n, 3)).astype(np.int32)


@pytest.mark.parametrize("seed", range(40))
def test_answer_depths_equal_answer_depth_per_plan(seed):
    rng = np.random.default_rng(seed)
    steps = [_random_steps(rng) for _ in range(int(rng.integers(0, 20)))]
    slots = [int(rng.integers(-2, 8)) for _ in steps]
    assert answer_depths(steps, slots).tolist() == [answer_depth(s, a) for s, a in zip(steps, slots, strict=True)]


def test_answer_depths_of_a_cycle_stop_as_the_reference_does():
    cycle = np.asarray([[2, 1, 0], [1, 2, 0]], np.int32)  # 1 <-> 2, never reaches the anchor
    chain = np.asarray([[0, 1, 0], [1, 2, 0], [1, 2, 1]], np.int32)  # child 2 listed twice: the last parent wins
    assert answer_depths([cycle, chain, chain], [2, 2, 0]).tolist() == [answer_depth(cycle, 2), 2, 0] == [0, 2, 0]


def _random_run(rng: np.random.Generator) -> dict:
    slots, width = int(rng.integers(1, 5)), int(rng.integers(1, 7))
    nodes = rng.integers(-1, 12, (slots, width)).astype(np.int32)
    scores = rng.choice(np.asarray([0.25, 0.5, 1.0, 2.0], np.float32), (slots, width))
    via = np.where(nodes >= 0, rng.integers(0, 40, (slots, width)), -1).astype(np.int32)
    return {"nodes": nodes, "scores": scores, "via": via, "answer_slot": int(rng.integers(-1, slots)),
            "overflow": int(rng.integers(0, 3)), "beam": int(rng.integers(0, 4)),
            "prob": float(rng.choice([0.1, 0.2, 1 / 3, 0.7])), "depth": int(rng.integers(0, 4))}


@pytest.mark.parametrize("seed", range(30))
def test_add_runs_equals_add_run_in_order(seed):
    rng = np.random.default_rng(seed)
    n_questions = int(rng.integers(1, 6))
    runs = [(int(rng.integers(0, n_questions)), _random_run(rng)) for _ in range(int(rng.integers(0, 20)))]
    one, bulk = ChunkAnswers(n_questions), ChunkAnswers(n_questions)
    for q, r in runs:
        one.add_run(q, r["nodes"], r["scores"], r["via"], r["answer_slot"], r["overflow"], beam=r["beam"],
                    beam_prob=r["prob"], depth=r["depth"])
    cut = int(rng.integers(0, len(runs) + 1))  # two bulk calls: a chunk may be folded in parts
    for part in (runs[:cut], runs[cut:]):
        bulk.add_runs([q for q, _ in part], [r["nodes"] for _, r in part], [r["scores"] for _, r in part],
                      [r["via"] for _, r in part], [r["answer_slot"] for _, r in part], [r["overflow"] for _, r in part],
                      beam=[r["beam"] for _, r in part], beam_prob=[r["prob"] for _, r in part],
                      depth=[r["depth"] for _, r in part])
    for rule, cut_at, gap in [("max", 0.0, math.inf), ("beam", 0.5, 0.25), ("beam", 0.0, math.inf)]:
        assert bulk.ranked(rule, cut_at, gap) == one.ranked(rule, cut_at, gap)
    assert bulk.evidence() == one.evidence()
    assert bulk.overflow.tolist() == one.overflow.tolist()


@pytest.mark.parametrize("seed", range(20))
def test_never_mask_ranks_as_excluding_those_entities_everywhere(seed):
    """``never`` (mediators) drops an entity for every question, as listing it in ``exclude`` for each does."""
    rng = np.random.default_rng(100 + seed)
    n_questions = int(rng.integers(1, 5))
    chunk = ChunkAnswers(n_questions)
    for _ in range(int(rng.integers(1, 15))):
        r = _random_run(rng)
        chunk.add_run(int(rng.integers(0, n_questions)), r["nodes"], r["scores"], r["via"], r["answer_slot"],
                      r["overflow"], beam=r["beam"], beam_prob=r["prob"], depth=r["depth"])
    never = rng.random(14) < 0.3
    own = [(q, int(e)) for q in range(n_questions) for e in rng.integers(0, 12, 2)]
    everywhere = own + [(q, int(e)) for q in range(n_questions) for e in np.flatnonzero(never)]
    for rule, cut_at, gap in [("max", 0.0, math.inf), ("beam", 0.5, 0.25)]:
        assert chunk.ranked(rule, cut_at, gap, exclude=own, never=never) == chunk.ranked(rule, cut_at, gap,
                                                                                          exclude=everywhere)

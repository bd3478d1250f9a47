"""Beam-aware answer ranking: beam probability first, a length-fair score second, then a support cut."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.answer.rank import answer_depth
from stem_jax.answer.reference import QuestionAnswers


def _run(answers, scores, depth, anchor_score=1.0):
    """[slots, F] arrays of a run whose answer slot is ``depth`` (a chain), holding ``answers``."""
    width = max(len(answers), 1)
    nodes = np.full((depth + 1, width), -1, np.int32)
    vals = np.full((depth + 1, width), -np.inf, np.float32)
    nodes[0, 0], vals[0, 0] = 100, anchor_score
    nodes[depth, : len(answers)] = answers
    vals[depth, : len(answers)] = scores
    via = np.full_like(nodes, -1)
    return nodes, vals, via


def _add(qa, answers, scores, depth, beam, prob, exclude=()):
    nodes, vals, via = _run(answers, scores, depth)
    qa.add_run(nodes, vals, via, depth, 0, beam=beam, beam_prob=prob, depth=depth, exclude=exclude)


def test_one_beam_orders_like_the_papers_max():
    qa = QuestionAnswers()
    _add(qa, [5, 3, 9], [2.5, 2.9, 2.5], 2, 0, 1.0)
    assert [e for e, _ in qa.ranked("beam")] == [e for e, _ in qa.ranked("max")] == [3, 5, 9]


def test_a_longer_less_probable_plan_no_longer_wins():
    qa = QuestionAnswers()
    _add(qa, [1], [2.3], 1, 0, 0.7)  # 1 step, mean T 1.3: the right plan
    _add(qa, [2], [4.6], 3, 1, 0.3)  # 3 steps, more T-Scores summed, mean T 1.2
    assert qa.ranked("max")[0][0] == 2
    assert [e for e, _ in qa.ranked("beam")] == [1, 2]
    assert [e for e, _ in qa.ranked("beam", cut=0.5)] == [1]  # 0.3 < 0.5 x 0.7


def test_agreeing_beams_add_up_and_empty_top_beam_falls_back():
    qa = QuestionAnswers()
    _add(qa, [1], [2.0], 1, 0, 0.4)
    _add(qa, [2], [2.0], 1, 1, 0.3)
    _add(qa, [2], [2.0], 1, 2, 0.3)
    assert [e for e, _ in qa.ranked("beam", cut=0.5)] == [2, 1]
    fallback = QuestionAnswers()
    _add(fallback, [], [], 1, 0, 0.9)  # the most probable plan finds nothing
    _add(fallback, [7, 8], [2.0, 1.5], 1, 1, 0.05)
    assert [e for e, _ in fallback.ranked("beam", cut=0.5)] == [7, 8]


def test_topic_entities_are_excluded_and_depth_follows_parents():
    qa = QuestionAnswers()
    _add(qa, [100, 4], [3.0, 2.0], 2, 0, 1.0, exclude={100})
    assert [e for e, _ in qa.ranked("beam")] == [4]
    steps = np.asarray([[0, 1, 0], [1, 2, 1], [0, 3, 2]])
    assert [answer_depth(steps, s) for s in (0, 1, 2, 3, -1)] == [0, 1, 2, 1, 0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 12), max_size=5, unique=True), st.integers(1, 3)), min_size=2,
                max_size=4), st.randoms(use_true_random=False))
def test_top_answer_comes_from_the_top_beam_when_it_holds_most_probability(beams, rng):
    """B beams never displace B=1's answers when beam 0 carries more probability than the rest."""
    probs = sorted((rng.random() + 0.01 for _ in beams), reverse=True)
    probs[0] = sum(probs[1:]) + 0.01
    qa, first = QuestionAnswers(), QuestionAnswers()
    for b, ((answers, depth), p) in enumerate(zip(beams, probs, strict=True)):
        scores = [rng.uniform(0, 3) for _ in answers]
        _add(qa, answers, scores, depth, b, p)
        if b == 0:
            _add(first, answers, scores, depth, b, p)
    ranked, single = qa.ranked("beam", cut=0.5), first.ranked("beam", cut=0.5)
    if single:
        assert ranked[0][0] in dict(single)
        assert set(dict(single)) <= set(dict(ranked))  # B=4 keeps every answer of B=1


def test_a_beam_supports_only_entities_near_its_best_binding():
    """A wrong-relation binding (about one relation bonus below the beam's best) gets no support from that
    beam, so it no longer outranks the right answer by adding a second, less probable beam."""
    qa = QuestionAnswers()
    _add(qa, [1, 2], [2.9, 1.9], 1, 0, 0.9)  # beam 0: answer 1 by the planned relation, 2 by text similarity
    _add(qa, [2], [1.9], 1, 1, 0.1)  # beam 1 (another relation) binds 2 too
    assert [e for e, _ in qa.ranked("beam")] == [2, 1]  # no gap: 2 collects 0.9 + 0.1
    assert [e for e, _ in qa.ranked("beam", gap=0.5)] == [1, 2]
    assert [e for e, _ in qa.ranked("beam", cut=0.5, gap=0.5)] == [1]  # 2 keeps only beam 1's 0.1
    assert qa.ranked("beam", gap=1.5) == qa.ranked("beam")  # within the gap: as before


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 12), max_size=5, unique=True), st.integers(1, 3)), min_size=1,
                max_size=4), st.floats(0.0, 3.0), st.randoms(use_true_random=False))
def test_gap_keeps_every_beams_best_and_never_adds_support(beams, gap, rng):
    qa = QuestionAnswers()
    for b, (answers, depth) in enumerate(beams):
        _add(qa, answers, [rng.uniform(0, 3) for _ in answers], depth, b, rng.random() + 0.01)
    full, gapped = dict(qa.ranked("beam")), dict(qa.ranked("beam", gap=gap))
    assert set(full) == set(gapped)  # without a cut, the gap reorders but drops nothing
    assert all(gapped[e] <= full[e] + 1e-12 for e in full)
    for fair in qa.beam_fair.values():  # each beam still supports its best entity
        top = max(fair, key=fair.get)
        assert gapped[top] > 0

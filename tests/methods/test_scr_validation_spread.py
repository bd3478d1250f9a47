"""SCR's validation subset covers every path length (MetaQA's dev questions come grouped by hop)."""

from __future__ import annotations

from collections import Counter

from stem_jax.methods.scr.supervision import GoldSteps
from stem_jax.methods.scr.train import spread_by_hops


def _golds(hops_in_order: list[int]) -> list[GoldSteps]:
    return [GoldSteps(question=i, topic=0, relations=(1,) * hops, answers=frozenset({1}))
            for i, hops in enumerate(hops_in_order)]


def test_grouped_validation_questions_give_every_hop_its_share():
    golds = _golds([1] * 600 + [2] * 600 + [3] * 600)
    picked = spread_by_hops(golds, 512)
    counts = Counter(len(g.relations) for g in picked)
    assert len(picked) == 512 and set(counts) == {1, 2, 3} and max(counts.values()) - min(counts.values()) <= 1
    for hops in (1, 2, 3):  # each hop's paths in their own order, from its first
        own = [g.question for g in picked if len(g.relations) == hops]
        assert own == sorted(own) and own[0] == min(g.question for g in golds if len(g.relations) == hops)


def test_a_short_group_leaves_its_share_to_the_others_and_small_sets_are_kept_whole():
    golds = _golds([1] * 300 + [3] * 5 + [2] * 300)
    picked = spread_by_hops(golds, 100)
    counts = Counter(len(g.relations) for g in picked)
    assert counts[3] == 5 and counts[1] + counts[2] == 95 and abs(counts[1] - counts[2]) <= 1
    assert sorted(g.question for g in spread_by_hops(golds[:50], 512)) == list(range(50))
    assert spread_by_hops([], 10) == []

"""One per-hop sampler: every rule caps each group, keeps input order and is deterministic."""

import dataclasses
import random

import pytest

from stem_jax.data.sampling import RULES, qid_rank, sample_per_hop


@dataclasses.dataclass(frozen=True)
class Q:
    qid: str
    hops: int | None


def questions(seed: int) -> list[Q]:
    rng = random.Random(seed)
    return [Q(f"q{i}", rng.choice([1, 2, 3, None])) for i in range(rng.randint(0, 60))]


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("seed", range(8))
def test_every_rule_caps_each_group_in_input_order(rule, seed):
    items = questions(seed)
    per_hop = random.Random(seed).randint(1, 12)
    sample = sample_per_hop(items, per_hop, seed=seed, rule=rule)
    assert sample == sample_per_hop(items, per_hop, seed=seed, rule=rule)
    positions = [items.index(q) for q in sample]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    for hops in {q.hops for q in items}:
        size = sum(q.hops == hops for q in items)
        assert sum(q.hops == hops for q in sample) == min(per_hop, size)


def test_rules_pick_what_they_say():
    items = [Q(f"q{i}", 1) for i in range(10)]
    assert sample_per_hop(items, 3, rule="first") == items[:3]
    assert sample_per_hop(items, 3, rule="spread") == [items[0], items[3], items[6]]
    assert sample_per_hop(items, 3, rule="stride") == [items[0], items[3], items[6]]
    assert set(sample_per_hop(items, 3, rule="lowest_hash")) == set(sorted(items, key=qid_rank)[:3])
    assert set(sample_per_hop(items, 4, rule="lowest_hash")) >= set(sample_per_hop(items, 3, rule="lowest_hash"))
    assert sample_per_hop(items, None) == items
    with pytest.raises(ValueError, match="unknown sampling rule"):
        sample_per_hop(items, 3, rule="random")

"""The bulk check of unmatched plan steps flags exactly the runs that the per-run explanation names."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stem_jax.kg.index import build_index
from stem_jax.methods.stem.relation_check import runs_with_unmatched_steps, unmatched_steps

N_ENTITIES, N_RELATIONS = 9, 3


def _kg(seed: int):
    rng = np.random.default_rng(seed)
    triples = {(f"e{h}", f"r{r}", f"e{t}") for h, r, t in rng.integers(0, [N_ENTITIES, N_RELATIONS, N_ENTITIES],
                                                                        size=(40, 3)).tolist()}
    return build_index(sorted(triples))


def _run(index, rng, slots: int, width: int):
    """Random bindings: each slot binds nodes through random triples (or nothing), the plan random steps."""
    nodes = np.full((slots, width), -1)
    via = np.full((slots, width), -1)
    nodes[0, 0] = rng.integers(index.num_entities)
    for slot in range(1, slots):
        for j in range(rng.integers(0, width + 1)):
            t = int(rng.integers(index.num_triples))
            via[slot, j] = t if rng.random() < 0.9 else -1
            nodes[slot, j] = index.triples[t, 2 if rng.random() < 0.5 else 0]
    n_steps = int(rng.integers(1, slots + 1))
    steps = np.stack([rng.integers(0, slots, n_steps), rng.integers(0, slots + 1, n_steps),
                      rng.integers(-1, index.num_relations, n_steps)], axis=1)
    excluded = set(rng.choice(index.num_entities, size=int(rng.integers(0, 3)), replace=False).tolist())
    return steps, nodes, via, excluded


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1))
def test_bulk_flags_equal_per_run_explanations(seed):
    index = _kg(seed)
    rng = np.random.default_rng(seed + 1)
    runs = [_run(index, rng, int(rng.integers(2, 4)), int(rng.choice([2, 4]))) for _ in range(12)]
    flags = runs_with_unmatched_steps(index, *(list(part) for part in zip(*runs, strict=True)))
    expected = [bool(unmatched_steps(index, steps, nodes, via, excluded)) for steps, nodes, via, excluded in runs]
    assert flags.tolist() == expected


def test_no_runs_gives_no_flags():
    index = _kg(0)
    assert runs_with_unmatched_steps(index, [], [], [], []).shape == (0,)

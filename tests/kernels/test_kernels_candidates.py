"""A step's candidates cut to each run's ranked bindings: each pair's best K, then each run's best F."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import candidates

RUNS, F, C = 3, 4, 40
GRID = np.array([0.0, 0.25, 0.5, 1.0], np.float32)
# Jitted as the tracer runs them (frontier, K and runs static): one compile per K, instead of dispatching every
# op of each example on its own and tracing final_ranking's lax.switch afresh per call.
compact = jax.jit(candidates.compact, static_argnums=(3, 4, 5))
final_ranking = jax.jit(candidates.final_ranking, static_argnums=(3, 4, 5))


def bindings_reference(pair, t_score, triple, live, pair_base, frontier, k):
    """Per run, its kept (pair, triple, total) in binding order: a plain sort per pair, then per run."""
    out = []
    for run in range(len(pair_base) // frontier):
        chosen = []
        for p in range(run * frontier, (run + 1) * frontier):
            mine = sorted((-float(t_score[i]), int(triple[i])) for i in range(len(pair)) if live[i] and pair[i] == p)
            chosen += [((-neg + float(pair_base[p])), p % frontier, rank, p, tid)
                       for rank, (neg, tid) in enumerate(mine[:k])]
        chosen.sort(key=lambda c: (-c[0], c[1], c[2]))
        out.append([(p, tid, total) for total, _, _, p, tid in chosen[:frontier]])
    return out


@st.composite
def buffers(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    pair = rng.integers(0, RUNS * F, C).astype(np.int32)
    return {"pair": pair, "t_score": GRID[rng.integers(0, len(GRID), C)], "triple": rng.permutation(C).astype(np.int32),
            "live": rng.random(C) < 0.8, "base": GRID[rng.integers(0, len(GRID), RUNS * F)],
            "k": draw(st.integers(1, 3))}


@settings(max_examples=60, deadline=None)
@given(buffers())
def test_compact_keeps_each_runs_best_of_each_pairs_best(case):
    buffer = tuple(jnp.asarray(case[name]) for name in ("pair", "t_score", "triple"))
    packed, kept, ranked, _ = compact(buffer, jnp.asarray(case["live"]), jnp.asarray(case["base"]), F, case["k"], RUNS)
    want = bindings_reference(case["pair"], case["t_score"], case["triple"], case["live"], case["base"], F, case["k"])
    keep = np.asarray(ranked.keep)
    got = [[] for _ in range(RUNS)]
    for run, pair, triple, total in zip(*(np.asarray(a)[keep] for a in (ranked.run, ranked.pair, ranked.triple,
                                                                          ranked.total)), strict=True):
        got[int(run)].append((int(pair), int(triple), float(total)))
    assert got == want
    assert int(kept) == sum(len(w) for w in want)
    # compacting again (what a backend does with the packed survivors and later edges) changes nothing
    again = final_ranking(packed, kept, jnp.asarray(case["base"]), F, case["k"], RUNS)
    for name in ("run", "pair", "triple", "total", "run_rank"):
        np.testing.assert_array_equal(np.asarray(getattr(again, name))[np.asarray(again.keep)],
                                      np.asarray(getattr(ranked, name))[keep])

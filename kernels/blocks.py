"""The ``blocks`` trace backend: a step's edge list read in small fixed blocks (``lax.while_loop``).

The loop runs as many blocks of ``window`` edges as the step's frontier has incident triples, so a hub
costs a few more blocks instead of padding every node to the largest degree. Breadth keeps a candidate
buffer of B·F + window entries, admits an edge only past the bars of the last compaction and compacts
(:func:`kernels.candidates.compact`) only when the buffer would fill, so on a hub the buffer is sorted a
few times instead of once per block. Small blocks and few sorts suit a CPU; on a GPU every block is a
round of kernel launches (see :mod:`kernels.flat`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.candidates import EdgeScorer, Ranked, admits, compact, final_ranking, rank_runs
from kernels.select import BIG, NEG_INF, scatter_packed, segment_first_max


def precision_blocks(score: EdgeScorer, n_edges: jax.Array, window: int, pair_base: jax.Array, frontier: int
                     ) -> tuple[Ranked, jax.Array]:
    """Precision: per pair, the first edge maximising S + T, kept only when S + T > -1 (Algorithm 2 starts
    from ``max_score = -1``). Returns the ranking and per pair 1 if it found one (its qualified count)."""
    n_pairs = pair_base.shape[0]
    n_runs = n_pairs // frontier

    def body(carry):
        block, best_val, best_triple = carry
        e = score(block * window, window)
        block_max, first = segment_first_max(pair_base[e.pair] + e.t_score, e.pair, e.valid, n_pairs)
        block_triple = e.triple[jnp.clip(first, 0, window - 1)]
        better = (first < BIG) & (block_max > best_val)
        return block + 1, jnp.where(better, block_max, best_val), jnp.where(better, block_triple, best_triple)

    blocks = (n_edges + window - 1) // window
    init = (jnp.int32(0), jnp.full(n_pairs, -1.0, jnp.float32), jnp.full(n_pairs, -1, jnp.int32))
    _, best_val, best_triple = jax.lax.while_loop(lambda c: c[0] < blocks, body, init)
    found = best_triple >= 0
    ranked = rank_runs(jnp.arange(n_pairs, dtype=jnp.int32), best_triple, best_val, best_val,
                       jnp.zeros(n_pairs, jnp.int32), found, frontier, 1, n_runs)
    return ranked, found.astype(jnp.int32)


def breadth_blocks(score: EdgeScorer, n_edges: jax.Array, window: int, pair_base: jax.Array, frontier: int, k: int,
                   theta: jax.Array, relation_bonus: bool, tau_admits: bool) -> tuple[Ranked, jax.Array]:
    """Breadth: per pair the edges that pass :func:`~kernels.candidates.admits`, best ``k`` per pair, best
    ``frontier`` per run. Returns the ranking and per pair the number of qualifying edges (for overflow)."""
    n_pairs = pair_base.shape[0]
    n_runs = n_pairs // frontier
    capacity = n_runs * frontier + window

    def squeeze(buffer, count, bars):
        packed, kept, _, new_bars = compact(buffer, jnp.arange(capacity) < count, pair_base, frontier, k, n_runs)
        return packed, kept, new_bars

    def body(carry):
        block, buffer, count, qualified, bars = carry
        buffer, count, bars = jax.lax.cond(count + window > capacity, squeeze, lambda b, c, bars: (b, c, bars),
                                           buffer, count, bars)
        e = score(block * window, window)
        ok = admits(e, theta, relation_bonus, tau_admits)
        qualified = qualified + jax.ops.segment_sum(ok.astype(jnp.int32), e.pair, num_segments=n_pairs)
        node_bar, run_bar = bars
        enter = ok & (e.t_score > node_bar[e.pair]) & (pair_base[e.pair] + e.t_score >= run_bar[e.run])
        buffer, entered = scatter_packed(buffer, count, enter, (e.pair, e.t_score, e.triple))
        return block + 1, buffer, count + entered, qualified, bars

    blocks = (n_edges + window - 1) // window
    empty = (jnp.full(capacity, n_pairs, jnp.int32), jnp.full(capacity, NEG_INF, jnp.float32),
             jnp.full(capacity, -1, jnp.int32))
    bars = (jnp.full(n_pairs, NEG_INF, jnp.float32), jnp.full(n_runs, NEG_INF, jnp.float32))
    init = (jnp.int32(0), empty, jnp.int32(0), jnp.zeros(n_pairs, jnp.int32), bars)
    _, buffer, count, qualified, _ = jax.lax.while_loop(lambda c: c[0] < blocks, body, init)
    return final_ranking(buffer, count, pair_base, frontier, k, n_runs), qualified

"""The ``flat`` trace backend: a step's edge list gathered in one wide block, selected by sorts.

Shaped for accelerators, where the ``blocks`` backend's many small data-dependent rounds (a block of
edges, a conditional compaction, a scatter into a buffer, per block) are launch-bound. Here a step reads
its whole edge list in one flat gather of ``width`` edges (the tracer picks ``width`` from the batch's
static shapes, several edges per frontier pair), scores it and selects with segment reductions and one
sort (:func:`kernels.candidates.compact`): no bars, no buffer, no conditional. A step whose frontier has
more incident triples than ``width`` takes further blocks of the same width, each merged with the
survivors of the last by the same sort (exact, see :mod:`kernels.candidates`), so results never depend
on the width. Both functions return exactly what their :mod:`kernels.blocks` twins return.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from kernels.blocks import precision_blocks
from kernels.candidates import EdgeScorer, Ranked, admits, compact, final_ranking

EDGES_PER_PAIR = 4  # a flat block holds this many edges per frontier pair (wider steps take more blocks)


def flat_width(n_pairs: int, window: int) -> int:
    """Static edges per flat block: a power of two >= EDGES_PER_PAIR x the pairs, and >= ``window``."""
    return max(window, 1 << max(EDGES_PER_PAIR * n_pairs - 1, 0).bit_length())


def precision_flat(score: EdgeScorer, n_edges: jax.Array, width: int, pair_base: jax.Array, frontier: int
                   ) -> tuple[Ranked, jax.Array]:
    """Precision over wide blocks: a segment max and a first-position min per block, nothing else, so it is
    :func:`kernels.blocks.precision_blocks` at a block width that usually covers the step."""
    return precision_blocks(score, n_edges, width, pair_base, frontier)


def breadth_flat(score: EdgeScorer, n_edges: jax.Array, width: int, pair_base: jax.Array, frontier: int, k: int,
                 theta: jax.Array, relation_bonus: bool, tau_admits: bool) -> tuple[Ranked, jax.Array]:
    """Breadth over wide blocks: each block's qualifying edges and the survivors so far (at most ``frontier``
    per run) are cut to each run's best ``frontier`` of each pair's best ``k`` by one sort."""
    n_pairs = pair_base.shape[0]
    n_runs = n_pairs // frontier
    kept_cap = n_runs * frontier  # survivors: at most F per run

    def body(carry):
        block, kept, count, qualified = carry
        e = score(block * width, width)
        ok = admits(e, theta, relation_bonus, tau_admits)
        qualified = qualified + jax.ops.segment_sum(ok.astype(jnp.int32), e.pair, num_segments=n_pairs)
        merged = tuple(jnp.concatenate([a, b]) for a, b in zip(kept, (e.pair, e.t_score, e.triple), strict=True))
        live = jnp.concatenate([jnp.arange(kept_cap) < count, ok])
        packed, count, _, _ = compact(merged, live, pair_base, frontier, k, n_runs)
        return block + 1, tuple(a[:kept_cap] for a in packed), count, qualified

    blocks = (n_edges + width - 1) // width
    empty = (jnp.full(kept_cap, n_pairs, jnp.int32), jnp.full(kept_cap, -jnp.inf, jnp.float32),
             jnp.full(kept_cap, -1, jnp.int32))
    init = (jnp.int32(0), empty, jnp.int32(0), jnp.zeros(n_pairs, jnp.int32))
    _, kept, count, qualified = jax.lax.while_loop(lambda c: c[0] < blocks, body, init)
    return final_ranking(kept, count, pair_base, frontier, k, n_runs), qualified

"""A trace step's candidates: scored edges in, each run's ranked bindings out (shared by both trace backends).

A step scores the incident edges of B·F (run, frontier position) pairs. A Breadth step keeps, per pair,
its best ``k`` qualifying edges (T-Score descending, lower triple id first) and then, per run, the best
``frontier`` of those by cumulative score (ties: parent position, then rank within the parent), which is
how the reference tracer orders a step's bindings. :func:`compact` applies both caps to any candidate
buffer; it is exact mid-stream (a later edge can only push an entry further down its pair's and its
run's order, never up), so a backend may compact as often as it likes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from kernels.select import NEG_INF, scatter_packed, segment_top_k


class Edges(NamedTuple):
    """A block of scored edges (all [W])."""

    pair: jax.Array  # int32: the (run, frontier position) pair the edge leaves
    run: jax.Array  # int32: the pair's run
    triple: jax.Array  # int32: KG triple id
    t_score: jax.Array  # float32: the edge's T-Score
    same_relation: jax.Array  # bool: the triple's relation is the step's
    valid: jax.Array  # bool: a real edge the step may take
    guided: jax.Array  # float32: τ added to this edge's T-Score (0 outside the guidance graph)


# score(start, width): the edges [start, start + width) of the step's edge list, scored
EdgeScorer = Callable[[jax.Array, int], Edges]


class Ranked(NamedTuple):
    """Candidates sorted by (run, -total, parent position, rank within parent); ``keep`` = in the run's top F."""

    run: jax.Array
    pair: jax.Array
    triple: jax.Array
    t_score: jax.Array
    total: jax.Array
    run_rank: jax.Array
    keep: jax.Array


def rank_runs(pair, triple, t_score, total, node_rank, ok, frontier: int, k: int, n_runs: int) -> Ranked:
    """Order candidates the way the reference orders a step's bindings and mark each run's best ``frontier``."""
    tie = (pair % frontier) * k + node_rank
    order, run, run_rank, keep = segment_top_k(pair // frontier, total, tie, ok, frontier, n_runs)
    return Ranked(run, pair[order], triple[order], t_score[order], total[order], run_rank, keep)


def compact(buffer: tuple[jax.Array, jax.Array, jax.Array], live: jax.Array, pair_base: jax.Array, frontier: int,
            k: int, n_runs: int) -> tuple[tuple, jax.Array, Ranked, tuple]:
    """Cut a candidate buffer (pair, t_score, triple; ``live`` marks real entries) to what can still be
    selected: each run's best F of each pair's best K.

    Returns the buffer with the survivors packed to its front in their final order, their count, the
    ranking, and the admission bars that follow: per pair, the T-Score of its K-th best edge so far (-inf
    while it has fewer), which a later edge of the pair must beat strictly (a later edge has a higher
    triple id, so it loses ties); per run, the total of its F-th best candidate among the pair survivors,
    which a later edge must at least reach (it may win a tie on parent position). Neither bar ever falls:
    a survivor is only displaced by a better edge of its own pair, which has a higher total.
    """
    pair, t_score, triple = buffer
    capacity = pair.shape[0]
    n_pairs = pair_base.shape[0]
    order, pair_key, node_rank, ok = segment_top_k(pair, t_score, triple, live, k, n_pairs)
    pair, t_score, triple = pair[order], t_score[order], triple[order]
    safe_pair = jnp.minimum(pair, n_pairs - 1)
    total = pair_base[safe_pair] + t_score
    ranked = rank_runs(safe_pair, triple, t_score, total, node_rank, ok, frontier, k, n_runs)
    empty = (jnp.full(capacity, n_pairs, jnp.int32), jnp.full(capacity, NEG_INF, jnp.float32),
             jnp.full(capacity, -1, jnp.int32))
    packed, kept = scatter_packed(empty, 0, ranked.keep, (ranked.pair, ranked.t_score, ranked.triple))
    node_bar = jnp.full(n_pairs, NEG_INF, jnp.float32).at[
        jnp.where((pair_key < n_pairs) & (node_rank == k - 1), pair_key, n_pairs)].set(t_score, mode="drop")
    run_bar = jnp.full(n_runs, NEG_INF, jnp.float32).at[
        jnp.where((ranked.run < n_runs) & (ranked.run_rank == frontier - 1), ranked.run, n_runs)].set(
        ranked.total, mode="drop")
    return packed, kept, ranked, (node_bar, run_bar)


def final_ranking(buffer, count, pair_base, frontier: int, k: int, n_runs: int) -> Ranked:
    """:func:`compact`'s ranking of a buffer whose ``count`` live entries are packed at its front, sorting
    only a prefix that holds them.

    A sort costs what it sorts (XLA's CPU sort of a full B·F + window buffer, twice, was most of a step's
    fixed cost), so the smallest of a few static prefix lengths that holds ``count`` is ranked
    (``lax.switch``); entries past ``count`` were never selectable, so the ranking is the same. The ranked
    arrays are padded back to the buffer's length with unselected entries."""
    capacity = buffer[0].shape[0]
    sizes = sorted({max(1, min(capacity, capacity >> shift)) for shift in (4, 2, 0)})

    def rank_prefix(size):
        def branch(buffer, count):
            _, _, ranked, _ = compact(tuple(a[:size] for a in buffer), jnp.arange(size) < count, pair_base, frontier,
                                      k, n_runs)
            pad = capacity - size
            fill = {"run": n_runs, "pair": 0, "triple": -1, "t_score": NEG_INF, "total": NEG_INF, "run_rank": 0,
                    "keep": False}
            return Ranked(*(jnp.pad(getattr(ranked, name), (0, pad), constant_values=fill[name])
                            for name in Ranked._fields))
        return branch

    which = jnp.searchsorted(jnp.asarray(sizes, jnp.int32), count, side="left")
    return jax.lax.switch(jnp.minimum(which, len(sizes) - 1), [rank_prefix(size) for size in sizes], buffer, count)


def admits(e: Edges, theta: jax.Array, relation_bonus: bool, tau_admits: bool) -> jax.Array:
    """Breadth's threshold test: T >= θ (without τ when ``tau_admits`` is off), or the step's relation when
    the relation bonus is on."""
    ok = e.valid & ((e.t_score if tau_admits else e.t_score - e.guided) >= theta)
    if relation_bonus:
        ok |= e.valid & e.same_relation
    return ok

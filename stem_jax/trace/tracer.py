"""JAX tracer: the reference's level-synchronous search as padded frontier expansion in one jit.

Per schema step every run holds a frontier of at most ``frontier`` bindings (KG node, cumulative
score) for the step's parent slot. Incident triples are read through the CSR in windows of
``window`` entries (a ``lax.while_loop`` over windows, so a hub with thousands of triples costs
more iterations, not a wider array), scored against the schema triple's embedding, masked by the
run's used-triple bitmap, and folded into a running argmax (Precision) or running top-K above θ
(Breadth). The step's candidates [frontier, K] are then cut back to ``frontier`` by cumulative
score with ``lax.top_k`` and become the child slot's bindings. Everything dropped by a capacity is
counted in ``overflow``. Runs are vmapped over a batch; shapes depend only on
(strategy, steps bucket, batch), so a whole split compiles a handful of times.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from kernels import NEG_INF, gather_padded, merge_topk, running_argmax


@dataclasses.dataclass(frozen=True)
class TracerShapes:
    """Static capacities of one compiled tracer."""

    frontier: int = 64  # bindings kept per schema node (F)
    node_matches: int = 16  # Breadth matches kept per frontier node and step (K)
    window: int = 32  # incident triples read per CSR window (D)
    guidance: int = 64  # guidance entities per run (G), padded with -1


class KGArrays(NamedTuple):
    """The KG as device arrays (one copy shared by every batch)."""

    csr_offsets: jax.Array  # int32 [n + 1]
    csr_triples: jax.Array  # int32 [nnz]
    triples: jax.Array  # int32 [m, 3]
    triple_emb: jax.Array  # float16/float32 [m, d]
    degree: jax.Array  # int32 [n]

    @classmethod
    def from_index(cls, index, triple_emb: np.ndarray) -> KGArrays:
        offsets = np.asarray(index.csr_offsets)
        if offsets[-1] >= np.iinfo(np.int32).max:
            raise ValueError("KG too large for int32 CSR offsets")
        # Padding the incidence list to 2m keeps its shape a function of m alone (self-loops
        # shorten it), so KGs of equal size share compiled tracers.
        incidence = np.zeros(2 * index.num_triples, np.int32)
        incidence[: len(index.csr_triples)] = index.csr_triples
        return cls(
            csr_offsets=jnp.asarray(offsets.astype(np.int32)),
            csr_triples=jnp.asarray(incidence),
            triples=jnp.asarray(index.triples, dtype=jnp.int32),
            triple_emb=jnp.asarray(triple_emb),
            degree=jnp.asarray(np.diff(offsets).astype(np.int32)),
        )


class TraceBatch(NamedTuple):
    """One padded batch of runs (a run = question x plan x anchor)."""

    steps: jax.Array  # int32 [B, S, 3]: parent slot, child slot, relation id (-1: not in KG)
    step_mask: jax.Array  # bool [B, S]
    step_emb: jax.Array  # float32 [B, S, d]
    anchor: jax.Array  # int32 [B] (-1: padding run)
    anchor_score: jax.Array  # float32 [B]
    guidance: jax.Array  # int32 [B, G] guidance entity ids, -1 padded


class Hyper(NamedTuple):
    """Traced hyper-parameters, so a grid over them can be vmapped without recompiling."""

    tau: jax.Array
    theta: jax.Array


class TraceOutput(NamedTuple):
    nodes: jax.Array  # int32 [B, S+1, F], -1 where empty
    scores: jax.Array  # float32 [B, S+1, F]
    via: jax.Array  # int32 [B, S+1, F] triple that bound the node, -1 for anchor/empty
    parents: jax.Array  # int32 [B, S+1, F] index into the parent slot, -1 for anchor/empty
    overflow: jax.Array  # int32 [B]


def _in_guidance(entities: jax.Array, guidance: jax.Array) -> jax.Array:
    return jnp.any((entities[..., None] == guidance) & (guidance >= 0), axis=-1)


def _step_candidates(kg, shapes, precision, relation_bonus, hyper, used, guidance, nodes, base, step, query):
    """Best matches of every frontier node for one schema step: ([F, K] triple ids, T, count)."""
    f = nodes.shape[0]
    k = 1 if precision else shapes.node_matches
    valid_node = nodes >= 0
    max_degree = jnp.max(jnp.where(valid_node, kg.degree[jnp.where(valid_node, nodes, 0)], 0))
    relation = step[2]

    def window_scores(skip):
        ids, mask, _ = gather_padded(kg.csr_offsets, kg.csr_triples, nodes, shapes.window, skip)
        safe = jnp.where(mask, ids, 0)
        mask &= ~used[safe]
        dots = jnp.einsum("fwd,d->fw", kg.triple_emb[safe].astype(jnp.float32), query)
        ends = kg.triples[safe]
        in_guidance = _in_guidance(ends[..., 0], guidance) & _in_guidance(ends[..., 2], guidance)
        t_score = dots + jnp.where(in_guidance, hyper.tau, 0.0)
        same_relation = (ends[..., 1] == relation) & (relation >= 0)
        if relation_bonus:
            t_score = t_score + jnp.where(same_relation, 1.0, 0.0)
        return ids, mask, t_score, same_relation

    def body(carry):
        skip, best_val, best_id, count = carry
        ids, mask, t_score, same_relation = window_scores(skip)
        if precision:
            total = jnp.where(mask, base[:, None] + t_score, NEG_INF)
            best_val, best_id = running_argmax(best_val[:, 0], best_id[:, 0], total, ids)
            best_val, best_id = best_val[:, None], best_id[:, None]
        else:
            ok = mask & (t_score >= hyper.theta)
            if relation_bonus:
                ok |= mask & same_relation
            count = count + ok.sum(axis=-1)
            best_val, best_id = merge_topk(best_val, best_id, jnp.where(ok, t_score, NEG_INF), ids)
        return skip + shapes.window, best_val, best_id, count

    start_val = jnp.full((f, k), -1.0 if precision else NEG_INF, jnp.float32)
    init = (jnp.int32(0), start_val, jnp.full((f, k), -1, jnp.int32), jnp.zeros(f, jnp.int32))
    _, best_val, best_id, count = jax.lax.while_loop(lambda c: c[0] < max_degree, body, init)
    if precision:
        found = best_id >= 0
        total = jnp.where(found, best_val, NEG_INF)  # running value is already S + T
        dropped = jnp.int32(0)
    else:
        found = jnp.isfinite(best_val)
        total = jnp.where(found, base[:, None] + best_val, NEG_INF)
        dropped = jnp.maximum(count - k, 0).sum()
    return jnp.where(found, best_id, -1), total, dropped


def _trace_one(kg, shapes, precision, relation_bonus, hyper, steps, step_mask, step_emb, anchor, anchor_score, guidance):
    n_steps = steps.shape[0]
    f = shapes.frontier
    k = 1 if precision else shapes.node_matches
    slots = n_steps + 1
    nodes = jnp.full((slots, f), -1, jnp.int32).at[0, 0].set(anchor)
    scores = jnp.full((slots, f), NEG_INF, jnp.float32).at[0, 0].set(jnp.where(anchor >= 0, anchor_score, NEG_INF))
    via = jnp.full((slots, f), -1, jnp.int32)
    parents = jnp.full((slots, f), -1, jnp.int32)
    used = jnp.zeros(kg.triples.shape[0], bool)

    def step_fn(carry, s):
        nodes, scores, via, parents, used, overflow = carry
        step = steps[s]
        parent_nodes = jnp.where(step_mask[s], nodes[step[0]], -1)
        ids, total, dropped = _step_candidates(
            kg, shapes, precision, relation_bonus, hyper, used, guidance, parent_nodes, scores[step[0]], step, step_emb[s]
        )
        flat_total, flat_ids = total.reshape(-1), ids.reshape(-1)
        kept_total, pos = jax.lax.top_k(flat_total, f)
        kept_ids = flat_ids[pos]
        kept = kept_ids >= 0
        overflow += dropped + jnp.maximum((flat_ids >= 0).sum() - f, 0)
        from_node = parent_nodes[pos // k]
        ends = kg.triples[jnp.where(kept, kept_ids, 0)]
        child = jnp.where(ends[:, 0] == from_node, ends[:, 2], ends[:, 0])
        c = step[1]
        nodes = nodes.at[c].set(jnp.where(kept, child, -1))
        scores = scores.at[c].set(jnp.where(kept, kept_total, NEG_INF))
        via = via.at[c].set(jnp.where(kept, kept_ids, -1))
        parents = parents.at[c].set(jnp.where(kept, pos // k, -1).astype(jnp.int32))
        used = used.at[jnp.where(kept, kept_ids, kg.triples.shape[0])].set(True, mode="drop")
        return (nodes, scores, via, parents, used, overflow), None

    init = (nodes, scores, via, parents, used, jnp.int32(0))
    (nodes, scores, via, parents, _, overflow), _ = jax.lax.scan(step_fn, init, jnp.arange(n_steps))
    return TraceOutput(nodes, scores, via, parents, overflow)


@functools.partial(jax.jit, static_argnames=("shapes", "precision", "relation_bonus"))
def trace_batch(kg: KGArrays, batch: TraceBatch, hyper: Hyper, *, shapes: TracerShapes, precision: bool,
                relation_bonus: bool = False) -> TraceOutput:
    """Trace a padded batch of runs that share one strategy; see the module docstring."""
    run = functools.partial(_trace_one, kg, shapes, precision, relation_bonus, hyper)
    return jax.vmap(run)(batch.steps, batch.step_mask, batch.step_emb, batch.anchor, batch.anchor_score, batch.guidance)


@functools.partial(jax.jit, static_argnames=("top_n",))
def anchor_batch(entity_emb: jax.Array, mentions: jax.Array, guidance: jax.Array, lam: jax.Array, *, top_n: int):
    """Eqs. 8-11, 15 for a batch: top-N entities by cosine, λ inside the guidance set, argmax.

    Returns (anchor ids int32 [B], anchor scores float32 [B]).
    """
    cos = jnp.einsum("nd,bd->bn", entity_emb.astype(jnp.float32), mentions)
    top_cos, top_ids = jax.lax.top_k(cos, top_n)
    boosted = top_cos * jnp.where(_in_guidance(top_ids, guidance[:, None, :]), lam, 1.0)
    best = jnp.argmax(boosted, axis=-1)
    pick = lambda a: jnp.take_along_axis(a, best[:, None], axis=-1)[:, 0]  # noqa: E731
    return pick(top_ids).astype(jnp.int32), pick(boosted)

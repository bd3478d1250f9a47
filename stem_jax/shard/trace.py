"""The tracer over a KG sharded across devices: each device scores the incident triples it holds, and JAX
collectives inside ``shard_map`` merge the candidates into the one-device tracer's bindings.

Every device holds the whole batch and the whole search state (bindings, scores, used triples:
O(B·S·F), replicated) and a contiguous range of the KG's triples with its own incidence
(:mod:`stem_jax.shard.partition`). At a schema step each device runs the one-device tracer's own
candidate kernels (:func:`~stem_jax.trace.tracer.trace_batch`'s Precision and Breadth passes) over the
frontier's incident triples *it holds*, then:

* Precision: a frontier pair's best edge is the first (lowest triple id) maximising S + T; each device
  has its local best, and ``pmax`` of the value, then ``pmin`` of the triple id among the devices that
  reach it, is the global one (device ranges are ascending, so the lowest id is the one-device
  tracer's earliest edge in CSR order);
* Breadth: each device keeps its run-wise best F of each node's best K (its own candidate ranking),
  ``all_gather`` brings the D·B·F survivors together and the same ranking cuts them to the global best.
  Exact: a node's global best K are among the devices' local best K, and a candidate outside its
  run's best F among one device's survivors has at least as many better candidates among the global
  survivors (a local survivor the global cut drops is beaten by K global survivors of its node);
* the per-node match counts (overflow, capacity needs) are ``psum`` med, and the (head, tail) of each
  selected triple comes from its owner device by a ``psum`` of the owners' lookups.

The bindings, scores, overflow and needs are then those of :func:`~stem_jax.trace.tracer.trace_batch`
on the whole KG (the property tests compare them array for array), at any device count, on one host or
over processes (a mesh over ``jax.devices()`` after ``jax.distributed.initialize``). Per step and run
the collectives move O(D·F) values, independent of the KG's size and of the frontier's degrees.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from kernels.candidates import rank_runs
from kernels.flat import breadth_flat, flat_width, precision_flat
from kernels.rows import project_queries
from stem_jax.errors import StemError
from stem_jax.shard.partition import KG_AXIS, ShardedKG, kg_mesh, replicate, shard_kg
from stem_jax.trace import tracer as one
from stem_jax.trace.tracer import BIG, NEG_INF, Hyper, KGArrays, TraceBatch, TraceOutput, TracerShapes

_STATIC = ("shapes", "precision", "relation_bonus", "tau_admits", "direction", "used", "halt_overflowed", "backend")


def _local_kg(kg: ShardedKG) -> KGArrays:
    """The device's shard as the one-device kernels read it (local triple ids, its own CSR)."""
    return KGArrays(csr_offsets=kg.csr_offsets, csr_triples=kg.csr_triples, triples=kg.triples,
                    triple_emb=kg.triple_emb, degree=kg.csr_offsets, triple_scale=kg.triple_scale,
                    row_basis=kg.row_basis, row_mean=kg.row_mean)


def _shift_rows(rows: jax.Array, start: jax.Array) -> jax.Array:
    """Sorted rows of global triple ids (int32 max = empty) in the shard's local ids (order kept)."""
    return jnp.where(rows < BIG, rows - start, BIG)


def _merge_precision(ranked, start, n_pairs, frontier, n_runs):
    """The devices' per-pair best edges -> the global ranked Precision candidates and match counts."""
    pair = ranked.pair
    local_val = jnp.full(n_pairs, -1.0, jnp.float32).at[pair].set(ranked.total)
    local_triple = jnp.full(n_pairs, -1, jnp.int32).at[pair].set(ranked.triple)
    found = local_triple >= 0
    best = jax.lax.pmax(local_val, KG_AXIS)
    triple = jax.lax.pmin(jnp.where(found & (local_val == best), local_triple + start, BIG), KG_AXIS)
    found = triple < BIG
    triple = jnp.where(found, triple, -1)
    merged = rank_runs(jnp.arange(n_pairs, dtype=jnp.int32), triple, best, best, jnp.zeros(n_pairs, jnp.int32),
                            found, frontier, 1, n_runs)
    return merged, found.astype(jnp.int32)


def _merge_breadth(ranked, qualified, start, pair_base, frontier, k, n_runs):
    """The devices' run-wise survivors -> all gathered -> the one-device ranking over them."""
    n_pairs = pair_base.shape[0]
    size = n_runs * frontier
    slot = jnp.where(ranked.keep, jnp.cumsum(ranked.keep) - 1, size)
    packed = (jnp.full(size, n_pairs, jnp.int32).at[slot].set(ranked.pair, mode="drop"),
              jnp.full(size, NEG_INF, jnp.float32).at[slot].set(ranked.t_score, mode="drop"),
              jnp.full(size, -1, jnp.int32).at[slot].set(ranked.triple + start, mode="drop"))
    gathered = tuple(jax.lax.all_gather(a, KG_AXIS, tiled=True) for a in packed)
    # every gathered entry is live or carries the pair sentinel, which the ranking leaves unselected
    _, _, merged, _ = one.compact_buffer(gathered, jnp.int32(gathered[0].shape[0]), pair_base, frontier, k, n_runs)
    return merged, jax.lax.psum(qualified, KG_AXIS)


def _owned_ends(kg: ShardedKG, triple: jax.Array, start: jax.Array) -> jax.Array:
    """int32 [N, 3]: the (head, relation, tail) of global triple ids (-1: zeros), from their owners."""
    rows = kg.triples.shape[0]
    local = triple - start
    mine = (triple >= 0) & (local >= 0) & (local < rows)
    ends = jnp.where(mine[:, None], kg.triples[jnp.clip(local, 0, rows - 1)], 0)
    return jax.lax.psum(ends, KG_AXIS)


def _local_trace(kg: ShardedKG, batch: TraceBatch, hyper: Hyper, *, shapes: TracerShapes, precision: bool,
                 relation_bonus: bool, tau_admits: bool, direction: str, used: str,
                 halt_overflowed: bool, backend: str) -> TraceOutput:
    """One device's part of :func:`trace_batch_sharded` (inside ``shard_map``): the one-device tracer's step
    loop (:func:`~stem_jax.trace.tracer.trace_steps`), with the candidate passes run over the local shard and
    merged by collectives."""
    local_kg = _local_kg(kg)
    start = (jax.lax.axis_index(KG_AXIS) * kg.triples.shape[0]).astype(jnp.int32)
    f = shapes.frontier
    n_runs = batch.steps.shape[0]
    step_proj, step_bias = project_queries(batch.step_emb, kg.row_basis, kg.row_mean)

    def candidates(pair_nodes, pair_base, runs_of_pair, masks, queries, relation, guidance):
        safe = jnp.maximum(pair_nodes, 0)
        degree = jnp.where(pair_nodes >= 0, kg.csr_offsets[safe + 1] - kg.csr_offsets[safe], 0)  # local degree
        cum = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(degree).astype(jnp.int32)])
        args = (local_kg, hyper, relation_bonus, cum, pair_nodes, pair_base, runs_of_pair, masks, queries,
                relation, guidance, shapes.window)
        if backend == "flat":  # the shard's edges in wide blocks (accelerators), as trace_batch's flat backend
            score = one.edge_scorer(*args[:3], cum, pair_nodes, runs_of_pair, masks, queries, relation, guidance)
            width = flat_width(n_runs * f, shapes.window)
            if precision:
                ranked, qualified = precision_flat(score, cum[-1], width, pair_base, f)
            else:
                ranked, qualified = breadth_flat(score, cum[-1], width, pair_base, f, shapes.node_matches,
                                                 hyper.theta, relation_bonus, tau_admits)
        elif precision:
            ranked, qualified = one.precision_candidates(*args, f)
        else:
            ranked, qualified = one.breadth_candidates(*args, f, shapes.node_matches, tau_admits)
        if precision:
            return _merge_precision(ranked, start, pair_nodes.shape[0], f, n_runs)
        return _merge_breadth(ranked, qualified, start, pair_base, f, shapes.node_matches, n_runs)

    return one.trace_steps(batch, step_proj, step_bias, shapes=shapes, precision=precision, direction=direction,
                           used=used, halt_overflowed=halt_overflowed, candidates=candidates,
                           triple_ends=lambda triple: _owned_ends(kg, triple, start),
                           shift_rows=lambda rows: _shift_rows(rows, start))


@functools.lru_cache(maxsize=64)
def _compiled(mesh: Mesh, static: tuple) -> jax.stages.Wrapped:
    kwargs = dict(zip(_STATIC, static, strict=True))
    kg_spec = ShardedKG(*(PartitionSpec(KG_AXIS),) * 5, PartitionSpec(), PartitionSpec())
    body = functools.partial(_local_trace, **kwargs)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(kg_spec, PartitionSpec(), PartitionSpec()),
                                 out_specs=PartitionSpec(), check_vma=False))


def trace_batch_sharded(kg: ShardedKG, batch: TraceBatch, hyper: Hyper, *, mesh: Mesh, shapes: TracerShapes,
                        precision: bool, relation_bonus: bool = False, tau_admits: bool = True,
                        direction: str = "undirected", used: str = "run", halt_overflowed: bool = False,
                        backend: str = "auto") -> TraceOutput:
    """:func:`~stem_jax.trace.tracer.trace_batch` over a KG sharded by :func:`~stem_jax.shard.partition.shard_kg`
    on ``mesh``: the same arguments and the same outputs (replicated on every device of the mesh).

    ``batch`` and ``hyper`` may be host arrays (the same on every process: they are replicated onto the
    mesh here) or arrays already replicated on it. One compiled program per (mesh, static arguments,
    shapes), cached like ``trace_batch``'s. ``backend`` (auto | blocks | flat) picks how each shard reads its
    edges, as for ``trace_batch`` (``auto``: by the mesh's platform)."""
    if direction not in ("undirected", "directed") or used not in ("run", "branch", "step"):
        raise ValueError(f"unknown direction {direction!r} or used-triple rule {used!r}")
    if direction == "directed" and batch.forward is None:
        raise ValueError("direction='directed' needs TraceBatch.forward (each step's orientation)")
    batch, hyper = (x if _on_mesh(x, mesh) else replicate(mesh, x) for x in (batch, hyper))
    if backend == "auto":
        backend = "blocks" if mesh.devices.flat[0].platform == "cpu" else "flat"
    static = (shapes, precision, relation_bonus, tau_admits, direction, used, halt_overflowed,
              one.resolve_backend(backend))
    return _compiled(mesh, static)(kg, batch, hyper)


def _on_mesh(tree, mesh: Mesh) -> bool:
    leaves = jax.tree_util.tree_leaves(tree)
    return all(isinstance(leaf, jax.Array) and getattr(leaf.sharding, "mesh", None) == mesh for leaf in leaves)


def local_result(out: TraceOutput) -> TraceOutput:
    """The (replicated) outputs as host arrays of this process (also where the mesh spans processes)."""
    return TraceOutput(*(np.asarray(leaf.addressable_data(0)) for leaf in out))


class KGShardedTracing:
    """The STEM pipeline's tracing collaborator with the KG sharded: the interface of
    :class:`~stem_jax.eval.sharding.BatchSharding` (``trace``, ``anchor``, ``replicate``, ``round_up``), whose
    ``trace`` ignores the replicated ``KGArrays`` it is handed and traces ``kg`` over ``mesh`` instead.

    Anchoring, batch rounding and replication are ``batches``' (the process's BatchSharding), so batches are
    padded as before and every run's bindings are the one-device tracer's. A pipeline opts in by holding
    one of these as its ``sharding`` (and then need not keep a replicated ``KGArrays`` at all)."""

    def __init__(self, kg: ShardedKG, mesh: Mesh, batches):
        self.kg, self.mesh, self.batches = kg, mesh, batches

    @property
    def count(self) -> int:
        return self.batches.count

    @property
    def active(self) -> bool:
        return self.batches.active

    def round_up(self, size: int) -> int:
        return self.batches.round_up(size)

    def replicate(self, tree):
        return self.batches.replicate(tree)

    def shard_batch(self, batch):
        return self.batches.shard_batch(batch)

    def trace(self, kg, batch: TraceBatch, hyper: Hyper, *, backend: str = "auto", **static) -> TraceOutput:
        """:func:`trace_batch_sharded` on the sharded KG (``kg``, the replicated arrays, is not read)."""
        del kg
        return trace_batch_sharded(self.kg, batch, hyper, mesh=self.mesh, backend=backend, **static)

    def anchor(self, *args, **kwargs):
        return self.batches.anchor(*args, **kwargs)


def sharded_tracing(index: Any, triple_rows: Any, count: int, batches: Any) -> KGShardedTracing:
    """The KG's triples cut over the first ``count`` devices (every process's, in JAX's order) as the pipeline's
    tracing collaborator, ``batches`` (its BatchSharding) anchoring and padding as before."""
    devices = jax.devices()
    if count > len(devices):
        raise StemError(f"--engine.kg_shards={count}: only {len(devices)} device(s) are visible\n  how to fix: use at "
                        f"most {len(devices)}, or on a CPU expose more with "
                        f"XLA_FLAGS=--xla_force_host_platform_device_count={count} (set before starting)")
    mesh = kg_mesh(devices[:count])
    kg, _ = shard_kg(index, triple_rows, mesh)
    return KGShardedTracing(kg, mesh, batches)

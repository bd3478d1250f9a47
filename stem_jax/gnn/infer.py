"""Batched, jitted Triple-GNN inference.

Two ways in, one dispatch loop (:func:`dispatch`): :func:`predict` packs training-style examples
by size (:func:`stem_jax.gnn.batching.pack_by_size`) into power-of-two buckets and returns every
node's probability; :func:`predict_top` packs a :class:`~stem_jax.gnn.multihop.GraphSet` into
few fixed-shape bins (:mod:`stem_jax.gnn.packing`) and keeps each graph's top entities. Each
batch costs one host->device and one device->host transfer, and is dispatched before the previous
one is read back, so host work overlaps device compute; per-graph top-K happens on the host.
Trained parameters come from :func:`stem_jax.gnn.checkpoint.load_checkpoint`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

from stem_jax.gnn.batching import GraphExample, node_offsets, pack_by_size, pad_batch

# re-exported for callers that load a checkpoint from here (stem_jax.engine); its home is gnn.checkpoint
from stem_jax.gnn.checkpoint import load_checkpoint as load_checkpoint
from stem_jax.gnn.model import ModelSpec, build_model, reach_logits
from stem_jax.gnn.multihop import GraphSet
from stem_jax.gnn.packing import (
    BIN_EDGES,
    BIN_GRAPHS,
    REACH_EDGES,
    ReachIndex,
    ReachShape,
    assemble,
    assemble_reach,
    own_shape,
    plan_bins,
    plan_reach_work,
    reach_index,
    schema_means,
)
from stem_jax.kg.subgraph import csr_ranges

MAX_BATCH_EDGES = 1 << 17  # edges per inference batch (a larger graph gets a batch of its own)
MAX_BATCH_GRAPHS = 64
IN_FLIGHT = 1  # batches dispatched ahead of the one being read back
# float32 matmuls at full precision on every backend. XLA's GPU default is TF32 (10-bit mantissa),
# under which the reach and plain forwards disagree on the top-64 order of many rows; at "highest"
# they differ only at near-ties, as on CPU, at the same warm throughput
# (experiments/results/gnn-inference-full-split-gpu-limit1500-precision-*.md). CPU float32 dots are
# exact already.
PRECISION = "highest"


def _at_precision(jitted):
    """``jitted`` traced and run under :data:`PRECISION` (the setting is part of jit's cache key
    and is read when the function is lowered, so it must surround the call, not sit inside it)."""

    @functools.wraps(jitted)
    def call(*args):
        with jax.default_matmul_precision(PRECISION):
            return jitted(*args)

    call._cache_size = jitted._cache_size  # compile counts, read by the benchmarks
    return call


@functools.cache
def forward_fn(spec: ModelSpec, edge_order: str = "receiver"):
    """The jitted ``(params, graph, relation_emb) -> probabilities [N]`` of one architecture
    (``edge_order``: how the batch's edges are sorted, see :class:`~stem_jax.gnn.model.TripleGNN`)."""
    model = build_model(spec, edge_order)

    @jax.jit
    def forward(params, graph, relation_emb):
        return jax.nn.sigmoid(model.apply(params, graph, relation_emb))

    return _at_precision(forward)


Key = TypeVar("Key")


def dispatch(forward: Callable, params: Any, relation_emb: np.ndarray, batches: Iterable[tuple[Key, Any]],
             ) -> Iterator[tuple[Key, np.ndarray]]:
    """Run ``forward(params, batch, relation_emb)`` on every (key, batch) of ``batches`` and yield
    (key, probabilities on the host) in order: the one dispatch loop of GNN inference.

    Each batch is dispatched :data:`IN_FLIGHT` batches before it is read back, so the host work
    between two reads (building the next batch, which ``batches`` may do lazily, and whatever the
    caller does with a result) overlaps the device compute of the batches in flight."""
    rel = jax.device_put(np.asarray(relation_emb, np.float32))
    pending: collections.deque = collections.deque()
    for key, batch in batches:
        pending.append((key, forward(params, batch, rel)))
        if len(pending) > IN_FLIGHT:
            key, out = pending.popleft()
            yield key, np.asarray(jax.device_get(out))
    while pending:
        key, out = pending.popleft()
        yield key, np.asarray(jax.device_get(out))


def predict(params: Any, spec: ModelSpec, examples: Sequence[GraphExample], relation_emb: np.ndarray, *,
            max_edges: int = MAX_BATCH_EDGES, max_graphs: int = MAX_BATCH_GRAPHS) -> list[np.ndarray]:
    """Node probabilities (float32 [n_node]) of every example, in input order."""
    out: list[np.ndarray | None] = [None] * len(examples)
    for members, probs in iter_predict(params, spec, examples, relation_emb, max_edges=max_edges,
                                       max_graphs=max_graphs):
        for i, p in zip(members, probs, strict=True):
            out[i] = p
    return out  # type: ignore[return-value]


def iter_predict(params: Any, spec: ModelSpec, examples: Sequence[GraphExample], relation_emb: np.ndarray, *,
                 max_edges: int = MAX_BATCH_EDGES, max_graphs: int = MAX_BATCH_GRAPHS,
                 ) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """Yield (example indices, their node probabilities) one packed batch at a time."""

    def batches() -> Iterator[tuple[tuple[list[int], np.ndarray], Any]]:
        for members in pack_by_size(examples, max_edges, max_graphs):
            chosen = [examples[i] for i in members]
            yield (members, node_offsets(chosen)), pad_batch(chosen)

    for (members, offsets), probs in dispatch(forward_fn(spec), params, relation_emb, batches()):
        yield members, [probs[offsets[j] : offsets[j + 1]] for j in range(len(members))]


def top_of_batch(probs: np.ndarray, graph: np.ndarray, entities: np.ndarray, count: int, width: int,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per graph of a batch, its ``width`` best nodes (:func:`~stem_jax.gnn.guidance.select_top`'s
    order: probability descending, then lower entity id), for all graphs at once.

    Args: probs, graph, entities: float32 / int [n] of the batch's real nodes (graphs contiguous
    and ascending); count: graphs in the batch. Returns (graph, rank, position) of the kept nodes.
    """
    order = _top_order(probs, graph, entities, count)
    sorted_graph = graph[order]
    starts = np.searchsorted(sorted_graph, np.arange(count))
    rank = np.arange(len(order)) - starts[sorted_graph]
    keep = rank < width
    return sorted_graph[keep], rank[keep], order[keep]


def _top_order(probs: np.ndarray, graph: np.ndarray, entities: np.ndarray, count: int) -> np.ndarray:
    """The (graph, -probability, entity) order of the batch's nodes. Probabilities are sigmoids, so
    their float32 bit patterns (non-negative) sort like the values: graph, inverted bits and entity
    usually fit one int64 key, and one argsort replaces lexsort's three passes."""
    probs = np.asarray(probs, np.float32)
    entity_bits = max(int(entities.max(initial=0)), 1).bit_length()
    graph_bits = max(count, 1).bit_length()
    if graph_bits + 31 + entity_bits > 63 or not np.all(probs >= 0):
        return np.lexsort((entities, -probs, graph))
    inverted = np.int64(0x7FFFFFFF) - probs.view(np.int32).astype(np.int64)
    key = (graph.astype(np.int64) << (31 + entity_bits)) | (inverted << entity_bits) | entities.astype(np.int64)
    return np.argsort(key)


@functools.cache
def reach_forward_fn(layers: int):
    """The jitted ``(params, reach batch, relation_emb) -> probabilities [N]``
    (:func:`~stem_jax.gnn.model.reach_logits`)."""

    @jax.jit
    def forward(params, batch, relation_emb):
        return jax.nn.sigmoid(reach_logits(params, layers, batch, relation_emb))

    return _at_precision(forward)


# Reach bin shapes this process has run, per architecture: plan_reach_work prefers them over a new
# shape that would compile again.
_REACH_SHAPES: dict[ModelSpec, set[ReachShape]] = {}

METHODS = ("reach", "full")


@dataclasses.dataclass(frozen=True)
class InferencePlan:
    """The host-side plan of one :func:`predict_top` call: graphs, bins and their shapes (and for
    the reach method its index and schema means). Built by :func:`plan_inference` without touching
    the device, so a caller can build the next call's plan while the device runs this one."""

    graphs: GraphSet
    method: str
    work: list[tuple[np.ndarray, Any]]
    edge_order: str = "receiver"
    reach: ReachIndex | None = None
    schema_mean: np.ndarray | None = None


def plan_inference(spec: ModelSpec, graphs: GraphSet, *, max_edges: int | None = None, max_graphs: int = BIN_GRAPHS,
                   edge_order: str = "receiver", method: str = "reach") -> InferencePlan:
    """Bins of ``graphs`` for ``method`` (see :func:`predict_top`)."""
    if method not in METHODS:
        raise ValueError(f"unknown inference method {method!r} ({' or '.join(METHODS)})")
    if len(graphs) == 0:
        return InferencePlan(graphs, method, [], edge_order)
    if method == "reach":
        reach = reach_index(graphs)
        known = _REACH_SHAPES.setdefault(spec, set())
        work = plan_reach_work(reach.demand, max_edges=max_edges or REACH_EDGES, max_graphs=max_graphs, known=known)
        known.update(shape for _, shape in work)
        return InferencePlan(graphs, method, work, edge_order, reach, schema_means(graphs))
    shape, bins, oversized = plan_bins(graphs.n_node, graphs.n_edge, max_edges=max_edges or BIN_EDGES,
                                       max_graphs=max_graphs)
    work = [(np.asarray(b, np.int64), shape) for b in bins]
    work += [(np.asarray([i], np.int64), own_shape(int(graphs.n_node[i]), int(graphs.n_edge[i]))) for i in oversized]
    return InferencePlan(graphs, method, work, edge_order)


def predict_top(params: Any, spec: ModelSpec, graphs: GraphSet, relation_emb: np.ndarray, width: int, *,
                max_edges: int | None = None, max_graphs: int = BIN_GRAPHS, edge_order: str = "receiver",
                method: str = "reach") -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Top-``width`` (entity ids int32 [Q, width], probabilities float32 [Q, width]) of every graph
    of ``graphs``, -1 / 0 padded, and statistics (batches, shapes, real and padded node/edge counts).

    The probabilities are those of :func:`predict` on the same graphs up to float32 rounding.
    ``method="reach"`` (default) runs :func:`~stem_jax.gnn.model.reach_logits` on reach-ordered
    bins of about ``max_edges`` edges (default :data:`~stem_jax.gnn.packing.REACH_EDGES`) in few
    shapes (:func:`~stem_jax.gnn.packing.plan_reach_work`); ``method="full"`` runs the plain
    :class:`~stem_jax.gnn.model.TripleGNN` forward on bins of ``max_edges`` (default
    :data:`~stem_jax.gnn.packing.BIN_EDGES`) edges sorted by ``edge_order``.
    :func:`plan_inference` then :func:`run_inference`.
    """
    plan = plan_inference(spec, graphs, max_edges=max_edges, max_graphs=max_graphs, edge_order=edge_order,
                          method=method)
    return run_inference(params, spec, plan, relation_emb, width)


def run_inference(params: Any, spec: ModelSpec, plan: InferencePlan, relation_emb: np.ndarray, width: int,
                  ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """:func:`predict_top`'s device part: the bins of ``plan`` through :func:`dispatch`, so host
    assembly and top-K of one bin overlap the device compute of the next."""
    graphs = plan.graphs
    count = len(graphs)
    ids = np.full((count, width), -1, np.int32)
    probs = np.zeros((count, width), np.float32)
    stats: dict[str, Any] = {"batches": 0, "shapes": set(), "real_nodes": int(graphs.n_node.sum()),
                             "real_edges": int(graphs.n_edge.sum()), "padded_nodes": 0, "padded_edges": 0}
    if plan.method == "reach":
        forward = reach_forward_fn(spec.layers)

        def build(members: np.ndarray, shape: Any) -> tuple[Any, np.ndarray | None]:
            return assemble_reach(graphs, plan.reach, plan.schema_mean, members, shape, spec.num_relations)
    else:
        forward = forward_fn(spec, plan.edge_order)

        def build(members: np.ndarray, shape: Any) -> tuple[Any, np.ndarray | None]:
            return assemble(graphs, members, shape, plan.edge_order), None

    def batches() -> Iterator[tuple[tuple[np.ndarray, np.ndarray | None], Any]]:
        for members, shape in plan.work:
            batch, rows = build(members, shape)
            stats["batches"] += 1
            stats["shapes"].add(tuple(int(x) for x in shape.as_array()) if plan.method == "reach"
                                else (shape.nodes, shape.edges, shape.graphs))
            stats["padded_nodes"] += shape.nodes
            stats["padded_edges"] += shape.edges
            yield (members, rows), batch

    for (members, rows), batch_probs in dispatch(forward, params, relation_emb, batches()):
        _keep_top(graphs, members, rows, batch_probs, width, ids, probs)
    stats["shapes"] = sorted(stats["shapes"])
    return ids, probs, stats


def _keep_top(graphs: GraphSet, members: np.ndarray, rows: np.ndarray | None, batch_probs: np.ndarray,
              width: int, ids: np.ndarray, probs: np.ndarray) -> None:
    """Write one bin's graphs' top-``width`` rows of ``ids`` / ``probs`` from its probabilities
    (``rows``: the batch row of each member node; None when they are the first rows in order)."""
    node_rows = csr_ranges(graphs.node_ptr, members)
    batch_probs = batch_probs[rows] if rows is not None else batch_probs[: len(node_rows)]
    graph = np.repeat(np.arange(len(members)), graphs.n_node[members])
    entities = graphs.entities[node_rows]
    g, rank, pos = top_of_batch(batch_probs, graph, entities, len(members), width)
    ids[members[g], rank] = entities[pos]
    probs[members[g], rank] = batch_probs[pos]

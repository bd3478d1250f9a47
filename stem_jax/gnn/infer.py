"""Batched, jitted Triple-GNN inference and checkpoint loading.

Examples are packed by size (:func:`stem_jax.gnn.batching.pack_by_size`), padded to power-of-two
buckets and run through one compiled forward per bucket; each batch costs one host->device and
one device->host transfer (all node probabilities of the batch), and per-graph top-K happens on
the host (:func:`stem_jax.gnn.guidance.select_top`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from stem_jax.errors import StemError
from stem_jax.gnn.batching import GraphExample, node_offsets, pack_by_size, pad_batch
from stem_jax.gnn.model import ModelSpec, build_model, reach_logits
from stem_jax.gnn.multihop import GraphSet
from stem_jax.gnn.packing import (
    BIN_EDGES,
    BIN_GRAPHS,
    REACH_EDGES,
    assemble,
    assemble_reach,
    csr_ranges,
    own_reach_shape,
    own_shape,
    plan_bins,
    plan_reach_bins,
    reach_index,
    schema_means,
)
from stem_jax.kg.subgraph import csr_gather

MAX_BATCH_EDGES = 1 << 17  # edges per inference batch (a larger graph gets a batch of its own)
MAX_BATCH_GRAPHS = 64
MODEL_FILE = "model.json"
CHECKPOINTS = "checkpoints"


@functools.cache
def forward_fn(spec: ModelSpec, edge_order: str = "receiver"):
    """The jitted ``(params, graph, relation_emb) -> probabilities [N]`` of one architecture
    (``edge_order``: how the batch's edges are sorted, see :class:`~stem_jax.gnn.model.TripleGNN`)."""
    model = build_model(spec, edge_order)

    @jax.jit
    def forward(params, graph, relation_emb):
        return jax.nn.sigmoid(model.apply(params, graph, relation_emb))

    return forward


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
    forward = forward_fn(spec)
    rel = jax.device_put(np.asarray(relation_emb, np.float32))
    for members in pack_by_size(examples, max_edges, max_graphs):
        chosen = [examples[i] for i in members]
        graph = pad_batch(chosen)
        probs = np.asarray(jax.device_get(forward(params, graph, rel)))
        offsets = node_offsets(chosen)
        yield members, [probs[offsets[j] : offsets[j + 1]] for j in range(len(chosen))]


def top_of_batch(probs: np.ndarray, graph: np.ndarray, entities: np.ndarray, count: int, width: int,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per graph of a batch, its ``width`` best nodes (:func:`~stem_jax.gnn.guidance.select_top`'s
    order: probability descending, then lower entity id), for all graphs at once.

    Args: probs, graph, entities: float32 / int [n] of the batch's real nodes (graphs contiguous
    and ascending); count: graphs in the batch. Returns (graph, rank, position) of the kept nodes.
    """
    order = np.lexsort((entities, -probs, graph))
    sorted_graph = graph[order]
    starts = np.searchsorted(sorted_graph, np.arange(count))
    rank = np.arange(len(order)) - starts[sorted_graph]
    keep = rank < width
    return sorted_graph[keep], rank[keep], order[keep]


@functools.cache
def reach_forward_fn(layers: int):
    """The jitted ``(params, reach batch, relation_emb) -> probabilities [N]``
    (:func:`~stem_jax.gnn.model.reach_logits`)."""

    @jax.jit
    def forward(params, batch, relation_emb):
        return jax.nn.sigmoid(reach_logits(params, layers, batch, relation_emb))

    return forward


def predict_top(params: Any, spec: ModelSpec, graphs: GraphSet, relation_emb: np.ndarray, width: int, *,
                max_edges: int | None = None, max_graphs: int = BIN_GRAPHS, edge_order: str = "receiver",
                method: str = "full") -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Top-``width`` (entity ids int32 [Q, width], probabilities float32 [Q, width]) of every graph
    of ``graphs``, -1 / 0 padded, and statistics (batches, shapes, real and padded node/edge counts).

    The probabilities are those of :func:`predict` on the same graphs up to float32 rounding.
    ``method="reach"`` runs :func:`~stem_jax.gnn.model.reach_logits` on reach-ordered
    bins of about ``max_edges`` edges (default :data:`~stem_jax.gnn.packing.REACH_EDGES`);
    ``method="full"`` (default) runs the plain :class:`~stem_jax.gnn.model.TripleGNN` forward on bins of
    ``max_edges`` (default :data:`~stem_jax.gnn.packing.BIN_EDGES`) edges sorted by ``edge_order``.
    "full" is the default because one pass over the full MetaQA test split (what an eval does) measured
    143 q/s for it against 107 for "reach", whose many bin shapes compile during that pass; "reach" is
    faster once compiled (174 vs 111 q/s on a repeated 2,100-question pass,
    experiments/results/gnn-inference-reach-trained.md).
    """
    if method == "full":
        return _predict_top_full(params, spec, graphs, relation_emb, width, max_edges=max_edges or BIN_EDGES,
                                 max_graphs=max_graphs, edge_order=edge_order)
    if method != "reach":
        raise ValueError(f"unknown inference method {method!r} (reach or full)")
    forward = reach_forward_fn(spec.layers)
    rel = jax.device_put(np.asarray(relation_emb, np.float32))
    count = len(graphs)
    ids = np.full((count, width), -1, np.int32)
    probs = np.zeros((count, width), np.float32)
    stats: dict[str, Any] = {"batches": 0, "shapes": set(), "real_nodes": int(graphs.n_node.sum()),
                             "real_edges": int(graphs.n_edge.sum()), "padded_nodes": 0, "padded_edges": 0}
    if count == 0:
        return ids, probs, stats
    reach = reach_index(graphs)
    means = schema_means(graphs)
    shape, bins, oversized = plan_reach_bins(reach.demand, max_edges=max_edges or REACH_EDGES, max_graphs=max_graphs)
    work = [(members, shape) for members in bins] + [([i], own_reach_shape(reach.demand[i])) for i in oversized]
    pending = None
    for members, bin_shape_ in work + [(None, None)]:
        # dispatch the next batch before reading the previous one back: host assembly and top-K
        # of one batch overlap the device compute of the other
        launched = None
        if members is not None:
            batch, rows = assemble_reach(graphs, reach, means, members, bin_shape_, spec.num_relations)
            launched = (members, rows, forward(params, batch, rel))
            stats["batches"] += 1
            stats["shapes"].add(tuple(int(x) for x in bin_shape_.as_array()))
            stats["padded_nodes"] += bin_shape_.nodes
            stats["padded_edges"] += bin_shape_.edges
        if pending is not None:
            done, rows, out = pending
            done = np.asarray(done, np.int64)
            batch_probs = np.asarray(jax.device_get(out))[rows]
            graph = np.repeat(np.arange(len(done)), graphs.n_node[done])
            entities = graphs.entities[csr_ranges(graphs.node_ptr, done)]
            g, rank, pos = top_of_batch(batch_probs, graph, entities, len(done), width)
            ids[done[g], rank] = entities[pos]
            probs[done[g], rank] = batch_probs[pos]
        pending = launched
    stats["shapes"] = sorted(stats["shapes"])
    return ids, probs, stats


def _predict_top_full(params: Any, spec: ModelSpec, graphs: GraphSet, relation_emb: np.ndarray, width: int, *,
                max_edges: int = BIN_EDGES, max_graphs: int = BIN_GRAPHS, edge_order: str = "receiver",
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Top-``width`` (entity ids int32 [Q, width], probabilities float32 [Q, width]) of every graph
    of ``graphs``, -1 / 0 padded, computed in fixed-shape bins (:mod:`stem_jax.gnn.packing`).

    The probabilities are those of :func:`predict` on the same graphs (the same model on the same
    edges in the same order; only the batch composition differs). Also returns statistics:
    batches, shapes, real and padded node/edge counts.
    """
    forward = forward_fn(spec, edge_order)
    rel = jax.device_put(np.asarray(relation_emb, np.float32))
    count = len(graphs)
    ids = np.full((count, width), -1, np.int32)
    probs = np.zeros((count, width), np.float32)
    n_node, n_edge = graphs.n_node, graphs.n_edge
    stats: dict[str, Any] = {"batches": 0, "shapes": set(), "real_nodes": int(n_node.sum()),
                             "real_edges": int(n_edge.sum()), "padded_nodes": 0, "padded_edges": 0}
    if count == 0:
        return ids, probs, stats
    shape, bins, oversized = plan_bins(n_node, n_edge, max_edges=max_edges, max_graphs=max_graphs)
    work = [(members, shape) for members in bins] + [([i], own_shape(int(n_node[i]), int(n_edge[i])))
                                                      for i in oversized]
    pending = None
    for members, bin_shape_ in work + [(None, None)]:
        # dispatch the next batch before reading the previous one back: host assembly and top-K
        # of one batch overlap the device compute of the other
        launched = None
        if members is not None:
            batch = assemble(graphs, members, bin_shape_, edge_order)
            launched = (members, forward(params, batch, rel))
            stats["batches"] += 1
            stats["shapes"].add((bin_shape_.nodes, bin_shape_.edges, bin_shape_.graphs))
            stats["padded_nodes"] += bin_shape_.nodes
            stats["padded_edges"] += bin_shape_.edges
        if pending is not None:
            done, out = pending
            done = np.asarray(done, np.int64)
            sizes = n_node[done]
            real = int(sizes.sum())
            batch_probs = np.asarray(jax.device_get(out))[:real]
            graph = np.repeat(np.arange(len(done)), sizes)
            node_rows = csr_gather(graphs.node_ptr, np.arange(len(graphs.entities), dtype=np.int64), done)
            g, rank, pos = top_of_batch(batch_probs, graph, graphs.entities[node_rows], len(done), width)
            ids[done[g], rank] = graphs.entities[node_rows][pos]
            probs[done[g], rank] = batch_probs[pos]
        pending = launched
    stats["shapes"] = sorted(stats["shapes"])
    return ids, probs, stats


def params_fingerprint(params: Any) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes (first 16 hex digits)."""
    import hashlib

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        array = np.asarray(leaf)
        digest.update(f"{jax.tree_util.keystr(path)}:{array.dtype}:{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def read_model_file(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise StemError(f"{run_dir}: not a Triple-GNN run folder (no {MODEL_FILE})\n"
                        "  how to fix: pass the --out folder of `stem-jax train-gnn`")
    return json.loads(path.read_text())


def load_checkpoint(path: Path, step: int | None = None) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """(spec, params, model-file contents) from a ``train-gnn`` run folder, latest step by default."""
    from stem_jax.gnn.checkpoint import CheckpointStore

    run_dir = Path(path)
    if run_dir.name == CHECKPOINTS:
        run_dir = run_dir.parent
    info = read_model_file(run_dir)
    spec = ModelSpec(**info["spec"])
    store = CheckpointStore(run_dir / CHECKPOINTS)
    chosen = store.latest_step() if step is None else step
    if chosen is None:
        raise StemError(f"{run_dir}: no checkpoint saved yet\n  how to fix: run `stem-jax train-gnn --out {run_dir}`")
    params = store.restore_params(chosen, spec)
    store.close()
    info = {**info, "step": chosen, "params_sha": params_fingerprint(params)}
    return spec, params, info

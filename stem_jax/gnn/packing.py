"""Pack many query graphs into a few fixed-shape batches (bins) for inference.

Power-of-two padding per batch (:func:`stem_jax.gnn.batching.pad_batch`) wastes up to half of
every batch and compiles one shape per size. Here every batch of a call has one shape, (nodes,
edges, graphs) = :class:`BinShape`, and graphs are placed first-fit-decreasing by edge count, so
bins are nearly full and there is one compiled forward per shape (a shape is reused across calls:
it depends only on the totals, rounded to a ladder of four sizes per octave). A graph larger than the bin gets a
power-of-two bin of its own. The batch arrays follow ``pad_batch``'s conventions (padding graph
after the real ones, padding edges on padding nodes, receivers ascending, ``nodes["graph"]``,
``nodes["valid"]`` and ``globals["valid"]``), so the same :class:`~stem_jax.gnn.model.TripleGNN`
runs on them unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from stem_jax.gnn.batching import MIN_NODES, next_pow2
from stem_jax.gnn.multihop import GraphSet
from stem_jax.jraph_compat import jraph
from stem_jax.kg.subgraph import csr_gather

BIN_EDGES = 1 << 18  # edges per full inference bin
BIN_GRAPHS = 512  # graphs per bin (1-hop MetaQA graphs have ~8 nodes)


@dataclasses.dataclass(frozen=True)
class BinShape:
    nodes: int
    edges: int
    graphs: int


def ladder(x: int, minimum: int = MIN_NODES) -> int:
    """The smallest of {4, 5, 6, 7} x 2^k (and >= ``minimum``) that holds ``x``: at most 25% padding
    with four shapes per octave."""
    x = max(int(x), minimum)
    top = 1 << (x - 1).bit_length()  # next power of two
    for size in (top // 8 * 5, top // 8 * 6, top // 8 * 7):
        if size >= x and size >= minimum and top >= 8:
            return size
    return top


def bin_shape(n_node: np.ndarray, n_edge: np.ndarray, *, max_edges: int = BIN_EDGES,
              max_graphs: int = BIN_GRAPHS) -> BinShape:
    """One batch shape for a set of graphs, sized to the work: the fewest bins that the edge and
    graph limits allow, each holding an equal share of the edges, nodes (+5% slack for the
    packing) and graphs, rounded up on :func:`ladder` (graphs: a power of two)."""
    total_nodes, total_edges, count = int(n_node.sum()), int(n_edge.sum()), len(n_node)
    bins = max(1, -(-total_edges // max_edges), -(-count // (max_graphs - 1)))
    if bins == 1:
        return BinShape(nodes=ladder(total_nodes + 1), edges=ladder(max(total_edges, 1)),
                        graphs=next_pow2(count + 1, 2))
    return BinShape(nodes=ladder(int(1.05 * total_nodes / bins) + 1),
                    edges=min(max_edges, ladder(int(1.05 * total_edges / bins) + 1)),
                    graphs=min(max_graphs, next_pow2(-(-count // bins) + 1, 2)))


def pack_bins(n_node: np.ndarray, n_edge: np.ndarray, shape: BinShape) -> tuple[list[list[int]], list[int]]:
    """(bins of graph indices that fit ``shape``, graphs too large for it).

    First-fit decreasing on edges with node and graph limits; a bin keeps one node and one graph
    for jraph's padding graph.
    """
    order = np.lexsort((np.arange(len(n_edge)), -n_node, -n_edge))
    node_room, edge_room, graph_room = shape.nodes - 1, shape.edges, shape.graphs - 1
    bins: list[list[int]] = []
    free_nodes = np.zeros(0, np.int64)
    free_edges = np.zeros(0, np.int64)
    free_graphs = np.zeros(0, np.int64)
    oversized: list[int] = []
    for i in order.tolist():
        nn, ne = int(n_node[i]), int(n_edge[i])
        if nn > node_room or ne > edge_room:
            oversized.append(i)
            continue
        fits = np.flatnonzero((free_nodes >= nn) & (free_edges >= ne) & (free_graphs >= 1))
        if fits.size:
            b = int(fits[0])
        else:
            b = len(bins)
            bins.append([])
            free_nodes = np.append(free_nodes, node_room)
            free_edges = np.append(free_edges, edge_room)
            free_graphs = np.append(free_graphs, graph_room)
        bins[b].append(i)
        free_nodes[b] -= nn
        free_edges[b] -= ne
        free_graphs[b] -= 1
    for b in bins:
        b.sort()
    return bins, oversized


def plan_bins(n_node: np.ndarray, n_edge: np.ndarray, *, max_edges: int = BIN_EDGES, max_graphs: int = BIN_GRAPHS,
              ) -> tuple[BinShape, list[list[int]], list[int]]:
    """:func:`bin_shape` and :func:`pack_bins`, then the same with one ladder step more nodes, more
    edges and/or room for all graphs in one bin (bins of large graphs hold few, bins of small ones
    many, so equal shares of the graph count fill badly); keeps the packing with the least padded
    work, bins x (4 nodes + edges + 16 graphs): a node's update MLP costs about four edges'
    messages, a graph slot its schema projection."""
    base = bin_shape(n_node, n_edge, max_edges=max_edges, max_graphs=max_graphs)
    all_graphs = min(max_graphs, next_pow2(len(n_node) + 1, 2))

    def padded(shape: BinShape) -> int:
        return 4 * shape.nodes + shape.edges + 16 * shape.graphs

    best = None
    for nodes in {base.nodes, ladder(base.nodes + 1)}:
        for edges in {base.edges, min(max_edges, ladder(base.edges + 1))}:
            for graphs in {base.graphs, all_graphs}:
                shape = BinShape(nodes=nodes, edges=edges, graphs=graphs)
                bins, oversized = pack_bins(n_node, n_edge, shape)
                cost = len(bins) * padded(shape) + sum(padded(own_shape(int(n_node[i]), int(n_edge[i])))
                                                       for i in oversized)
                key = (cost, nodes, edges, graphs)
                if best is None or key < best[0]:
                    best = (key, shape, bins, oversized)
    return best[1], best[2], best[3]


def own_shape(n_node: int, n_edge: int) -> BinShape:
    """Power-of-two shape of a bin holding one large graph."""
    return BinShape(nodes=next_pow2(n_node + 1, MIN_NODES), edges=next_pow2(max(n_edge, 1), MIN_NODES), graphs=2)


def assemble(graphs: GraphSet, members: Sequence[int], shape: BinShape, edge_order: str = "receiver",
             ) -> jraph.GraphsTuple:
    """The padded batch of ``members`` (graph indices into ``graphs``) with exactly ``shape``;
    edges sorted by receiver, or by sender for ``edge_order="sender"`` (padding edges last)."""
    members = np.asarray(members, np.int64)
    n_node, n_edge = graphs.n_node[members], graphs.n_edge[members]
    real_nodes, real_edges, count = int(n_node.sum()), int(n_edge.sum()), len(members)
    if real_nodes + 1 > shape.nodes or real_edges > shape.edges or count + 1 > shape.graphs:
        raise ValueError(f"{count} graphs ({real_nodes} nodes, {real_edges} edges) do not fit {shape}")
    node_base = np.concatenate([[0], np.cumsum(n_node)[:-1]])
    shift = np.repeat(node_base, n_edge)  # local ids -> batch ids
    edge_rows = csr_gather(graphs.edge_ptr, np.arange(len(graphs.senders), dtype=np.int64), members)
    node_rows = csr_gather(graphs.node_ptr, np.arange(len(graphs.entities), dtype=np.int64), members)

    senders = np.full(shape.edges, real_nodes, np.int32)  # padding edges sit on the first padding node
    receivers = np.full(shape.edges, real_nodes, np.int32)
    relations = np.zeros(shape.edges, np.int32)
    senders[:real_edges] = graphs.senders[edge_rows] + shift
    receivers[:real_edges] = graphs.receivers[edge_rows] + shift
    relations[:real_edges] = graphs.relations[edge_rows]
    if edge_order == "sender":  # a stable sort keeps each receiver's edges in their original order
        order = np.argsort(senders[:real_edges], kind="stable")
        senders[:real_edges] = senders[order]
        receivers[:real_edges] = receivers[order]
        relations[:real_edges] = relations[order]
    question = np.zeros(shape.nodes, np.float32)
    question[:real_nodes] = graphs.question[node_rows]

    graph_nodes = np.zeros(shape.graphs, np.int32)
    graph_edges = np.zeros(shape.graphs, np.int32)
    graph_nodes[:count], graph_edges[:count] = n_node, n_edge
    graph_nodes[count], graph_edges[count] = shape.nodes - real_nodes, shape.edges - real_edges
    t, width = graphs.schema.shape[1:]
    schema = np.zeros((shape.graphs, t, width), np.float32)
    mask = np.zeros((shape.graphs, t), bool)
    schema[:count], mask[:count] = graphs.schema[members], graphs.schema_mask[members]
    return jraph.GraphsTuple(
        nodes={"question": question, "label": np.zeros(shape.nodes, np.float32),
               "graph": np.repeat(np.arange(shape.graphs, dtype=np.int32), graph_nodes),
               "valid": np.arange(shape.nodes) < real_nodes},
        edges={"relation": relations}, senders=senders, receivers=receivers,
        globals={"schema": schema, "schema_mask": mask, "valid": np.arange(shape.graphs) < count},
        n_node=graph_nodes, n_edge=graph_edges,
    )

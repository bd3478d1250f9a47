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
from collections.abc import Collection, Sequence

import numpy as np

from stem_jax.gnn.batching import MIN_NODES, next_pow2
from stem_jax.gnn.multihop import GraphSet, global_edges, node_distances
from stem_jax.jraph_compat import jraph
from stem_jax.kg.subgraph import csr_ranges

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
    edge_rows = csr_ranges(graphs.edge_ptr, members)
    node_rows = csr_ranges(graphs.node_ptr, members)

    senders = np.full(shape.edges, real_nodes, np.int32)  # padding edges sit on the first padding node
    receivers = np.full(shape.edges, real_nodes, np.int32)
    relations = np.zeros(shape.edges, np.int32)
    senders[:real_edges] = graphs.senders[edge_rows] + shift
    receivers[:real_edges] = graphs.receivers[edge_rows] + shift
    relations[:real_edges] = graphs.relations[edge_rows]
    key = senders if edge_order == "sender" else receivers
    if edge_order == "sender" or np.any(np.diff(receivers[:real_edges]) < 0):
        # the plain forward's sorted segment sums need receivers ascending (graphs of
        # graph_set_unordered are not); a stable sort keeps each receiver's edges in their order
        order = np.argsort(key[:real_edges], kind="stable")
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


# --- reach-ordered bins (stem_jax.gnn.model.reach_logits) -------------------------------------

# edges per reach bin: small bins keep node states in cache, where a per-edge gather + scatter costs
# a tenth of what it costs on a 1M-edge bin (docs/performance.md, "Figures behind the code's constants")
REACH_EDGES = 1 << 15
REACH_DIMS = ("block0", "block1", "block2", "edges", "edges1", "edges2", "graphs")


@dataclasses.dataclass(frozen=True)
class ReachShape:
    """Static sizes of one reach bin: node blocks D <= 1 / D = 2 / D >= 3, all edges, edges
    from question entities, edges into D <= 2 from D <= 1, and graph slots."""

    block0: int
    block1: int
    block2: int
    edges: int
    edges1: int
    edges2: int
    graphs: int

    def as_array(self) -> np.ndarray:
        return np.asarray([getattr(self, k) for k in REACH_DIMS], np.int64)

    @property
    def nodes(self) -> int:
        return self.block0 + self.block1 + self.block2


@dataclasses.dataclass(frozen=True)
class ReachIndex:
    """Per-node and per-edge reach data of a whole :class:`GraphSet` (computed once per call)."""

    block: np.ndarray  # int8 per node: 0 (D <= 1), 1 (D = 2), 2 (D >= 3)
    edge_class: np.ndarray  # int8 per edge: bit 0 sender D = 0, bit 1 receiver D <= 2 and sender D <= 1, bit 2 sender D >= 2
    demand: np.ndarray  # int64 [Q, 7] per graph, in REACH_DIMS order


def reach_index(graphs: GraphSet) -> ReachIndex:
    """Distances (:func:`~stem_jax.gnn.multihop.node_distances`, capped at 3), node blocks, edge
    classes and per-graph demands of every graph of ``graphs``."""
    count = len(graphs)
    senders, receivers = global_edges(graphs)
    dist = node_distances(graphs, 3, senders, receivers)
    block = np.clip(dist - 1, 0, 2).astype(np.int8)
    # int8 arithmetic throughout: a MetaQA 3-hop chunk has ~16M edges, and int64 temporaries cost
    # more than the rest of the call
    ds = dist[senders]
    dr = dist[receivers]
    edge_class = (ds == 0).view(np.int8) | (((dr <= 2) & (ds <= 1)).view(np.int8) << 1) | ((ds >= 2).view(np.int8) << 2)
    node_owner = np.repeat(np.arange(count), graphs.n_node)
    edge_ptr = graphs.edge_ptr
    demand = np.zeros((count, len(REACH_DIMS)), np.int64)
    demand[:, :3] = np.bincount(node_owner * 3 + block, minlength=3 * count).reshape(count, 3)
    demand[:, 3] = graphs.n_edge
    for column, bit in ((4, 1), (5, 2)):
        # per-graph counts of the class as differences of one cumulative sum (edges are grouped by graph)
        running = np.concatenate([[0], np.cumsum((edge_class & bit) != 0, dtype=np.int64)])
        demand[:, column] = running[edge_ptr[1:]] - running[edge_ptr[:-1]]
    demand[:, 6] = 1
    return ReachIndex(block=block, edge_class=edge_class, demand=demand)


def _reach_shape(caps: np.ndarray) -> ReachShape:
    """Round per-dimension capacities up: on the ladder for the dimensions that carry the work
    (nodes beyond D <= 1, edges, edges into D <= 2), to a power of two for the cheap ones (D <= 1
    rows, edges from question entities, graph slots), so that fewer distinct shapes compile."""
    caps = [int(c) for c in caps]
    return ReachShape(block0=next_pow2(caps[0], 8), block1=ladder(caps[1], 8), block2=ladder(caps[2], 8),
                      edges=ladder(caps[3], 8), edges1=next_pow2(caps[4], 8), edges2=ladder(caps[5], 8),
                      graphs=next_pow2(caps[6], 2))


def reach_cost(shape: ReachShape) -> int:
    """Padded work of one reach bin in node-update units: every row is updated at layers >= 3, D <= 2
    rows at layer 2 too; an edge's message costs about a quarter of a row update."""
    return 4 * (shape.nodes + shape.block0 + shape.block1) + shape.edges + shape.edges2 + shape.edges1 + 16 * shape.graphs


def fresh_reach_shape(demand: np.ndarray, *, max_edges: int = REACH_EDGES, max_graphs: int = BIN_GRAPHS) -> ReachShape:
    """The bin shape sized to ``demand`` [Q, 7]: as many bins as ``max_edges`` and ``max_graphs`` ask
    for, each dimension an equal share of the totals plus 10% slack (rounded by :func:`_reach_shape`)."""
    totals = demand.sum(axis=0)
    return _reach_shape(np.ceil(1.1 * totals / bins_wanted(demand, max_edges, max_graphs)) + 1)


def bins_wanted(demand: np.ndarray, max_edges: int, max_graphs: int) -> int:
    """How many bins :func:`fresh_reach_shape` sizes ``demand`` [Q, 7] for."""
    return max(1, -(-int(demand[:, 3].sum()) // max_edges), -(-len(demand) // max_graphs))


def pack_reach(demand: np.ndarray, shape: ReachShape) -> tuple[list[list[int]], list[int]]:
    """(bins of graph indices that fit ``shape``, graphs too large for it): first-fit decreasing by
    edge count under all seven limits at once."""
    count = len(demand)
    cap = shape.as_array()
    order = np.lexsort((np.arange(count), -demand[:, 0] - demand[:, 1] - demand[:, 2], -demand[:, 3]))
    bins: list[list[int]] = []
    free = np.zeros((0, len(REACH_DIMS)), np.int64)
    oversized: list[int] = []
    for i in order.tolist():
        need = demand[i]
        if np.any(need > cap):
            oversized.append(i)
            continue
        fits = np.flatnonzero((free >= need).all(axis=1))
        if fits.size:
            b = int(fits[0])
        else:
            b = len(bins)
            bins.append([])
            free = np.vstack([free, cap])
        bins[b].append(i)
        free[b] -= need
    for b in bins:
        b.sort()
    return bins, oversized


REACH_TIERS = 4
# A compile is worth this many full bins of padded work (one reach compile against the time of a full
# bin with its host work: docs/performance.md, "Figures behind the code's constants")
COMPILE_BINS = 8


def plan_reach_work(demand: np.ndarray, *, max_edges: int = REACH_EDGES, max_graphs: int = BIN_GRAPHS,
                    known: Collection[ReachShape] = (), slack: float = 1.25) -> list[tuple[np.ndarray, ReachShape]]:
    """(graph indices, shape) of every bin for all graphs of ``demand``, in few distinct shapes.

    Graphs that do not fit a tier's shape go to the next tier, whose bins are sized for four times the
    edges; the last tier's shape holds its largest graph, so every graph is placed. In every tier a shape
    of ``known`` (already compiled) replaces the fresh one when it is at least as large in every
    dimension and either costs (:func:`reach_cost`) at most ``slack`` times as much or its extra
    padding over the tier's bins stays under :data:`COMPILE_BINS` full bins of work: a compile costs
    more than a little padding. A tier that fits one bin (a small call: ``ask``, a batch of a few
    questions) compiles, when it must, a shape with twice the room that also covers every known
    shape within that allowance, so that later small calls find a known shape instead of compiling.
    """
    work: list[tuple[np.ndarray, ReachShape]] = []
    rows = np.arange(len(demand))
    for tier in range(REACH_TIERS):
        if len(rows) == 0:
            break
        sub = demand[rows]
        tier_edges = max_edges << (2 * tier)
        shape = fresh_reach_shape(sub, max_edges=tier_edges, max_graphs=max_graphs)
        if tier == REACH_TIERS - 1:
            shape = _reach_shape(np.maximum(shape.as_array(), sub.max(axis=0)))
        fresh, cost, count = shape.as_array(), reach_cost(shape), bins_wanted(sub, tier_edges, max_graphs)
        allowance = COMPILE_BINS * 4 * tier_edges  # a compile, in reach_cost units
        reusable = [k for k in known if np.all(k.as_array() >= fresh)
                    and (reach_cost(k) <= slack * cost or count * (reach_cost(k) - cost) <= allowance)]
        if reusable:
            shape = min(reusable, key=lambda k: (reach_cost(k), tuple(k.as_array())))
        elif count == 1:
            # twice the room, and at least every known shape a small call could take, so the shapes
            # small calls compile form a chain: a later call compiles only when it beats every earlier one
            small = [k.as_array() for k in known if reach_cost(k) <= allowance]
            shape = _reach_shape(np.max(np.stack([2 * fresh, *small]), axis=0))
        bins, oversized = pack_reach(sub, shape)
        work += [(rows[np.asarray(b, np.int64)], shape) for b in bins]
        rows = rows[np.asarray(oversized, np.int64)]
    return work


def own_reach_shape(need: np.ndarray) -> ReachShape:
    return _reach_shape(np.maximum(need, 1))


def assemble_reach(graphs: GraphSet, reach: ReachIndex, schema_mean: np.ndarray, members: Sequence[int],
                   shape: ReachShape, num_relations: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The batch of ``members`` for :func:`stem_jax.gnn.model.reach_logits`, and the batch row of
    each member node (in GraphSet order, so ``probs[rows]`` lines up with the member nodes).

    ``schema_mean``: float32 [Q, 3 d_pem], each graph's mean schema-triple features.
    """
    members = np.asarray(members, np.int64)
    n_node, n_edge = graphs.n_node[members], graphs.n_edge[members]
    if np.any(reach.demand[members].sum(axis=0) > shape.as_array()):
        raise ValueError(f"{len(members)} graphs do not fit {shape}")
    node_rows = csr_ranges(graphs.node_ptr, members)
    edge_rows = csr_ranges(graphs.edge_ptr, members)
    block = reach.block[node_rows].astype(np.int64)
    # batch row of each node: its block's start + its rank inside the block (stable)
    starts = np.asarray([0, shape.block0, shape.block0 + shape.block1], np.int64)
    order = np.argsort(block, kind="stable")
    sorted_block = block[order]
    first = np.searchsorted(sorted_block, np.arange(3))
    rows = np.empty(len(block), np.int64)
    rows[order] = starts[sorted_block] + np.arange(len(block)) - first[sorted_block]

    node_base = np.concatenate([[0], np.cumsum(n_node)[:-1]])
    shift = np.repeat(node_base, n_edge)
    senders = rows[graphs.senders[edge_rows] + shift].astype(np.int32)
    receivers = rows[graphs.receivers[edge_rows] + shift].astype(np.int32)
    relations = graphs.relations[edge_rows]
    edge_class = reach.edge_class[edge_rows]
    nodes = shape.nodes
    two_r = 2 * num_relations

    def edge_list(keep: np.ndarray | None, size: int, dropped: int) -> tuple[np.ndarray, ...]:
        s = np.zeros(size, np.int32)
        r = np.full(size, dropped, np.int32)  # padding edges point past the segments: dropped
        t = np.zeros(size, np.int32)
        pick = slice(None) if keep is None else np.flatnonzero(keep)
        k = len(senders) if keep is None else len(pick)
        s[:k], r[:k], t[:k] = senders[pick], receivers[pick], relations[pick]
        return s, r, t

    batch: dict[str, np.ndarray] = {}
    batch["s"], batch["r"], batch["t"] = edge_list(None, shape.edges, nodes)
    batch["s1"], batch["r1"], batch["t1"] = edge_list(edge_class & 1, shape.edges1, shape.block0)
    batch["s2"], batch["r2"], batch["t2"] = edge_list(edge_class & 2, shape.edges2, shape.block0 + shape.block1)
    far = np.flatnonzero(edge_class & 4)
    batch["cnt"] = np.bincount(receivers[far].astype(np.int64) * two_r + relations[far],
                               minlength=nodes * two_r).reshape(nodes, two_r).astype(np.float32)
    batch["inv_deg"] = (1.0 / np.maximum(np.bincount(receivers, minlength=nodes), 1)).astype(np.float32)
    near1 = rows < shape.block0
    qgraph = np.zeros(shape.block0, np.int32)
    qflag = np.zeros(shape.block0, np.float32)
    qgraph[rows[near1]] = np.repeat(np.arange(len(members), dtype=np.int32), n_node)[near1]
    qflag[rows[near1]] = graphs.question[node_rows][near1]
    batch["qgraph"], batch["qflag"] = qgraph, qflag
    batch["near2"] = np.zeros(shape.block0 + shape.block1, np.int8)
    sm = np.zeros((shape.graphs, schema_mean.shape[1]), np.float32)
    sm[: len(members)] = schema_mean[members]
    batch["schema_mean"] = sm
    return batch, rows


def schema_means(graphs: GraphSet) -> np.ndarray:
    """float32 [Q, 3 d_pem]: the mean of each graph's schema-triple features (masked rows only)."""
    mask = graphs.schema_mask.astype(np.float32)
    total = np.einsum("qt,qtw->qw", mask, graphs.schema)
    return (total / np.maximum(mask.sum(axis=1), 1.0)[:, None]).astype(np.float32)

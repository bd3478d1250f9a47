"""Many questions' k-hop subgraphs at once, as flat arrays: the host side of fast GNN inference.

:func:`khop_many` runs the breadth-first expansion of :func:`stem_jax.kg.subgraph.khop_subgraph`
for every query together: a (query, node) pair is one int64 key ``query * n + node``, so a hop is
one CSR gather, one sort-based unique and one binary-search membership test over all queries, with no Python loop
over questions. :func:`graph_set` turns the result into the Triple-GNN's edge lists (both
directions, receivers ascending, the same edge order as :func:`stem_jax.gnn.batching.build_example`)
held CSR-style: query ``i`` owns ``nodes[node_ptr[i]:node_ptr[i + 1]]`` and
``senders[edge_ptr[i]:edge_ptr[i + 1]]``. Queries with the same seeds and radius share one
expansion (their subgraphs are equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import csr_gather, sorted_unique


@dataclasses.dataclass(frozen=True)
class ManySubgraphs:
    """Per query: sorted node ids ``nodes[node_ptr[i]:node_ptr[i+1]]`` and sorted triple ids
    ``triples[triple_ptr[i]:triple_ptr[i+1]]`` (what ``khop_subgraph`` returns for each)."""

    node_ptr: np.ndarray
    nodes: np.ndarray
    triple_ptr: np.ndarray
    triples: np.ndarray


def in_sorted(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """bool mask: which ``values`` occur in ``sorted_keys`` (ascending), by binary search."""
    if sorted_keys.size == 0:
        return np.zeros(values.shape, bool)
    pos = np.minimum(np.searchsorted(sorted_keys, values), sorted_keys.size - 1)
    return sorted_keys[pos] == values


def _ptr(owner: np.ndarray, count: int) -> np.ndarray:
    ptr = np.zeros(count + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=count), out=ptr[1:])
    return ptr


def khop_many(index: KGIndex, seeds: Sequence[Sequence[int]], hops: Sequence[int], hub_cap: int) -> ManySubgraphs:
    """:func:`~stem_jax.kg.subgraph.khop_subgraph` of every ``(seeds[i], hops[i])``, vectorised.

    Nodes with more than ``hub_cap`` incident triples are reached but not expanded through,
    except seeds (step 0 expands every seed), exactly as the single-query version does.
    """
    count = len(seeds)
    n, m = np.int64(index.num_entities), np.int64(index.num_triples)
    hops = np.asarray(hops, np.int64)
    owner = np.repeat(np.arange(count, dtype=np.int64), [len(s) for s in seeds])
    flat = np.concatenate([np.asarray(s, np.int64) for s in seeds]) if count else np.zeros(0, np.int64)
    visited = sorted_unique(owner * n + flat)  # sorted (query, node) keys
    frontier = visited
    degree = index.degree
    triple_keys = []
    for step in range(int(hops.max()) if count else 0):
        fq, fv = frontier // n, frontier % n
        keep = hops[fq] > step
        if step > 0:
            keep &= degree[fv] <= hub_cap
        fq, fv = fq[keep], fv[keep]
        if fq.size == 0:
            break
        lengths = index.csr_offsets[fv + 1] - index.csr_offsets[fv]
        tids = csr_gather(index.csr_offsets, index.csr_triples, fv).astype(np.int64)
        keys = sorted_unique(np.repeat(fq, lengths) * m + tids)
        triple_keys.append(keys)
        tq, tt = keys // m, keys % m
        ends = index.triples[tt][:, [0, 2]].astype(np.int64)
        candidates = sorted_unique((tq[:, None] * n + ends).ravel())
        new = candidates[~in_sorted(candidates, visited)]
        visited = np.sort(np.concatenate([visited, new]))
        frontier = new
    triples = sorted_unique(np.concatenate(triple_keys)) if triple_keys else np.zeros(0, np.int64)
    return ManySubgraphs(node_ptr=_ptr(visited // n, count), nodes=(visited % n).astype(np.int32),
                         triple_ptr=_ptr(triples // m, count), triples=(triples % m).astype(np.int32))


@dataclasses.dataclass(frozen=True)
class GraphSet:
    """The Triple-GNN inputs of many queries, concatenated (see the module docstring).

    Attributes:
      node_ptr: int64 [Q+1]; entities: int32 global ids (ascending within a query);
      question: bool, the query's seed entities.
      edge_ptr: int64 [Q+1]; senders, receivers: int32 local node ids; relations: int32
        (+ num_relations for the inverse direction); receivers ascending within a query.
      schema: float32 [Q, T, 3 d_pem] and schema_mask bool [Q, T] (T = the static schema axis).
    """

    node_ptr: np.ndarray
    entities: np.ndarray
    question: np.ndarray
    edge_ptr: np.ndarray
    senders: np.ndarray
    receivers: np.ndarray
    relations: np.ndarray
    schema: np.ndarray
    schema_mask: np.ndarray

    @property
    def n_node(self) -> np.ndarray:
        return np.diff(self.node_ptr)

    @property
    def n_edge(self) -> np.ndarray:
        return np.diff(self.edge_ptr)

    def __len__(self) -> int:
        return len(self.node_ptr) - 1


def graph_set(index: KGIndex, seeds: Sequence[Sequence[int]], hops: Sequence[int], hub_cap: int,
              schema: np.ndarray, schema_mask: np.ndarray) -> GraphSet:
    """Subgraphs and edge lists of every query (queries with equal seeds and radius expand once)."""
    count = len(seeds)
    keys = [(tuple(sorted(set(int(x) for x in s))), int(h)) for s, h in zip(seeds, hops, strict=True)]
    unique: dict[tuple, int] = {}
    which = np.asarray([unique.setdefault(k, len(unique)) for k in keys], np.int64)
    distinct = list(unique)
    sub = khop_many(index, [k[0] for k in distinct], [k[1] for k in distinct], hub_cap)
    u_nodes, u_triples = np.diff(sub.node_ptr), np.diff(sub.triple_ptr)

    # expand the distinct subgraphs back to one copy per query (flat gathers, no loop)
    n_node, n_triple = u_nodes[which], u_triples[which]
    node_ptr = _ptr(np.repeat(np.arange(count), n_node), count)
    triple_ptr = _ptr(np.repeat(np.arange(count), n_triple), count)
    entities = csr_gather(sub.node_ptr, sub.nodes, which)
    triples = csr_gather(sub.triple_ptr, sub.triples, which).astype(np.int64)
    node_owner = np.repeat(np.arange(count, dtype=np.int64), n_node)
    triple_owner = np.repeat(np.arange(count, dtype=np.int64), n_triple)

    n = np.int64(index.num_entities)
    node_keys = node_owner * n + entities  # sorted: query-major, entity ascending
    rows = index.triples[triples].astype(np.int64)
    head = np.searchsorted(node_keys, triple_owner * n + rows[:, 0]) - node_ptr[triple_owner]
    tail = np.searchsorted(node_keys, triple_owner * n + rows[:, 2]) - node_ptr[triple_owner]
    rel = rows[:, 1]

    seed_flat = np.concatenate([np.asarray(k[0], np.int64) for k in keys]) if count else np.zeros(0, np.int64)
    seed_owner = np.repeat(np.arange(count, dtype=np.int64), [len(k[0]) for k in keys])
    question = in_sorted(node_keys, np.sort(seed_owner * n + seed_flat))

    # build_example's order: forward edges then inverse edges, each in triple order, then a
    # stable sort by receiver; per query that is the lexicographic (receiver, direction, triple rank)
    owner2 = np.concatenate([triple_owner, triple_owner])
    senders = np.concatenate([head, tail])
    receivers = np.concatenate([tail, head])
    relations = np.concatenate([rel, rel + index.num_relations])
    rank = np.arange(len(triples), dtype=np.int64) - triple_ptr[triple_owner]
    rank = np.concatenate([rank, rank])
    direction = np.repeat(np.int64([0, 1]), len(triples))
    span = int(n_triple.max()) + 1 if count and len(triples) else 1
    if (len(entities) + 1) * 2 * span < 2**62:  # one int64 key: (batch receiver, direction, rank)
        order = np.argsort(((node_ptr[owner2] + receivers) * 2 + direction) * span + rank)
    else:
        order = np.lexsort((rank, direction, receivers, owner2))
    edge_ptr = _ptr(owner2, count)
    return GraphSet(node_ptr=node_ptr, entities=entities.astype(np.int32), question=question,
                    edge_ptr=edge_ptr, senders=senders[order].astype(np.int32),
                    receivers=receivers[order].astype(np.int32), relations=relations[order].astype(np.int32),
                    schema=np.asarray(schema, np.float32), schema_mask=np.asarray(schema_mask, bool))


def global_edges(graphs: GraphSet) -> tuple[np.ndarray, np.ndarray]:
    """int32 (senders, receivers) of every edge as indices into the concatenated nodes."""
    base = np.repeat(graphs.node_ptr[:-1].astype(np.int32), graphs.n_edge)
    return graphs.senders + base, graphs.receivers + base


def node_distances(graphs: GraphSet, cap: int = 3, senders: np.ndarray | None = None,
                   receivers: np.ndarray | None = None) -> np.ndarray:
    """int8 per node of ``graphs``: min(D, cap), D the number of directed edges (sender ->
    receiver) from the nearest question entity of its graph (cap when unreachable).

    This is the distance in the GNN's own edge lists, not the expansion step of
    :func:`khop_many`: a hub that is reached but not expanded can give a shorter path.
    """
    dist = np.full(len(graphs.entities), cap, np.int8)
    dist[graphs.question] = 0
    if cap <= 1 or len(graphs.senders) == 0:
        return dist
    if senders is None or receivers is None:
        senders, receivers = global_edges(graphs)
    frontier = graphs.question.copy()
    for step in range(1, cap):
        reached = np.zeros(len(dist), bool)
        reached[receivers[frontier[senders]]] = True
        frontier = reached & (dist == cap)
        dist[frontier] = step
    return dist

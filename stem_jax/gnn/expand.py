"""Per-query k-hop subgraphs in time proportional to the subgraph: the host side of streamed GNN inference.

:func:`stem_jax.gnn.multihop.graph_set` expands all queries of a call together with (query, node)
keys, which costs a sort over every key of the call at every hop and a final sort of all edges by
receiver (docs/performance.md, "GNN inference"). Here each distinct
(seeds, radius) is expanded on its own with stamp arrays over the KG (``mark[v] == stamp`` means
"visited by the current query"; a new query bumps the stamp instead of clearing), so membership is
one array read and de-duplication one scatter and gather, with no sort anywhere. The result has the
same nodes and the same edges as :func:`~stem_jax.gnn.batching.build_example`, in another order:
nodes in discovery order (seeds first), edges forward then inverse in discovery order of their
triples. Segment sums over unsorted receivers give the same sums up to float32 rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stem_jax.gnn.multihop import GraphSet
from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import csr_gather


class SubgraphExpander:
    """Builds one query's subgraph at a time (see the module docstring); reuse one per KG and hub cap.

    Not thread-safe: the stamp arrays are shared scratch space.
    """

    def __init__(self, index: KGIndex, hub_cap: int):
        self.index = index
        self.hub_cap = hub_cap
        n, m = index.num_entities, index.num_triples
        self.expandable = index.degree <= hub_cap
        self.heads = np.ascontiguousarray(index.triples[:, 0])
        self.tails = np.ascontiguousarray(index.triples[:, 2])
        self.relations = np.ascontiguousarray(index.triples[:, 1])
        self.node_stamp = np.zeros(n, np.int64)
        self.triple_stamp = np.zeros(m, np.int64)
        self.node_slot = np.zeros(n, np.int64)  # scratch: first position of a node / local id
        self.triple_slot = np.zeros(m, np.int64)
        self.stamp = 0

    @staticmethod
    def _first(values: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """``values`` without repeats, in order (one scatter, one gather): each value keeps the one
        position whose write survived, whichever numpy's order of repeated writes picked."""
        where = np.arange(len(values))
        slot[values] = where
        return values[slot[values] == where]

    def expand(self, seeds: Sequence[int], radius: int) -> tuple[np.ndarray, np.ndarray]:
        """(node ids int32 in discovery order, triple ids int32) of the ``radius``-hop subgraph:
        :func:`~stem_jax.kg.subgraph.khop_subgraph`'s node and triple sets, unsorted."""
        self.stamp += 1
        stamp = self.stamp
        frontier = np.unique(np.asarray(seeds, np.int64))
        self.node_stamp[frontier] = stamp
        node_parts, triple_parts = [frontier], []
        offsets, incident = self.index.csr_offsets, self.index.csr_triples
        for step in range(radius):
            expand = frontier if step == 0 else frontier[self.expandable[frontier]]
            if len(expand) == 0:
                break
            tids = csr_gather(offsets, incident, expand)
            tids = self._first(tids[self.triple_stamp[tids] != stamp], self.triple_slot)
            self.triple_stamp[tids] = stamp
            triple_parts.append(tids)
            ends = np.concatenate([self.heads[tids], self.tails[tids]])
            new = self._first(ends[self.node_stamp[ends] != stamp], self.node_slot)
            self.node_stamp[new] = stamp
            node_parts.append(new)
            frontier = new
        nodes = np.concatenate(node_parts).astype(np.int32)
        triples = np.concatenate(triple_parts).astype(np.int32) if triple_parts else np.zeros(0, np.int32)
        return nodes, triples

    def edges(self, nodes: np.ndarray, triples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """int32 (senders, receivers, relations) in local node ids: each triple forward (h -> t, r),
        then each inverse (t -> h, r + R)."""
        self.node_slot[nodes] = np.arange(len(nodes))
        head = self.node_slot[self.heads[triples]].astype(np.int32)
        tail = self.node_slot[self.tails[triples]].astype(np.int32)
        rel = self.relations[triples]
        return (np.concatenate([head, tail]), np.concatenate([tail, head]),
                np.concatenate([rel, rel + self.index.num_relations]).astype(np.int32))


def graph_set_unordered(index: KGIndex, seeds: Sequence[Sequence[int]], hops: Sequence[int], hub_cap: int,
                        schema: np.ndarray, schema_mask: np.ndarray,
                        expander: SubgraphExpander | None = None) -> GraphSet:
    """:func:`~stem_jax.gnn.multihop.graph_set`'s graphs with nodes and edges in discovery order
    (receivers not sorted): the input of :func:`stem_jax.gnn.infer.predict_top`'s reach path.
    Queries with equal seeds and radius share one expansion."""
    expander = expander or SubgraphExpander(index, hub_cap)
    if expander.index is not index or expander.hub_cap != hub_cap:
        raise ValueError("the expander was built for another KG or hub cap")
    built: dict[tuple, tuple[np.ndarray, ...]] = {}
    parts = []
    for s, h in zip(seeds, hops, strict=True):
        key = (tuple(sorted({int(x) for x in s})), int(h))
        if key not in built:
            nodes, triples = expander.expand(key[0], key[1])
            senders, receivers, relations = expander.edges(nodes, triples)
            question = np.zeros(len(nodes), bool)
            question[: len(key[0])] = True  # the seeds come first, all of them
            built[key] = (nodes, question, senders, receivers, relations)
        parts.append(built[key])
    count = len(parts)
    node_ptr = np.zeros(count + 1, np.int64)
    edge_ptr = np.zeros(count + 1, np.int64)
    np.cumsum([len(p[0]) for p in parts], out=node_ptr[1:])
    np.cumsum([len(p[2]) for p in parts], out=edge_ptr[1:])

    def joined(k: int, dtype: type) -> np.ndarray:
        return np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, dtype)

    return GraphSet(node_ptr=node_ptr, entities=joined(0, np.int32), question=joined(1, bool), edge_ptr=edge_ptr,
                    senders=joined(2, np.int32), receivers=joined(3, np.int32), relations=joined(4, np.int32),
                    schema=np.asarray(schema, np.float32), schema_mask=np.asarray(schema_mask, bool))

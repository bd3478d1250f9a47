"""Ranked semantic subgraph matching (SAFE §4.3, Algorithm 2) with exact lower-bound pruning.

A :class:`QueryGraph` is what ADJ hands over: nodes that are either known entities (with their
``SimEnt`` candidates) or typed variables (``SimTyp`` allowed types and a per-type distance), and
edges whose relation has ``SimRel`` candidates. All distances are integers (micro-units of L2
distance), so sums are exact and the pruned search provably returns the same top-k as the
unpruned enumeration (tested on random graphs).

Search (``MatchKG``): bind the anchor to each ``SimEnt`` candidate, then walk the query edges in
DFS order ψ; each step expands the KG node bound to the step's parent through the KG triples whose
relation is a ``SimRel`` candidate (in the edge's direction) to children that pass the type or
entity test and the consistency check (a query node binds one KG node; with ``injective`` a KG
node binds at most one query node). A match's score is the sum of the anchor's and every bound
node's ``SemDist`` plus every edge's relation distance.

Order and ties: candidates of a step are visited in a canonical order (step cost, relation,
node, triple id), which realises appendix C.4's "expand smaller distances first". Matches are
ranked by (score, discovery order). Because pruning only removes subtrees and never reorders the
rest, discovery order is the same with and without pruning; so pruning a partial match whose
lower bound (its cost so far plus the cheapest possible cost of every remaining step) is *at
least* the k-th best score is exact, ties included.

Why this stays sequential (numpy per expansion, Python between): the pruning threshold is the
running k-th best score, which depends on every match found before; a level-synchronous batched
expansion would have to keep every partial match of a level (hub nodes make that millions on
MetaQA 3-hop) to find the same top-k. What is vectorised: each expansion scores all of a node's
incident triples at once (relation lookup, type mask, min over the entity's types).
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from stem_jax.kg.index import KGIndex

SCALE = 1_000_000  # distances are stored as integers in units of 1e-6
BIG = np.int64(1) << 50


def to_cost(distance: np.ndarray | float) -> np.ndarray:
    """L2 distances -> integer costs (micro-units), so sums and comparisons are exact."""
    return np.rint(np.asarray(distance, dtype=np.float64) * SCALE).astype(np.int64)


@dataclasses.dataclass
class QueryNode:
    """A query-graph node: a known entity (``entities``/``entity_cost``) or a variable.

    A variable with ``type_cost`` (int64 [C]) must have a type in ``type_allowed`` (bool [C],
    SimTyp) and costs the minimum of ``type_cost`` over its KG types; without it, any entity
    matches at cost 0 (type unknown).
    """

    name: str
    entities: np.ndarray | None = None
    entity_cost: np.ndarray | None = None
    type_allowed: np.ndarray | None = None
    type_cost: np.ndarray | None = None

    @property
    def is_entity(self) -> bool:
        return self.entities is not None

    def min_cost(self) -> int:
        if self.is_entity:
            return int(self.entity_cost.min()) if len(self.entity_cost) else 0
        if self.type_cost is None:
            return 0
        return int(self.type_cost.min())


@dataclasses.dataclass
class QueryEdge:
    """``head -relation-> tail``; ``relations``/``relation_cost`` are the SimRel candidates.

    ``undirected`` edges (ADJ's bridges between two types) match KG triples either way round.
    """

    head: int
    tail: int
    relations: np.ndarray
    relation_cost: np.ndarray
    undirected: bool = False

    def min_cost(self) -> int:
        return int(self.relation_cost.min()) if len(self.relation_cost) else 0


@dataclasses.dataclass
class QueryGraph:
    nodes: list[QueryNode]
    edges: list[QueryEdge]
    anchor: int
    answer: int
    label: str = ""
    adj_distance: float = 0.0
    info: dict = dataclasses.field(default_factory=dict)  # readable extras for the record (relations, types)


@dataclasses.dataclass(frozen=True)
class Step:
    edge: int
    parent: int
    child: int
    forward: bool  # the parent is the edge's head
    closing: bool  # the child is already bound (a cycle)


@dataclasses.dataclass(frozen=True)
class Match:
    score: int
    seq: int
    nodes: tuple[int, ...]  # KG entity per query node (-1: not reached from the anchor)
    triples: tuple[int, ...]  # KG triple per DFS step


def dfs_steps(graph: QueryGraph) -> list[Step]:
    """ψ: the query edges in DFS order from the anchor (tree edges, then cycle-closing ones as met)."""
    incident: dict[int, list[int]] = {i: [] for i in range(len(graph.nodes))}
    for e, edge in enumerate(graph.edges):
        incident[edge.head].append(e)
        if edge.tail != edge.head:
            incident[edge.tail].append(e)
    steps: list[Step] = []
    used: set[int] = set()
    seen = {graph.anchor}

    def visit(node: int) -> None:
        for e in incident[node]:
            if e in used:
                continue
            used.add(e)
            edge = graph.edges[e]
            forward = edge.head == node
            child = edge.tail if forward else edge.head
            if child in seen:
                steps.append(Step(e, node, child, forward, True))
                continue
            seen.add(child)
            steps.append(Step(e, node, child, forward, False))
            visit(child)

    visit(graph.anchor)
    return steps


@dataclasses.dataclass(frozen=True)
class MatchIndex:
    """Directed CSR views of a KG (out: by head, in: by tail; each sorted by relation, neighbour, triple).

    ``out_relations``/``out_neighbours`` (and ``in_*``) are the relation and other end of each CSR entry, so an
    expansion slices them instead of gathering triples; ``type_table`` caches, per variable-node type test, the
    per-entity pass mask and cost (the same values :func:`expand` would compute from the entity's types)."""

    triples: np.ndarray
    out_offsets: np.ndarray
    out_triples: np.ndarray
    in_offsets: np.ndarray
    in_triples: np.ndarray
    entity_types: np.ndarray  # bool [E, C]
    num_relations: int
    out_relations: np.ndarray | None = None
    out_neighbours: np.ndarray | None = None
    in_relations: np.ndarray | None = None
    in_neighbours: np.ndarray | None = None
    type_tables: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(cls, index: KGIndex, entity_types: np.ndarray) -> MatchIndex:
        return cls.from_arrays(index.triples, index.num_entities, index.num_relations, entity_types)

    @classmethod
    def from_arrays(cls, triples: np.ndarray, num_entities: int, num_relations: int,
                    entity_types: np.ndarray) -> MatchIndex:
        triples = np.asarray(triples, dtype=np.int32).reshape(-1, 3)
        ids = np.arange(len(triples), dtype=np.int32)

        def csr(own: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            order = np.lexsort((ids, other, triples[:, 1], own))
            offsets = np.zeros(num_entities + 1, dtype=np.int64)
            np.cumsum(np.bincount(own, minlength=num_entities), out=offsets[1:])
            return offsets, ids[order]

        out_offsets, out_triples = csr(triples[:, 0], triples[:, 2])
        in_offsets, in_triples = csr(triples[:, 2], triples[:, 0])
        return cls(triples, out_offsets, out_triples, in_offsets, in_triples, np.asarray(entity_types, bool),
                   num_relations, triples[out_triples, 1], triples[out_triples, 2], triples[in_triples, 1],
                   triples[in_triples, 0])

    def type_table(self, allowed: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per entity: whether one of its types is ``allowed`` (bool [E]) and its cheapest type ``cost`` (int64 [E];
        ``BIG`` for an entity without types). Cached by the test's bytes: a query node's test depends only on its
        type, so every query graph with that type shares one table."""
        key = (np.asarray(allowed, bool).tobytes(), np.asarray(cost, np.int64).tobytes())
        table = self.type_tables.get(key)
        if table is None:
            table = ((self.entity_types & np.asarray(allowed, bool)[None, :]).any(axis=1),
                     np.where(self.entity_types, np.asarray(cost, np.int64)[None, :], BIG).min(axis=1))
            self.type_tables[key] = table
        return table

    def incident(self, node: int, forward: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(triple ids, relations, neighbours) of ``node`` as head (forward) or as tail."""
        if forward:
            lo, hi = self.out_offsets[node], self.out_offsets[node + 1]
            return self.out_triples[lo:hi], self.out_relations[lo:hi], self.out_neighbours[lo:hi]
        lo, hi = self.in_offsets[node], self.in_offsets[node + 1]
        return self.in_triples[lo:hi], self.in_relations[lo:hi], self.in_neighbours[lo:hi]


class _Prepared:
    """Per-query-graph lookups: relation cost per KG relation per edge, entity cost per node."""

    def __init__(self, kg: MatchIndex, graph: QueryGraph):
        self.relation_cost = []
        for edge in graph.edges:
            lookup = np.full(kg.num_relations, -1, dtype=np.int64)
            lookup[edge.relations] = edge.relation_cost
            self.relation_cost.append(lookup)
        self.entity_cost: list[tuple[np.ndarray, np.ndarray] | None] = []
        self.type_tables = [kg.type_table(node.type_allowed, node.type_cost)
                            if not node.is_entity and node.type_cost is not None else None for node in graph.nodes]
        for node in graph.nodes:
            if not node.is_entity:
                self.entity_cost.append(None)
                continue
            order = np.argsort(node.entities, kind="stable")
            self.entity_cost.append((np.asarray(node.entities)[order], np.asarray(node.entity_cost)[order]))

    def node_entity_cost(self, node: int, candidates: np.ndarray) -> np.ndarray:
        """Cost of each candidate for a known-entity node, -1 where it is not in SimEnt."""
        entities, costs = self.entity_cost[node]
        if len(entities) == 0:
            return np.full(len(candidates), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(entities, candidates), len(entities) - 1)
        return np.where(entities[pos] == candidates, costs[pos], -1).astype(np.int64)


def expand(kg: MatchIndex, graph: QueryGraph, prepared: _Prepared, step: Step, bound: int,
           child_bound: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of one DFS step from KG node ``bound``: (children, triple ids, step costs), canonical order.

    A step's cost is the relation distance plus, for a child not bound yet, its node distance.
    """
    edge = graph.edges[step.edge]
    if edge.undirected:
        parts = [kg.incident(bound, True), kg.incident(bound, False)]
        tids = np.concatenate([p[0] for p in parts])
        rels = np.concatenate([p[1] for p in parts])
        nbrs = np.concatenate([p[2] for p in parts])
    else:
        tids, rels, nbrs = kg.incident(bound, step.forward)
    rel_cost = prepared.relation_cost[step.edge][rels]
    keep = rel_cost >= 0
    if step.closing:
        keep &= nbrs == child_bound
        node_cost = np.zeros(len(nbrs), dtype=np.int64)
    else:
        node = graph.nodes[step.child]
        if node.is_entity:
            node_cost = prepared.node_entity_cost(step.child, nbrs)
            keep &= node_cost >= 0
        elif node.type_cost is not None:
            allowed, costs = prepared.type_tables[step.child]
            keep &= allowed[nbrs]
            node_cost = costs[nbrs]
        else:
            node_cost = np.zeros(len(nbrs), dtype=np.int64)
    tids, rels, nbrs, cost = tids[keep], rels[keep], nbrs[keep], (rel_cost + node_cost)[keep]
    order = np.lexsort((tids, nbrs, rels, cost))
    return nbrs[order], tids[order], cost[order]


def rank_matches(kg: MatchIndex, graph: QueryGraph, k: int, *, prune: bool = True, injective: bool = False,
                 stats: dict | None = None) -> list[Match]:
    """Top-``k`` matches of ``graph`` by (score, discovery order); ``prune=False`` enumerates everything first.

    ``stats`` (optional) accumulates ``expansions`` and ``pruned`` counts.
    """
    steps = dfs_steps(graph)
    prepared = _Prepared(kg, graph)
    step_min = [graph.edges[s.edge].min_cost() + (0 if s.closing else graph.nodes[s.child].min_cost()) for s in steps]
    rest = np.zeros(len(steps) + 1, dtype=np.int64)
    for i in range(len(steps) - 1, -1, -1):
        rest[i] = rest[i + 1] + step_min[i]
    heap: list[tuple[int, int, Match]] = []  # max-heap by (score, seq) through negation
    found: list[Match] = []
    bound = [-1] * len(graph.nodes)
    tids_bound = [-1] * len(steps)
    used: set[int] = set()
    counter = {"seq": 0, "expansions": 0, "pruned": 0}
    cache: dict[tuple[int, int, int], list[list[int]]] = {}

    def full_worst() -> int | None:
        if prune and len(heap) >= k:
            return -heap[0][0]
        return None

    def push(score: int) -> None:
        match = Match(int(score), counter["seq"], tuple(bound), tuple(tids_bound))
        counter["seq"] += 1
        if not prune:
            found.append(match)
            return
        item = (-match.score, -match.seq, match)
        if len(heap) < k:
            heapq.heappush(heap, item)
        elif (match.score, match.seq) < (-heap[0][0], -heap[0][1]):
            heapq.heapreplace(heap, item)

    def recurse(i: int, cost: int) -> None:
        if i == len(steps):
            push(cost)
            return
        worst = full_worst()
        if worst is not None and cost + rest[i] >= worst:
            counter["pruned"] += 1
            return
        step = steps[i]
        key = (i, bound[step.parent], bound[step.child] if step.closing else -1)
        if key not in cache:  # the same KG node is often reached again through other bindings
            counter["expansions"] += 1
            cache[key] = [a.tolist() for a in expand(kg, graph, prepared, step, bound[step.parent], bound[step.child])]
        children, tids, costs = cache[key]
        for child, tid, step_cost in zip(children, tids, costs, strict=True):
            total = cost + step_cost
            worst = full_worst()
            if worst is not None and total + rest[i + 1] >= worst:
                counter["pruned"] += 1
                break  # candidates are sorted by cost: the rest cannot do better
            if not step.closing:
                if injective and child in used:
                    continue
                bound[step.child] = child
                used.add(child)
            tids_bound[i] = tid
            recurse(i + 1, total)
            tids_bound[i] = -1
            if not step.closing:
                bound[step.child] = -1
                used.discard(child)

    anchor = graph.nodes[graph.anchor]
    if anchor.is_entity:
        order = np.lexsort((anchor.entities, anchor.entity_cost))
        starts = list(zip(anchor.entities[order].tolist(), anchor.entity_cost[order].tolist(), strict=True))
    else:
        starts = []
    for entity, cost in starts:
        worst = full_worst()
        if worst is not None and cost + rest[0] >= worst:
            break
        bound[graph.anchor] = entity
        used.add(entity)
        recurse(0, int(cost))
        used.discard(entity)
        bound[graph.anchor] = -1
    if stats is not None:
        stats["expansions"] = stats.get("expansions", 0) + counter["expansions"]
        stats["pruned"] = stats.get("pruned", 0) + counter["pruned"]
    if not prune:
        return sorted(found, key=lambda m: (m.score, m.seq))[:k]
    return sorted((item[2] for item in heap), key=lambda m: (m.score, m.seq))

"""Approximate distance join (SAFE §4.2, Algorithm 1): pseudo query graph -> schema-aligned query graphs.

1. **Candidate schema edge selection.** Each pseudo edge ``ℓ = (u, r, u')`` is written as its
   typed triple ``type(u) r type(u')`` and embedded; its candidates ``Cands(ℓ)`` are the
   ``k_schema`` schema edges ``(c, r, c')`` nearest in L2 distance. Where ``ℓ`` names a known
   entity the candidates are restricted to schema edges whose type on that side is one of the
   entity's types and whose relation the entity has on that side (the paper's "fix the entity's
   actual type and associated relation"). :func:`candidate_schema_edges` scores all pseudo edges
   of a batch of questions against all schema edges in one jitted call.
2. **Distance edge join.** :func:`distance_edge_join` is Algorithm 1: assign pseudo edges in
   order, an assignment is feasible when every already assigned pseudo edge that shares a pseudo
   node lies within ``D_edge <= δ``, and keep the ``k_qg`` complete assignments of least total L2
   distance (ties: enumeration order). It stays a small recursion: at most ``k_schema^n``
   assignments for ``n <= 8`` pseudo edges, with the D_edge look-ups vectorised per question.
3. **Instantiation** (:func:`instantiate`). Each pseudo node becomes a known entity or a typed
   variable (the type its first schema edge gives it). Where a later schema edge gives a shared
   variable another type at schema distance ``1 <= d <= δ``, the node is split and the two copies
   are bridged by ``d`` undirected edges (for ``d = 1`` restricted to the relations that connect
   the two types in the schema graph): the paper's "intermediate variable nodes or relations".
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.methods.safe.apsp import edge_distance


@dataclasses.dataclass(frozen=True)
class PseudoGraph:
    """A pseudo query graph: node names, edges (head, relation string, tail), its answer node.

    ``entities`` maps each known-entity node to its value-retrieval candidates (KG ids, L2 distances).
    """

    nodes: tuple[str, ...]
    edges: tuple[tuple[int, str, int], ...]
    answer: int
    entities: dict[int, tuple[np.ndarray, np.ndarray]]

    def adjacency(self) -> list[set[int]]:
        """A(i): pseudo edges sharing a pseudo node with edge i."""
        out = [set() for _ in self.edges]
        for i, j in itertools.combinations(range(len(self.edges)), 2):
            a, b = self.edges[i], self.edges[j]
            if {a[0], a[2]} & {b[0], b[2]}:
                out[i].add(j)
                out[j].add(i)
        return out


@dataclasses.dataclass(frozen=True)
class TypedNode:
    name: str
    entity: bool
    type_id: int | None = None  # variables: the schema type; None = unknown


@dataclasses.dataclass(frozen=True)
class TypedEdge:
    head: int
    tail: int
    relation: int | None  # a KG relation; None for a bridge
    bridge_relations: tuple[int, ...] | None = None  # a bridge's allowed relations (None: any)
    relation_text: str | None = None  # w/o ADJ: a pseudo relation absent from the KG

    @property
    def undirected(self) -> bool:
        return self.relation is None and self.relation_text is None


@dataclasses.dataclass(frozen=True)
class AlignedGraph:
    """A schema-aligned query graph: typed nodes and edges, total ADJ distance, chosen schema edges."""

    nodes: tuple[TypedNode, ...]
    edges: tuple[TypedEdge, ...]
    answer: int
    distance: float
    schema_edges: tuple[int, ...] = ()


@functools.partial(jax.jit, static_argnames="k")
def nearest(queries: jax.Array, keys: jax.Array, allowed: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The ``k`` allowed keys nearest to each query in L2 distance: (distances [N, k], ids [N, k]); inf where none."""
    sq = jnp.sum(queries * queries, axis=1, keepdims=True) + jnp.sum(keys * keys, axis=1)[None, :]
    dist = jnp.where(allowed, jnp.sqrt(jnp.maximum(sq - 2.0 * queries @ keys.T, 0.0)), jnp.inf)
    neg, ids = jax.lax.top_k(-dist, k)
    return -neg, ids


RERANK_EXTRA = 8  # candidates the fast distance keeps beyond k, re-ranked by the exact one


def exact_nearest(queries: np.ndarray, keys: Any, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` of each row's ``candidates`` (key ids, -1 for none) nearest to its query by exact L2 distance:
    (distances float64 [N, k], ids [N, k]), inf / -1 where a row has fewer; ties: the lower id.

    The fast form (|q|² + |k|² - 2 q·k in float32, one matmul) loses about 1e-3 near 0 to cancellation,
    and its rounding depends on the padded batch shape, so a question's distances (and the scores
    built from them) would change with the questions batched beside it. ``sqrt(sum((k - q)²))`` in
    float64, per (query, key) pair, is the same whatever else is in the batch, and 0 for an exact match."""
    n = len(candidates)
    distances = np.full((n, k), np.inf)
    ids = np.full((n, k), -1, np.int64)
    for row in range(n):
        cand = np.unique(candidates[row][candidates[row] >= 0])
        if not len(cand):
            continue
        diff = np.asarray(keys[cand], np.float64) - np.asarray(queries[row], np.float64)[None, :]
        dist = np.sqrt((diff * diff).sum(axis=1))
        order = np.lexsort((cand, dist))[:k]
        distances[row, : len(order)] = dist[order]
        ids[row, : len(order)] = cand[order]
    return distances, ids


def candidate_schema_edges(pseudo_vectors: np.ndarray, schema_vectors: np.ndarray, allowed: np.ndarray,
                           k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` allowed schema edges per pseudo edge by L2 distance: (ids int [N, k], distances [N, k]).

    Missing candidates (fewer than ``k`` allowed) have id -1 and distance inf. Rows are padded to a
    power of two so batches of similar size share one compilation.
    """
    n = pseudo_vectors.shape[0]
    if n == 0:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    size = 1 << max(0, (n - 1).bit_length())
    queries = np.zeros((size, pseudo_vectors.shape[1]), np.float32)
    queries[:n] = pseudo_vectors
    mask = np.zeros((size, schema_vectors.shape[0]), bool)
    mask[:n] = allowed
    kk = min(k + RERANK_EXTRA, schema_vectors.shape[0])
    top, order = nearest(jnp.asarray(queries), jnp.asarray(schema_vectors, jnp.float32), jnp.asarray(mask), kk)
    top, order = np.asarray(top)[:n], np.asarray(order)[:n]
    top, ids = exact_nearest(pseudo_vectors, schema_vectors, np.where(np.isfinite(top), order, -1), min(k, kk))
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        top = np.pad(top, ((0, 0), (0, pad)), constant_values=np.inf)
    return ids, top


def distance_edge_join(candidates: list[list[tuple[int, float]]], adjacency: list[set[int]], edges: np.ndarray,
                       node_distance: np.ndarray, delta: float, k_qg: int) -> list[tuple[tuple[int, ...], float]]:
    """Algorithm 1 (MatchSG): the ``k_qg`` feasible assignments of least total distance.

    Args:
      candidates: per pseudo edge, its (schema edge id, L2 distance) candidates in rank order.
      adjacency: A(i), the pseudo edges sharing a node with edge i.
      edges: the schema edges [S, 3]; node_distance: APSP over schema types.

    Returns:
      (schema edge per pseudo edge, total distance) pairs, best first; ties keep enumeration order.
    """
    n = len(candidates)
    flat = sorted({c for cands in candidates for c, _ in cands})
    position = {c: i for i, c in enumerate(flat)}
    pair = (edge_distance(node_distance, edges[flat][:, None, :], edges[flat][None, :, :])
            if flat else np.zeros((0, 0)))
    found: list[tuple[float, int, tuple[int, ...]]] = []
    chosen: list[int] = [-1] * n

    def match_sg(i: int, total: float) -> None:
        if i == n:
            found.append((total, len(found), tuple(chosen)))
            return
        for alpha, dist in candidates[i]:
            feasible = all(pair[position[alpha], position[chosen[j]]] <= delta
                           for j in adjacency[i] if chosen[j] >= 0)
            if feasible:
                chosen[i] = alpha
                match_sg(i + 1, total + dist)
                chosen[i] = -1

    match_sg(0, 0.0)
    found.sort(key=lambda item: (item[0], item[1]))
    return [(assignment, total) for total, _, assignment in found[:k_qg]]


def instantiate(pseudo: PseudoGraph, assignment: tuple[int, ...], distance: float, edges: np.ndarray,
                node_distance: np.ndarray, delta: int) -> AlignedGraph:
    """Turn one assignment of schema edges into a query graph (typed variables, bridges; module docstring)."""
    nodes = [TypedNode(name, node in pseudo.entities) for node, name in enumerate(pseudo.nodes)]
    out_edges: list[TypedEdge] = []
    for (head, _, tail), alpha in zip(pseudo.edges, assignment, strict=True):
        c_head, relation, c_tail = (int(x) for x in edges[alpha])
        ends = []
        for node, c in ((head, c_head), (tail, c_tail)):
            current = nodes[node]
            if current.entity:
                ends.append(node)
                continue
            if current.type_id is None:
                nodes[node] = dataclasses.replace(current, type_id=c)
                ends.append(node)
                continue
            d = node_distance[current.type_id, c]
            if current.type_id == c or not (1 <= d <= delta):
                ends.append(node)  # same type, or too far to bridge: keep one node, the type stays soft
                continue
            # bridge: a copy of the node typed c, joined to it by d undirected edges
            previous = node
            for hop in range(int(d)):
                last = hop == int(d) - 1
                nodes.append(TypedNode(f"{current.name}~{len(nodes)}", False, c if last else None))
                allowed = None
                if int(d) == 1:
                    links = edges[((edges[:, 0] == current.type_id) & (edges[:, 2] == c))
                                  | ((edges[:, 0] == c) & (edges[:, 2] == current.type_id))]
                    allowed = tuple(sorted({int(r) for r in links[:, 1]})) or None
                out_edges.append(TypedEdge(previous, len(nodes) - 1, None, allowed))
                previous = len(nodes) - 1
            ends.append(previous)
        out_edges.append(TypedEdge(ends[0], ends[1], relation))
    return AlignedGraph(tuple(nodes), tuple(out_edges), pseudo.answer, float(distance), tuple(int(a) for a in assignment))


def unaligned(pseudo: PseudoGraph, relation_ids: dict[str, int], domain: np.ndarray, range_: np.ndarray) -> AlignedGraph:
    """The pseudo graph as written (the paper's "w/o ADJ" ablation): types from the relations' signatures."""
    types: dict[int, int] = {}
    out_edges = []
    for head, relation, tail in pseudo.edges:
        rid = relation_ids.get(relation)
        if rid is not None:
            types.setdefault(head, int(domain[rid]))
            types.setdefault(tail, int(range_[rid]))
            out_edges.append(TypedEdge(head, tail, rid))
        else:
            out_edges.append(TypedEdge(head, tail, None, None, relation))
    nodes = tuple(TypedNode(name, node in pseudo.entities, None if node in pseudo.entities else types.get(node))
                  for node, name in enumerate(pseudo.nodes))
    return AlignedGraph(nodes, tuple(out_edges), pseudo.answer, 0.0)

"""SCR's view of the KG: capped neighbour lists (the candidates) and every directed edge (GNN, labels).

Entity ``v``'s edges are all KG triples touching it, with the *directed* relation seen from ``v``:
a triple (h, r, t) lists t under h with relation ``r`` and h under t with relation ``r + R`` (its
inverse). A pair of entities joined by several relations (a director who also wrote the film) keeps
one edge per relation: the GNN passes a message along each, and each relation counts when labels
are made (:mod:`.supervision`). Self-loops are dropped: staying on ``v`` is SCR's stop option,
which every candidate list already holds in slot 0.

Candidates: faithful SCR scores a candidate *entity* (its GNN feature carries no relation), so its
list holds each neighbour once (the lowest triple id names the hop's evidence); the relation-aware
variant (``per_edge``) scores (relation, entity) pairs, so its list holds every edge.

Hubs (MetaQA tags, genres, years) have thousands of neighbours. An entity with more than ``cap``
distinct neighbours keeps a deterministic random sample of ``cap`` of them (seeded), with all their
edges, so a candidate set and the GNN's in-degree are bounded; :meth:`NeighbourTable.candidates`
pads a batch of lists to the next power of two, so the jitted search step compiles once per width
bucket.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stem_jax.kg.index import KGIndex

MIN_WIDTH = 16  # smallest candidate bucket: fewer compiles, negligible extra work


@dataclasses.dataclass(frozen=True)
class NeighbourTable:
    """CSR candidate lists: ``entity[offsets[v]:offsets[v+1]]`` are v's (capped) candidates.

    Attributes:
      offsets: int64 [N + 1].
      entity: int32 [M] neighbour entity ids.
      relation: int32 [M] directed relation ids in [0, 2R) (``r + R`` = traversed tail -> head).
      triple: int32 [M] the KG triple id of each entry (the evidence of that hop).
      edge_offsets, edge_entity, edge_relation, edge_triple: the same CSR over *every* kept directed
        edge (several per pair when several relations join it): GNN messages and step labels.
      num_relations: R.
      cap: distinct neighbours kept per entity.
      capped: how many entities had their neighbours sampled down to ``cap``.
      per_edge: candidates are edges (relation-aware SCR) rather than distinct entities.
    """

    offsets: np.ndarray
    entity: np.ndarray
    relation: np.ndarray
    triple: np.ndarray
    edge_offsets: np.ndarray
    edge_entity: np.ndarray
    edge_relation: np.ndarray
    edge_triple: np.ndarray
    num_relations: int
    cap: int
    capped: int
    per_edge: bool = False

    @property
    def num_entities(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def max_width(self) -> int:
        """The candidate width that holds every list (1 + the longest, a power of two)."""
        return max(MIN_WIDTH, next_power_of_two(int(np.diff(self.offsets).max(initial=0)) + 1))

    def neighbours(self, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """v's candidate list: (entities, directed relations, triples)."""
        lo, hi = self.offsets[v], self.offsets[v + 1]
        return self.entity[lo:hi], self.relation[lo:hi], self.triple[lo:hi]

    def edges(self, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every kept directed edge of v: (entities, directed relations, triples)."""
        lo, hi = self.edge_offsets[v], self.edge_offsets[v + 1]
        return self.edge_entity[lo:hi], self.edge_relation[lo:hi], self.edge_triple[lo:hi]

    def width(self, entities: np.ndarray) -> int:
        """Padded candidate width for ``entities``: 1 + max list length, rounded up to a power of two."""
        longest = int(np.diff(self.offsets)[entities].max(initial=0)) if entities.size else 0
        return max(MIN_WIDTH, next_power_of_two(longest + 1))

    def candidates(self, entities: np.ndarray, width: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Padded candidate lists of ``entities`` (any shape S): slot 0 is the entity itself (stop).

        Returns (entity, relation, triple, valid), each [*S, width]; relation and triple are -1 in
        slot 0 and in padding. Negative input entities (empty beams) get no valid slot at all.
        """
        flat = np.asarray(entities, np.int64).reshape(-1)
        width = self.width(flat[flat >= 0]) if width is None else width
        real = flat >= 0
        safe = np.where(real, flat, 0)
        counts = np.where(real, self.offsets[safe + 1] - self.offsets[safe], 0)
        if counts.size and counts.max() + 1 > width:
            raise ValueError(f"candidate width {width} is smaller than a list of {counts.max()} + 1")
        cols = np.arange(width - 1)
        inside = cols[None, :] < counts[:, None]
        rows = np.where(inside, self.offsets[safe][:, None] + cols[None, :], 0)
        ent = np.full((flat.size, width), -1, np.int32)
        rel = np.full((flat.size, width), -1, np.int32)
        tri = np.full((flat.size, width), -1, np.int32)
        ent[:, 0] = np.where(real, flat, -1)
        ent[:, 1:] = np.where(inside, self.entity[rows], -1)
        rel[:, 1:] = np.where(inside, self.relation[rows], -1)
        tri[:, 1:] = np.where(inside, self.triple[rows], -1)
        valid = ent >= 0
        shape = tuple(np.shape(entities)) + (width,)
        return ent.reshape(shape), rel.reshape(shape), tri.reshape(shape), valid.reshape(shape)

    def gnn_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Directed message-passing edges (senders, receivers, relation), receivers ascending.

        Entity ``v`` receives from each kept edge (one per relation of a pair), with the relation seen from v."""
        receivers = np.repeat(np.arange(self.num_entities, dtype=np.int32), np.diff(self.edge_offsets))
        return self.edge_entity.copy(), receivers, self.edge_relation.copy()


def next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _csr(owner: np.ndarray, n: int) -> np.ndarray:
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return offsets


def build_neighbour_table(index: KGIndex, cap: int, seed: int = 0, *, per_edge: bool = False) -> NeighbourTable:
    """Candidate lists and edges of every entity (see the module docstring), hubs sampled down to ``cap``."""
    if cap < 1:
        raise ValueError(f"the neighbour cap must be positive, got {cap}")
    triples = index.triples.astype(np.int64)
    n, r = index.num_entities, index.num_relations
    ids = np.arange(triples.shape[0], dtype=np.int64)
    owner = np.concatenate([triples[:, 0], triples[:, 2]])
    other = np.concatenate([triples[:, 2], triples[:, 0]])
    relation = np.concatenate([triples[:, 1], triples[:, 1] + r])
    triple = np.concatenate([ids, ids])
    keep = owner != other
    owner, other, relation, triple = owner[keep], other[keep], relation[keep], triple[keep]
    order = np.lexsort((triple, other, owner))
    owner, other, relation, triple = owner[order], other[order], relation[order], triple[order]
    first = np.ones(owner.size, bool)  # first edge of each (owner, neighbour) pair: its lowest triple id
    first[1:] = (owner[1:] != owner[:-1]) | (other[1:] != other[:-1])
    pair = np.cumsum(first) - 1  # pair index of every edge
    pair_owner = owner[first]
    counts = np.bincount(pair_owner, minlength=n)
    over = counts > cap
    if over.any():
        # Rank each pair within its owner by a seeded random key; keep ranks < cap (with all their edges).
        key = np.random.default_rng(seed).random(pair_owner.size)
        by = np.lexsort((key, pair_owner))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(pair_owner.size, np.int64)
        rank[by] = np.arange(pair_owner.size) - starts[pair_owner[by]]
        kept = (rank < cap)[pair]
        owner, other, relation, triple, first = owner[kept], other[kept], relation[kept], triple[kept], first[kept]
    edge_offsets = _csr(owner, n)
    if per_edge:
        cand = np.ones(owner.size, bool)
    else:
        cand = first
    return NeighbourTable(_csr(owner[cand], n), other[cand].astype(np.int32), relation[cand].astype(np.int32),
                          triple[cand].astype(np.int32), edge_offsets, other.astype(np.int32),
                          relation.astype(np.int32), triple.astype(np.int32), num_relations=r, cap=cap,
                          capped=int(over.sum()), per_edge=per_edge)

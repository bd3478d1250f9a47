"""SCR's view of the KG: capped, deduplicated neighbour lists and the GNN's directed edges.

Entity ``v``'s neighbours are the entities sharing a triple with it, each listed once (the
lowest triple id wins when two relations connect the same pair), with the *directed* relation
seen from ``v``: a triple (h, r, t) lists t under h with relation ``r`` and h under t with
relation ``r + R`` (its inverse). Self-loops are dropped: staying on ``v`` is SCR's stop option,
which every candidate list already holds in slot 0.

Hubs (MetaQA tags, genres, years) have thousands of neighbours. Lists longer than ``cap`` keep a
deterministic random sample of ``cap`` entries (seeded), so a candidate set and the GNN's
in-degree are bounded; :meth:`NeighbourTable.candidates` pads a batch of lists to the next power
of two, so the jitted search step compiles once per width bucket.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stem_jax.kg.index import KGIndex

MIN_WIDTH = 16  # smallest candidate bucket: fewer compiles, negligible extra work


@dataclasses.dataclass(frozen=True)
class NeighbourTable:
    """CSR neighbour lists: ``entity[offsets[v]:offsets[v+1]]`` are v's (capped) neighbours.

    Attributes:
      offsets: int64 [N + 1].
      entity: int32 [M] neighbour entity ids.
      relation: int32 [M] directed relation ids in [0, 2R) (``r + R`` = traversed tail -> head).
      triple: int32 [M] the KG triple id of each entry (the evidence of that hop).
      num_relations: R.
      capped: how many entities had their list sampled down to ``cap``.
    """

    offsets: np.ndarray
    entity: np.ndarray
    relation: np.ndarray
    triple: np.ndarray
    num_relations: int
    cap: int
    capped: int

    @property
    def num_entities(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def neighbours(self, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = self.offsets[v], self.offsets[v + 1]
        return self.entity[lo:hi], self.relation[lo:hi], self.triple[lo:hi]

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

        Entity ``v`` receives from each of its (capped) neighbours, with the relation seen from v."""
        receivers = np.repeat(np.arange(self.num_entities, dtype=np.int32), np.diff(self.offsets))
        return self.entity.copy(), receivers, self.relation.copy()


def next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def build_neighbour_table(index: KGIndex, cap: int, seed: int = 0) -> NeighbourTable:
    """Neighbour lists of every entity (see the module docstring), hubs sampled down to ``cap``."""
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
    # One entry per (owner, neighbour): the lowest triple id.
    order = np.lexsort((triple, other, owner))
    owner, other, relation, triple = owner[order], other[order], relation[order], triple[order]
    first = np.ones(owner.size, bool)
    first[1:] = (owner[1:] != owner[:-1]) | (other[1:] != other[:-1])
    owner, other, relation, triple = owner[first], other[first], relation[first], triple[first]
    counts = np.bincount(owner, minlength=n)
    over = counts > cap
    if over.any():
        # Rank each entry within its owner by a seeded random key; keep ranks < cap.
        key = np.random.default_rng(seed).random(owner.size)
        order = np.lexsort((key, owner))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.empty(owner.size, np.int64)
        rank[order] = np.arange(owner.size) - starts[owner[order]]
        keep = rank < cap
        owner, other, relation, triple = owner[keep], other[keep], relation[keep], triple[keep]
        counts = np.bincount(owner, minlength=n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return NeighbourTable(offsets, other.astype(np.int32), relation.astype(np.int32), triple.astype(np.int32),
                          num_relations=r, cap=cap, capped=int(over.sum()))

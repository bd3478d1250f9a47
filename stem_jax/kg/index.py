"""Integer KG index: string vocabularies, int32 triples and undirected CSR incidence."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from stem_jax.data.types import Triple
from stem_jax.errors import DataError


@dataclasses.dataclass(frozen=True)
class KGIndex:
    """A KG as int32 arrays.

    Attributes:
      entities: entity strings in id order (names, or opaque ids such as Freebase mids).
      relations: relation strings in id order.
      triples: int32 [m, 3] of (head, relation, tail) ids, duplicates removed, input order kept.
      csr_offsets: int64 [n + 1]; node ``v``'s incident triples are
        ``csr_triples[csr_offsets[v]:csr_offsets[v + 1]]``.
      csr_triples: int32 [2m - self_loops] incident triple ids (each triple listed under its head
        and its tail, once for a self-loop), sorted by triple id within a node.
    """

    entities: tuple[str, ...]
    relations: tuple[str, ...]
    triples: np.ndarray
    csr_offsets: np.ndarray
    csr_triples: np.ndarray
    entity_ids: dict[str, int] = dataclasses.field(repr=False)
    relation_ids: dict[str, int] = dataclasses.field(repr=False)

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_relations(self) -> int:
        return len(self.relations)

    @property
    def num_triples(self) -> int:
        return int(self.triples.shape[0])

    @property
    def degree(self) -> np.ndarray:
        return np.diff(self.csr_offsets)

    def incident(self, node: int) -> np.ndarray:
        """Triple ids touching ``node`` as head or tail."""
        return self.csr_triples[self.csr_offsets[node] : self.csr_offsets[node + 1]]

    def entity_id(self, name: str) -> int:
        try:
            return self.entity_ids[name]
        except KeyError:
            raise DataError(f"unknown entity {name!r}", fix="use the entity exactly as it appears in the KG") from None

    def triple_strings(self, triple_ids: Iterable[int]) -> list[Triple]:
        return [
            (self.entities[h], self.relations[r], self.entities[t])
            for h, r, t in self.triples[np.asarray(list(triple_ids), dtype=np.int64)]
        ]


def build_csr(triples: np.ndarray, num_entities: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected incidence of ``triples`` [m, 3] as (offsets [n+1], triple ids)."""
    m = triples.shape[0]
    ids = np.arange(m, dtype=np.int32)
    not_loop = triples[:, 0] != triples[:, 2]
    nodes = np.concatenate([triples[:, 0], triples[not_loop, 2]])
    owners = np.concatenate([ids, ids[not_loop]])
    order = np.lexsort((owners, nodes))
    counts = np.bincount(nodes, minlength=num_entities)
    offsets = np.zeros(num_entities + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, owners[order].astype(np.int32)


def build_index(triples: Iterable[Triple]) -> KGIndex:
    """Index string triples; ids follow first appearance, so the same input gives the same ids."""
    entity_ids: dict[str, int] = {}
    relation_ids: dict[str, int] = {}
    rows: dict[tuple[int, int, int], None] = {}
    for head, relation, tail in triples:
        h = entity_ids.setdefault(head, len(entity_ids))
        r = relation_ids.setdefault(relation, len(relation_ids))
        t = entity_ids.setdefault(tail, len(entity_ids))
        rows.setdefault((h, r, t), None)
    if not rows:
        raise DataError("the KG has no triples", fix="check the dataset path; an empty graph cannot be indexed")
    array = np.asarray(list(rows), dtype=np.int32).reshape(-1, 3)
    offsets, incident = build_csr(array, len(entity_ids))
    return KGIndex(
        entities=tuple(entity_ids),
        relations=tuple(relation_ids),
        triples=array,
        csr_offsets=offsets,
        csr_triples=incident,
        entity_ids=entity_ids,
        relation_ids=relation_ids,
    )


def serialize_triple(head: str, relation: str, tail: str) -> str:
    """The text the encoder sees for a triple: relation names read as words.

    ``/film/film/genre`` keeps its last segment; ``directed_by`` becomes ``directed by``.
    """
    rel = relation.rstrip("/").split("/")[-1].split(".")[-1]
    return f"{head} {rel.replace('_', ' ')} {tail}"


def relation_text(relation: str) -> str:
    """The text the encoder sees for a relation name."""
    return relation.rstrip("/").split("/")[-1].split(".")[-1].replace("_", " ")

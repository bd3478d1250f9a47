"""Integer KG index: string vocabularies, int32 triples and undirected CSR incidence."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping

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

    @functools.cached_property
    def fingerprint(self) -> str:
        """12 hex digits of sha256 over the triples as (head, relation, tail) strings. Computed once per
        index (the index is frozen; MetaQA's 128k triples take ~0.13 s, and caches and run folders key
        on it)."""
        digest = hashlib.sha256()
        for h, r, t in self.triples.tolist():
            digest.update(f"{self.entities[h]}\x1f{self.relations[r]}\x1f{self.entities[t]}\x1e".encode())
        return digest.hexdigest()[:12]

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


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def relation_text(relation: str, names: Mapping[str, str] | None = None) -> str:
    """The text the encoder sees for a relation: its readable name when ``names`` has one, else derived.

    Derivation from the identifier (a relation that already contains a space is a name and stays as is):

    * ``directed_by`` -> ``directed by`` (MetaQA; unchanged from earlier versions, so caches stay valid);
    * Freebase, dotted or slashed: the type and the property, ``film.film.directed_by`` and
      ``/film/film/directed_by`` -> ``film directed by`` (a compound such as
      ``/people/person/spouse_s./people/marriage/type_of_union`` keeps its last type: ``marriage type of union``);
      the type is dropped when the property repeats it (``film.film.film_format`` -> ``film format``);
    * a URI or a prefixed name: its fragment or last segment, ``http://dbpedia.org/ontology/director`` and
      ``dbo:director`` -> ``director``;
    * camelCase is split: ``directedBy`` -> ``directed by``.
    """
    if names and relation in names:
        return names[relation]
    text = relation.strip()
    if not text or any(c.isspace() for c in text):
        return text
    if "://" in text or (text.startswith("<") and text.endswith(">")):
        text = re.split(r"[/#]", text.strip("<>").rstrip("/#"))[-1]
    elif ":" in text:
        text = text.rsplit(":", 1)[-1]
    segments = [s for s in re.split(r"[./]+", text) if s] or [text]
    if len(segments) >= 2:
        kind, prop = segments[-2], segments[-1]
        text = prop if prop == kind or prop.startswith(kind + "_") else f"{kind}_{prop}"
    else:
        text = segments[0]
    if "_" not in text and _CAMEL_BOUNDARY.search(text):
        text = _CAMEL_BOUNDARY.sub(" ", text).lower()
    return text.replace("_", " ")

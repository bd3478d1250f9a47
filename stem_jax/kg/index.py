"""Integer KG index: string vocabularies, int32 triples and undirected CSR incidence."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import operator
from collections.abc import Iterable

import numpy as np

from stem_jax.data.types import Triple, relation_text  # noqa: F401  (relation_text: importers read it here too)
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
        index (the index is frozen, and caches and run folders key on it)."""
        digest = hashlib.sha256()
        entities, relations = self.entities, self.relations
        for lo in range(0, self.num_triples, 1 << 16):  # one update per block: the same bytes, fewer calls
            block = self.triples[lo : lo + (1 << 16)].tolist()
            digest.update("".join([f"{entities[h]}\x1f{relations[r]}\x1f{entities[t]}\x1e" for h, r, t in block]).encode())
        return digest.hexdigest()[:12]

    @functools.cached_property
    def relation_adjacency(self) -> RelationAdjacency:
        """Triples keyed by (entity, relation) per direction, built on first use (gold-path walks)."""
        return RelationAdjacency.build(self.triples, max(self.num_relations, 1))

    def incident(self, node: int) -> np.ndarray:
        """Triple ids touching ``node`` as head or tail."""
        return self.csr_triples[self.csr_offsets[node] : self.csr_offsets[node + 1]]

    def entity_id(self, name: str) -> int:
        try:
            return self.entity_ids[name]
        except KeyError:
            raise DataError(f"unknown entity {name!r}", fix="use the entity exactly as it appears in the KG") from None

    def triple_strings(self, triple_ids: Iterable[int]) -> list[Triple]:
        entities, relations = self.entities, self.relations
        ids = triple_ids if isinstance(triple_ids, np.ndarray) else list(triple_ids)
        return [(entities[h], relations[r], entities[t])
                for h, r, t in self.triples[np.asarray(ids, dtype=np.int64)].tolist()]


@dataclasses.dataclass(frozen=True)
class RelationAdjacency:
    """Triple ids sorted by ``entity * R + relation`` keyed by head (``forward``) and by tail (backward).

    A relation step from a frontier reads only that relation's triples at each frontier entity (two
    binary searches per entity), where the undirected CSR hands over every incident triple (a film's
    actors, writers, genres... to find its director). 24 bytes per triple; built lazily."""

    num_relations: int
    head_keys: np.ndarray  # int64 [m], ascending
    by_head: np.ndarray  # int32 [m] triple ids in head_keys order
    tail_keys: np.ndarray
    by_tail: np.ndarray

    @classmethod
    def build(cls, triples: np.ndarray, num_relations: int) -> RelationAdjacency:
        relation = triples[:, 1].astype(np.int64)
        keyed = []
        for column in (0, 2):
            keys = triples[:, column].astype(np.int64) * num_relations + relation
            order = np.argsort(keys, kind="stable")  # ties (parallel triples) keep triple-id order
            keyed += [keys[order], order.astype(np.int32)]
        return cls(num_relations, *keyed)

    def step(self, frontier: np.ndarray, relation: int, forward: bool) -> tuple[np.ndarray, np.ndarray]:
        """(triple ids, their source entity) of ``relation`` triples leaving ``frontier`` (unique ids) at the
        head (``forward``) or at the tail; grouped by source in ``frontier`` order."""
        ids, rows = self.step_rows(frontier, relation, forward)
        return ids, np.asarray(frontier)[rows]

    def step_rows(self, frontier: np.ndarray, relation: int, forward: bool) -> tuple[np.ndarray, np.ndarray]:
        """(triple ids, the position in ``frontier`` each leaves from) of ``relation`` triples leaving the
        entities of ``frontier`` at the head (``forward``) or at the tail, grouped by position. ``frontier``
        may repeat an entity (walks of several questions at once): each occurrence gets its triples."""
        keys, ids = (self.head_keys, self.by_head) if forward else (self.tail_keys, self.by_tail)
        wanted = np.asarray(frontier, dtype=np.int64) * self.num_relations + relation
        starts = np.searchsorted(keys, wanted, side="left")
        lengths = np.searchsorted(keys, wanted, side="right") - starts
        positions = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()))
        return ids[positions], np.repeat(np.arange(len(wanted)), lengths)


def build_csr(triples: np.ndarray, num_entities: int) -> tuple[np.ndarray, np.ndarray]:
    """Undirected incidence of ``triples`` [m, 3] as (offsets [n+1], triple ids).

    One int64 key per incidence, ``node * m + triple`` (unique: a self-loop is listed once), sorted:
    the sorted keys read back as triple ids grouped by node, ascending within a node.
    """
    m = triples.shape[0]
    not_loop = triples[:, 0] != triples[:, 2]
    ids = np.arange(m, dtype=np.int64)
    keys = np.concatenate([triples[:, 0].astype(np.int64) * m + ids,
                           triples[not_loop, 2].astype(np.int64) * m + ids[not_loop]])
    del ids
    keys.sort()
    counts = np.bincount(triples[:, 0], minlength=num_entities)
    counts += np.bincount(triples[not_loop, 2], minlength=num_entities)
    offsets = np.zeros(num_entities + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    np.remainder(keys, max(m, 1), out=keys)
    return offsets, keys.astype(np.int32)


_HEAD_TAIL = operator.itemgetter(0, 2)
_RELATION = operator.itemgetter(1)
_CHUNK = 1 << 18  # string triples read per chunk: bounds the transient Python objects


def _dense_ids(vocab: dict, first_positions: np.ndarray) -> tuple[dict, np.ndarray]:
    """Provisional ids (each name's first position in the stream) -> ids 0, 1, ... in that order.

    ``vocab`` maps each name to its first position; its insertion order is first appearance, so
    its values ascend and the dense id of a name is the rank of its first position.
    """
    starts = np.fromiter(vocab.values(), np.int64, len(vocab))
    table = np.zeros(int(starts[-1]) + 1 if len(starts) else 1, np.int32)
    table[starts] = np.arange(len(starts), dtype=np.int32)
    return dict(zip(vocab, range(len(vocab)), strict=False)), table[first_positions]


def _first_occurrences(rows: np.ndarray) -> np.ndarray | None:
    """Sorted row numbers of the first occurrence of each distinct (h, r, t) row; None if all are distinct."""
    n_e = int(max(rows[:, 0].max(), rows[:, 2].max())) + 1
    n_r = int(rows[:, 1].max()) + 1
    if n_e * n_e * n_r < 2**62:
        key = rows[:, 0].astype(np.int64)  # (h * n_r + r) * n_e + t, in place
        key *= n_r
        key += rows[:, 1]
        key *= n_e
        key += rows[:, 2]
        _, first = np.unique(key, return_index=True)  # index of each key's first occurrence
        del key
    else:  # ids too large to pack into one int64 key
        # stable: the earliest row leads each group of equal rows
        order = np.lexsort((rows[:, 2], rows[:, 1], rows[:, 0]))
        s = rows[order]
        starts = np.ones(len(order), bool)
        starts[1:] = np.any(s[1:] != s[:-1], axis=1)
        first = order[starts]
    if len(first) == len(rows):
        return None
    first.sort()
    return first


def build_index(triples: Iterable[Triple]) -> KGIndex:
    """Index string triples; ids follow first appearance, so the same input gives the same ids.

    Entities are numbered in the order h0, t0, h1, t1, ..., relations in order of appearance, and a
    repeated triple keeps its first position. The strings go through C-level passes only: each
    chunk of ``_CHUNK`` triples is mapped by ``dict.setdefault`` to the position where the name
    first appeared (one hash lookup per string, no per-triple Python object kept), and numpy turns
    those positions into dense ids, removes duplicate triples and builds the CSR by sorting. Beyond
    the int32 arrays and the two vocabularies, the peak is a few tens of bytes per triple.
    """
    entity_first: dict[str, int] = {}
    relation_first: dict[str, int] = {}
    entity_blocks: list[np.ndarray] = []
    relation_blocks: list[np.ndarray] = []
    rows = iter(triples)
    seen = 0
    while chunk := list(itertools.islice(rows, _CHUNK)):
        if set(map(len, chunk)) != {3}:
            bad = next(row for row in chunk if len(row) != 3)
            raise DataError(f"a KG triple must be (head, relation, tail), got {bad!r}",
                            fix="give every triple exactly three fields")
        size = len(chunk)
        width = np.int32 if 2 * (seen + size) < 2**31 else np.int64  # positions: 4 bytes while they fit
        names = itertools.chain.from_iterable(map(_HEAD_TAIL, chunk))  # h0, t0, h1, t1, ...
        entity_blocks.append(np.fromiter(map(entity_first.setdefault, names, itertools.count(2 * seen)),
                                         width, 2 * size))
        relation_blocks.append(np.fromiter(map(relation_first.setdefault, map(_RELATION, chunk),
                                               itertools.count(seen)), width, size))
        seen += size
        del chunk, names
    if not seen:
        raise DataError("the KG has no triples", fix="check the dataset path; an empty graph cannot be indexed")
    entity_ids, entity_col = _dense_ids(entity_first, np.concatenate(entity_blocks))
    del entity_first, entity_blocks
    relation_ids, relation_col = _dense_ids(relation_first, np.concatenate(relation_blocks))
    del relation_first, relation_blocks
    array = np.empty((seen, 3), np.int32)
    array[:, 0] = entity_col[0::2]
    array[:, 1] = relation_col
    array[:, 2] = entity_col[1::2]
    del entity_col, relation_col
    first = _first_occurrences(array)
    if first is not None:
        array = array[first]
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

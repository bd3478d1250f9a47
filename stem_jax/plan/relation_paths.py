"""The relation paths that really leave an entity in the KG: the candidate plans of the path planner.

For a topic entity, every path of up to ``max_hops`` steps that exists in the KG is listed with the
entities it ends at, in both orientations (a step ``r`` walks head -> tail, ``^r`` tail -> head). A
mediator node (:mod:`stem_jax.kg.mediators`, Freebase's CVTs) is walked *through*: a path that ends
only at mediators is not a candidate, its two-step continuations are (a CVT hop is one step of two
relations).

Fan-out is bounded twice, so a hub cannot blow up the enumeration:

* a one-step path reaching more than ``fan_cap`` entities is continued from its first ``fan_cap``
  entities only (by entity id, so the bound is deterministic); its own end set stays complete;
* an intermediate entity with more than ``hub_cap`` incident triples is not expanded (a path passes
  through a hub such as a country only by one of the hub's own few relations, which the hub's side
  of a one-step path already lists).

:func:`enumerate_paths` walks each hop in a few array passes over all the frontier's nodes at once;
:func:`enumerate_paths_reference` is the same walk written node by node, which the property test compares it
against. Enumeration per topic is cached (:class:`PathCatalog`, least recently used topics dropped past a bound
on the paths held), so a topic asked about twice costs one walk.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np

from stem_jax.data.types import PathStep
from stem_jax.kg.index import KGIndex

RelationPath = tuple[PathStep, ...]


@dataclasses.dataclass(frozen=True)
class CandidatePath:
    """One relation path from a topic and the entities it ends at (mediators and the topic left out)."""

    path: RelationPath
    ends: np.ndarray  # int32 entity ids, sorted, distinct

    @property
    def hops(self) -> int:
        return len(self.path)


def path_key(path: Sequence[PathStep]) -> str:
    """``film.film.directed_by`` forward, ``^people.person.spouse_s`` backward, joined by `` / ``."""
    return " / ".join(("" if s.forward else "^") + s.relation for s in path)


def _steps_from(index: KGIndex, nodes: np.ndarray, hub_cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source node, step code, target) of every triple at ``nodes``; step code = 2·relation + forward.

    Nodes with more than ``hub_cap`` incident triples are skipped (see the module docstring).
    """
    offsets, incident, triples = index.csr_offsets, index.csr_triples, index.triples
    sources, codes, targets = [], [], []
    for node in nodes.tolist():
        lo, hi = int(offsets[node]), int(offsets[node + 1])
        if hi - lo > hub_cap:
            continue
        rows = triples[incident[lo:hi]]
        heads, rels, tails = rows[:, 0], rows[:, 1].astype(np.int64), rows[:, 2]
        out = heads == node
        back = tails == node  # a self-loop is both
        sources.append(np.full(int(out.sum() + back.sum()), node, np.int64))
        codes.append(np.concatenate([rels[out] * 2 + 1, rels[back] * 2]))
        targets.append(np.concatenate([tails[out], heads[back]]).astype(np.int64))
    if not sources:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    return np.concatenate(sources), np.concatenate(codes), np.concatenate(targets)


def enumerate_paths_reference(index: KGIndex, topic: int, *, max_hops: int = 2, fan_cap: int = 64,
                              hub_cap: int = 2000, mediators: np.ndarray | None = None, max_paths: int = 4096
                              ) -> list[CandidatePath]:
    """:func:`enumerate_paths` written plainly: one prefix and one node at a time."""
    is_mediator = mediators if mediators is not None else np.zeros(index.num_entities, bool)
    found: list[CandidatePath] = []
    frontier: list[tuple[RelationPath, np.ndarray]] = [((), np.asarray([topic], np.int64))]
    for _ in range(max_hops):
        grown: list[tuple[RelationPath, np.ndarray]] = []
        for prefix, nodes in frontier:
            expand = nodes[:fan_cap] if prefix else nodes
            _, codes, targets = _steps_from(index, expand, hub_cap if prefix else max(hub_cap, len(index.triples)))
            keep = targets != topic
            codes, targets = codes[keep], targets[keep]
            if not len(codes):
                continue
            order = np.lexsort((targets, codes))
            codes, targets = codes[order], targets[order]
            starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
            for begin, end in zip(starts.tolist(), [*starts[1:].tolist(), len(codes)], strict=True):
                code = int(codes[begin])
                step = PathStep(index.relations[code // 2], bool(code % 2))
                ends = np.unique(targets[begin:end])
                path = (*prefix, step)
                grown.append((path, ends))
                answers = ends[~is_mediator[ends]]
                if len(answers):
                    found.append(CandidatePath(path, answers.astype(np.int32)))
        frontier = grown
        if len(found) >= max_paths:
            break
    found.sort(key=lambda c: (c.hops, path_key(c.path)))
    return found[:max_paths]


def enumerate_paths(index: KGIndex, topic: int, *, max_hops: int = 2, fan_cap: int = 64, hub_cap: int = 2000,
                    mediators: np.ndarray | None = None, max_paths: int = 4096) -> list[CandidatePath]:
    """The candidate paths of ``topic`` (see the module docstring), one-step paths first, then by key.

    ``max_paths`` caps the list (the first ones in that order); ``mediators`` is a bool mask over entities.
    Each hop is one gather of every frontier node's incident triples and one sort that groups them by
    (prefix, step), so the Python work is one object per path found.
    """
    is_mediator = mediators if mediators is not None else np.zeros(index.num_entities, bool)
    offsets = np.asarray(index.csr_offsets, np.int64)
    incident = np.asarray(index.csr_triples, np.int64)
    triples = np.asarray(index.triples, np.int64)
    relations = index.relations
    found: list[CandidatePath] = []
    prefixes: list[RelationPath] = [()]
    # the frontier as flat arrays: the prefix each node continues, and the node
    owner = np.zeros(1, np.int64)
    nodes = np.asarray([topic], np.int64)
    for hop in range(max_hops):
        if hop:  # a prefix continues from its first fan_cap ends (ends are sorted, so: by entity id)
            first = np.r_[0, np.flatnonzero(owner[1:] != owner[:-1]) + 1]
            rank = np.arange(len(owner)) - np.repeat(first, np.diff(np.r_[first, len(owner)]))
            keep = rank < fan_cap
            owner, nodes = owner[keep], nodes[keep]
        cap = hub_cap if hop else max(hub_cap, len(triples))
        degree = offsets[nodes + 1] - offsets[nodes]
        live = degree <= cap
        owner, nodes, degree = owner[live], nodes[live], degree[live]
        total = int(degree.sum())
        if not total:
            break
        at = np.repeat(np.arange(len(nodes)), degree)
        position = np.arange(total) - np.repeat(np.cumsum(degree) - degree, degree)
        rows = triples[incident[offsets[nodes][at] + position]]
        node, step_owner = nodes[at], owner[at]
        out, back = rows[:, 0] == node, rows[:, 2] == node  # a self-loop is both
        step_owner = np.concatenate([step_owner[out], step_owner[back]])
        codes = np.concatenate([rows[out, 1] * 2 + 1, rows[back, 1] * 2])
        targets = np.concatenate([rows[out, 2], rows[back, 0]])
        keep = targets != topic
        step_owner, codes, targets = step_owner[keep], codes[keep], targets[keep]
        if not len(codes):
            break
        order = np.lexsort((targets, codes, step_owner))
        step_owner, codes, targets = step_owner[order], codes[order], targets[order]
        distinct = np.r_[True, (step_owner[1:] != step_owner[:-1]) | (codes[1:] != codes[:-1])
                         | (targets[1:] != targets[:-1])]
        step_owner, codes, targets = step_owner[distinct], codes[distinct], targets[distinct]
        group = np.r_[True, (step_owner[1:] != step_owner[:-1]) | (codes[1:] != codes[:-1])]
        starts = np.flatnonzero(group)
        bounds = np.r_[starts, len(codes)]
        answer = ~is_mediator[targets]
        answers_before = np.r_[0, np.cumsum(answer)]
        grown: list[RelationPath] = []
        for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            code = int(codes[begin])
            path = (*prefixes[int(step_owner[begin])], PathStep(relations[code // 2], bool(code % 2)))
            grown.append(path)
            if answers_before[end] > answers_before[begin]:
                ends = targets[begin:end]
                found.append(CandidatePath(path, ends[answer[begin:end]].astype(np.int32)))
        prefixes = grown
        owner = np.cumsum(group) - 1
        nodes = targets
        if len(found) >= max_paths:
            break
    found.sort(key=lambda c: (c.hops, path_key(c.path)))
    return found[:max_paths]


def _pair_keys(heads: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """One uint64 per (head, tail) pair (a bijection for ids below 2**32)."""
    return (heads.astype(np.uint64) << np.uint64(32)) | tails.astype(np.uint64)


def mirrored_relations(index: KGIndex) -> dict[str, str]:
    """Relations stored twice, once each way: ``{mirror: kept}`` for every relation ``b`` whose triples are exactly
    another relation ``a``'s reversed (``plays_in_club_inverse`` beside ``plays_in_club``); the relation kept is
    the one with the shorter name (then the first in sort order).

    Walking ``b`` forward is walking ``a`` backward: the same step under two names, which a ranker that reads
    relation names and orientation sees as two different plans; :class:`PathCatalog` can leave the mirror out.
    """
    triples = np.asarray(index.triples, np.int64)
    if not len(triples):
        return {}
    order = np.argsort(triples[:, 1], kind="stable")
    rel = triples[order, 1]
    bounds = np.r_[0, np.flatnonzero(rel[1:] != rel[:-1]) + 1, len(rel)]
    forward: dict[int, np.ndarray] = {}
    groups: dict[tuple[int, int], list[int]] = {}  # (triple count, order-free checksum of reversed pairs)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        r = int(rel[lo])
        rows = triples[order[lo:hi]]
        forward[r] = np.sort(_pair_keys(rows[:, 0], rows[:, 2]))
        groups.setdefault((hi - lo, int(np.sort(_pair_keys(rows[:, 2], rows[:, 0])).sum(dtype=np.uint64))),
                          []).append(r)
    mirrors: dict[str, str] = {}
    for r, keys in forward.items():
        for other in groups.get((len(keys), int(keys.sum(dtype=np.uint64))), []):
            if other == r:  # a symmetric relation is its own mirror: nothing to leave out
                continue
            rows = triples[order[np.searchsorted(rel, other): np.searchsorted(rel, other, side="right")]]
            if not np.array_equal(keys, np.sort(_pair_keys(rows[:, 2], rows[:, 0]))):
                continue
            a, b = index.relations[r], index.relations[other]
            kept, mirror = sorted((a, b), key=lambda name: (len(name), name))
            if mirror not in mirrors and kept not in mirrors:
                mirrors[mirror] = kept
    return mirrors


CACHED_PATHS = 1 << 18  # candidate paths a catalog keeps (about 100-200 bytes each, plus its end set)


class PathCatalog:
    """Per-topic candidate paths, enumerated once and reused across calls (the planner asks per batch).

    The cache is bounded: past ``cached_paths`` paths held, the least recently asked topics are dropped (and
    enumerated again when asked again)."""

    def __init__(self, index: KGIndex, *, max_hops: int = 2, fan_cap: int = 64, hub_cap: int = 2000,
                 mediators: np.ndarray | None = None, max_paths: int = 4096, cached_paths: int = CACHED_PATHS,
                 skip_relations: Iterable[str] = ()) -> None:
        self.index = index
        # paths through these relations are left out (the mirrors of :func:`mirrored_relations`: the same walk is
        # listed under the kept relation's name)
        self.skip_relations = frozenset(skip_relations)
        self.options = dict(max_hops=max_hops, fan_cap=fan_cap, hub_cap=hub_cap, max_paths=max_paths)
        self.mediators = mediators
        self.cached_paths = cached_paths
        self._cache: OrderedDict[int, list[CandidatePath]] = OrderedDict()
        self._held = 0
        self.enumerated = 0  # topics walked (a topic dropped and asked again counts again)

    def paths(self, topic: int) -> list[CandidatePath]:
        found = self._cache.get(topic)
        if found is not None:
            self._cache.move_to_end(topic)
            return found
        found = enumerate_paths(self.index, topic, mediators=self.mediators, **self.options)
        if self.skip_relations:
            found = [c for c in found if not any(s.relation in self.skip_relations for s in c.path)]
        self.enumerated += 1
        self._cache[topic] = found
        self._held += len(found)
        while self._held > self.cached_paths and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._held -= len(dropped)
        return found

    def paths_of(self, topics: Iterable[int]) -> dict[int, list[CandidatePath]]:
        """Each distinct topic's paths, enumerated once however many questions share it."""
        return {t: self.paths(t) for t in dict.fromkeys(int(t) for t in topics)}

    def __len__(self) -> int:
        return len(self._cache)

"""Constraint branches: the relation paths by which a question's other entities meet its main path's answers.

A question with several conditions is a schema *graph*: a main relation path from one topic entity, and from each
other entity the question names a branch, a real relation path of that entity in the KG (1-2 steps, through
mediator nodes, either direction) that ends at the answer node, or one step that ends at a mediator (CVT) node on
the main path ("who played Jacob Black in Twilight": the film is tied to the performance node). The answers are what every chosen path reaches.
Enumeration is KG-constrained: a branch is offered only when it meets the main path's candidate answers.

:func:`evidence_bound` asks, per question, what the data allow: whether some such schema graph (a main path from
one topic plus at most one branch from each other topic) yields exactly the gold answer set, and the best answer-set
F1 any one does. Every result row can stand next to it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from stem_jax.data.answer_names import gold_entities
from stem_jax.data.types import PathStep
from stem_jax.kg.index import build_index
from stem_jax.kg.mediators import mediator_mask
from stem_jax.kg.paths import step_edges
from stem_jax.plan.oracle import schema_from_constraints
from stem_jax.plan.relation_paths import CandidatePath, PathCatalog, _steps_from, path_key
from stem_jax.plan.schema import SchemaGraph, Strategy

MAX_BRANCHES = 32  # branch options kept per other topic (the ones that narrow the main path's answers most usefully)

# The longest branch the planner offers, whatever the main path's length: a longer branch meets the answers through a
# shared neighbour (a genre, a time zone) that many wrong answers share too, so it states no condition of the question.
BRANCH_MAX_STEPS = 2


def set_f1(found: np.ndarray, gold: np.ndarray) -> float:
    """Answer-set F1 of sorted distinct ids ``found`` against sorted distinct ids ``gold`` (0 when either is
    empty)."""
    if not len(found) or not len(gold):
        return 0.0
    hits = len(np.intersect1d(found, gold, assume_unique=True))
    if not hits:
        return 0.0
    precision, recall = hits / len(found), hits / len(gold)
    return 2 * precision * recall / (precision + recall)


def meeting_branches(catalog: PathCatalog, topic: int, candidates: np.ndarray,
                     max_steps: int = BRANCH_MAX_STEPS) -> list[CandidatePath]:
    """The relation paths of ``topic`` (the catalog's, through mediators) of at most ``max_steps`` steps whose ends
    meet ``candidates`` (sorted ids), each with its ends cut to the candidates it keeps. Paths that keep every
    candidate (no condition) are left out, and paths keeping the same candidates are listed once (the first by
    key). The catalog's main paths may be longer than ``max_steps``."""
    out: list[CandidatePath] = []
    seen: set[bytes] = set()
    for path in catalog.paths(topic):
        if len(path.path) > max_steps:
            continue
        kept = np.intersect1d(path.ends, candidates, assume_unique=True)
        if not len(kept) or len(kept) == len(candidates):
            continue
        key = kept.tobytes()
        if key in seen:
            continue
        seen.add(key)
        out.append(CandidatePath(path.path, kept.astype(np.int32)))
    return out


@dataclasses.dataclass(frozen=True)
class MediatorBranch(CandidatePath):
    """A one-step branch that meets a mediator (CVT) node on the main path rather than its answer: "who played
    Jacob Black in Twilight" ties the film to the performance node between the character and the actor. ``ends``
    are the main path's answers reached through the mediators it keeps."""

    at: int = 1  # the main path's node it meets: after step ``at`` (1-based, before the last step)


def _walk(index, nodes: np.ndarray, steps: Sequence[PathStep]) -> np.ndarray:
    """The distinct nodes ``steps`` lead to from ``nodes``, each step walked in its own direction
    (:func:`~stem_jax.kg.paths.step_edges`, which reads only that relation's triples)."""
    nodes = np.unique(nodes)
    for step in steps:
        if not len(nodes):
            break
        _, _, targets = step_edges(index, nodes, index.relation_ids[step.relation], step.forward, directed=True)
        nodes = np.unique(targets)
    return nodes


def mediator_branches(catalog: PathCatalog, topic: int, path: Sequence[PathStep], other: int,
                      candidates: np.ndarray) -> list[MediatorBranch]:
    """The one-step branches of ``other`` that meet the mediator nodes ``path`` (from ``topic``) passes through,
    each with the answers the path reaches through the mediators it keeps; only those that narrow ``candidates``
    (the path's answers, sorted ids) to a non-empty part, one per distinct answer set."""
    index, mediators = catalog.index, catalog.mediators
    if mediators is None or len(path) < 2:
        return []
    # every triple of the other entity is read, as path enumeration reads a topic's (a hub is still a topic)
    _, codes, targets = _steps_from(index, np.asarray([other], np.int64), len(index.triples))
    if not len(codes):
        return []
    out: list[MediatorBranch] = []
    seen: set[bytes] = set()
    nodes = np.asarray([topic], np.int64)
    for at in range(1, len(path)):
        nodes = _walk(index, nodes, path[at - 1:at])
        middle = nodes[mediators[nodes]]
        if not len(middle):
            continue
        meets = np.isin(targets, middle)
        for code in np.unique(codes[meets]).tolist():
            kept = np.unique(targets[meets & (codes == code)])
            ends = _walk(index, kept, path[at:])
            ends = ends[(ends != topic) & ~mediators[ends]]
            ends = np.intersect1d(ends, candidates)
            if not len(ends) or len(ends) == len(candidates) or ends.tobytes() in seen:
                continue
            seen.add(ends.tobytes())
            step = PathStep(index.relations[code // 2], bool(code % 2))
            out.append(MediatorBranch((step,), ends.astype(np.int32), at))
    return out


def branch_options(catalog: PathCatalog, topic: int, path: Sequence[PathStep], other: int, candidates: np.ndarray,
                   max_steps: int = BRANCH_MAX_STEPS) -> list[CandidatePath]:
    """Every branch of ``other`` for the main ``path`` from ``topic`` with answers ``candidates``: those meeting
    the answers (:func:`meeting_branches`), then those meeting a mediator on the path (:func:`mediator_branches`)
    that keep other answers than any of the first kind do."""
    found = meeting_branches(catalog, other, candidates, max_steps)
    kept = {b.ends.tobytes() for b in found}
    return found + [b for b in mediator_branches(catalog, topic, path, other, candidates)
                    if b.ends.tobytes() not in kept]


@dataclasses.dataclass(frozen=True)
class EvidenceBound:
    """What the KG allows for one question.

    Attributes:
      exact: some schema graph (main path + branches) yields exactly the gold answers.
      best_f1: the best answer-set F1 any one yields (0.0 when none reaches a gold answer).
      main_topic: the KG id of the best graph's main topic (-1 when none).
      main_path: its main relation path (from the main topic to the answer).
      branches: (topic id, relation path from that topic, the main path's node it meets: 0 for the answer, else
        the mediator after that many steps) of each branch it uses.
      topics: how many of the question's topic entities are in the KG.
    """

    exact: bool
    best_f1: float
    main_topic: int = -1
    main_path: tuple[PathStep, ...] = ()
    branches: tuple[tuple[int, tuple[PathStep, ...], int], ...] = ()
    topics: int = 0

    def describe(self, entities: Sequence[str]) -> str:
        """``main-topic: path [+ topic: path ...]`` with entity names from ``entities`` (KG ids to names)."""
        if self.main_topic < 0:
            return ""
        parts = [f"{entities[self.main_topic]}: {path_key(self.main_path)}"]
        parts += [f"{entities[t]}: {path_key(p)}" + (f" (at step {at})" if at else "") for t, p, at in self.branches]
        return " + ".join(parts)

    def schema(self, name_of: Callable[[int], str], strategy: Strategy = "Breadth") -> SchemaGraph | None:
        """The best graph as a :class:`SchemaGraph` whose constants are named by ``name_of`` (None when none)."""
        if self.main_topic < 0:
            return None
        return schema_with_branches(name_of(self.main_topic), self.main_path,
                                    [(name_of(t), p, at) for t, p, at in self.branches], strategy)


def evidence_bound(topics: Sequence[int], gold: Sequence[int], catalog: PathCatalog, *,
                   max_branches: int = MAX_BRANCHES) -> EvidenceBound:
    """The :class:`EvidenceBound` of a question with KG topic ids ``topics`` and gold answer ids ``gold``.

    Every topic is tried as the main one; every catalog path of it that reaches a gold answer is a main path; each
    other topic adds one of its :func:`branch_options` (the ``max_branches`` that keep the most gold answers, then
    the fewest others) or none."""
    topics = list(dict.fromkeys(int(t) for t in topics if t >= 0))
    goal = np.unique(np.asarray(list(gold), np.int64))
    best = EvidenceBound(False, 0.0, topics=len(topics))
    if not topics or not len(goal):
        return best
    for main in topics:
        others = [t for t in topics if t != main]
        for candidate in catalog.paths(main):
            ends = candidate.ends.astype(np.int64)
            if not len(np.intersect1d(ends, goal, assume_unique=True)):
                continue
            options = []
            for other in others:
                offered = branch_options(catalog, main, candidate.path, other, ends, catalog.options["max_hops"])
                found = [(len(np.intersect1d(b.ends, goal, assume_unique=True)), b) for b in offered]
                found = sorted((item for item in found if item[0]), key=lambda item: (-item[0], len(item[1].ends)))
                options.append([None, *(b for _, b in found[:max_branches])])
            for choice in itertools.product(*options):
                kept = ends
                for branch in choice:
                    if branch is not None:
                        kept = np.intersect1d(kept, branch.ends, assume_unique=True)
                f1 = set_f1(kept, goal)
                if f1 > best.best_f1 + 1e-12:
                    used = tuple((t, b.path, getattr(b, "at", 0)) for t, b in zip(others, choice, strict=True)
                                 if b is not None)
                    best = EvidenceBound(bool(np.array_equal(kept, goal)), f1, main, candidate.path, used,
                                         len(topics))
                    if best.exact:
                        return best
    return best


def schema_with_branches(topic: str, path: Sequence[PathStep],
                         branches: Sequence[tuple[str, Sequence[PathStep]] | tuple[str, Sequence[PathStep], int]],
                         strategy: Strategy = "Precision") -> SchemaGraph:
    """The schema graph of a main path from ``topic`` and a branch from each other entity: the tree the tracer
    walks from ``topic`` and prunes to the bindings that reach every branch's entity
    (:func:`~stem_jax.plan.oracle.schema_from_constraints`). A branch ``(entity, path)`` meets the answer;
    ``(entity, path, at)`` meets the main path's node after step ``at`` (a mediator, :class:`MediatorBranch`; 0:
    the answer)."""
    return schema_from_constraints([(topic, tuple(path)), *((b[0], tuple(b[1]), *b[2:]) for b in branches)],
                                   strategy)


def evidence_bounds(dataset, *, max_hops: int = 2, index=None) -> dict[str, EvidenceBound]:
    """qid -> :class:`EvidenceBound` for every question of ``dataset`` (a :class:`~stem_jax.data.types.Dataset`);
    gold answers are matched to KG ids by id, else by normalised name; a question the loader dropped (no topic
    entity found) has no entry (it is a miss). ``max_hops``: the length of main paths and branches."""
    index = index if index is not None else build_index(dataset.triples)
    names = dataset.entity_names
    catalog = PathCatalog(index, max_hops=max_hops, mediators=mediator_mask(index.entities, names))
    golds = gold_entities(dataset.questions, index.entities, names)
    out = {}
    for question, gold in zip(dataset.questions, golds, strict=True):
        topics = [index.entity_ids.get(t, -1) for t in question.topic_entities]
        out[question.qid] = evidence_bound(topics, sorted(gold), catalog)
    return out


def bound_rows(dataset, bounds: dict[str, EvidenceBound], entities: Sequence[str]) -> list[dict]:
    """One row per question of ``dataset`` (its loaded questions, then the ones the loader dropped as misses):
    ``qid``, ``topics`` (its topic entities in the KG: the kind of question), ``exact``, ``best_f1`` (0 for a
    dropped one) and ``graph`` (:meth:`EvidenceBound.describe` with ``entities`` naming KG ids)."""
    rows = []
    for question in dataset.questions:
        found = bounds.get(question.qid, EvidenceBound(False, 0.0))
        rows.append({"qid": question.qid, "topics": len(question.topic_entities), "exact": found.exact,
                     "best_f1": round(found.best_f1, 4), "graph": found.describe(entities)})
    rows += [{"qid": qid, "topics": 0, "exact": False, "best_f1": 0.0, "graph": "",
              "dropped": reason} for qid, reason, _ in dataset.dropped]
    return rows


def bound_by_kind(rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Percent of ``rows`` (:func:`bound_rows`) with any gold answer within reach, the exact gold set, and the mean
    best F1, over all of them and by kind: ``several`` topic entities, ``one``, ``none`` (the loader found none:
    a miss)."""
    kinds = {"all": rows, "several": [r for r in rows if r["topics"] > 1],
             "one": [r for r in rows if r["topics"] == 1], "none": [r for r in rows if r["topics"] == 0]}
    return {kind: {"n": len(group),
                   "hit": 100 * sum(r["best_f1"] > 0 for r in group) / max(len(group), 1),
                   "exact": 100 * sum(r["exact"] for r in group) / max(len(group), 1),
                   "best_f1": 100 * sum(r["best_f1"] for r in group) / max(len(group), 1)}
            for kind, group in kinds.items() if group}

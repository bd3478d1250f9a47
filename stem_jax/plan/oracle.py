"""The oracle planner: a question's gold relation path turned into a schema graph.

Every other planner is measured against this upper bound: the oracle knows the relation path that
leads from the topic entity to the answers, so tracing its schema graph can only fail where the KG
itself lacks triples. Where the gold path comes from depends on the dataset:

* ``Question.gold_path`` (demo KG, FB15k-237): used as is.
* MetaQA: the question's ``qtype`` (``movie_to_director_to_movie``) is a chain of entity types;
  each adjacent type pair maps to one KB relation and direction via :data:`METAQA_RELATION_TABLE`,
  which was derived from the 1-hop dev questions (:func:`derive_metaqa_relation_table`).
* RoG (WebQSP / CWQ): no path is given, so the gold relation paths are the shortest relation paths
  from each question entity to each answer in the question's own graph
  (:func:`shortest_relation_paths`); there may be several, hence a beam larger than 1.

:func:`gold_path_triples` gives the KG triples on those paths that actually reach a gold answer:
the ground-truth reasoning path ``R`` of the paper's coverage rate (eq. 17).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat

import numpy as np

from stem_jax.data.types import Dataset, PathStep, Question, Triple
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, build_index
from stem_jax.kg.subgraph import sorted_unique
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, Strategy

RelationPath = tuple[PathStep, ...]

# ---------------------------------------------------------------------------------------------
# MetaQA qtypes -> relation paths
# ---------------------------------------------------------------------------------------------

_QTYPE_SEPARATOR = "_to_"

# Derived from MetaQA 1-hop dev (kb_PARTIAL_keallm_reconstruction.txt) by
# derive_metaqa_relation_table (tests/plan/test_oracle.py pins that function on a small KG).
# The majority is clear everywhere. The closest call is director_to_movie: 524 questions vote
# directed_by backward, 332 written_by backward (many directors also write their films).
METAQA_RELATION_TABLE: dict[str, PathStep] = {
    "actor_to_movie": PathStep("starred_actors", False),
    "director_to_movie": PathStep("directed_by", False),
    "movie_to_actor": PathStep("starred_actors", True),
    "movie_to_director": PathStep("directed_by", True),
    "movie_to_genre": PathStep("has_genre", True),
    "movie_to_imdbrating": PathStep("has_imdb_rating", True),
    "movie_to_imdbvotes": PathStep("has_imdb_votes", True),
    "movie_to_language": PathStep("in_language", True),
    "movie_to_tags": PathStep("has_tags", True),
    "movie_to_writer": PathStep("written_by", True),
    "movie_to_year": PathStep("release_year", True),
    "tag_to_movie": PathStep("has_tags", False),
    "writer_to_movie": PathStep("written_by", False),
}

# MetaQA spells the tag type "tags" after movie and "tag" before it; both name one entity type.
_TOKEN_ALIASES = {"tags": "tag"}


def _canonical(token: str) -> str:
    return _TOKEN_ALIASES.get(token, token)


def _pair_table(table: dict[str, PathStep]) -> dict[tuple[str, str], PathStep]:
    """(from type, to type) -> step, with each 1-hop pair's inverse added when MetaQA lacks it.

    ``genre_to_movie`` never occurs as a MetaQA qtype, but a user's own question file may use it;
    it is ``movie_to_genre`` walked backwards, so composing it is safe.
    """
    pairs: dict[tuple[str, str], PathStep] = {}
    for qtype, step in table.items():
        source, target = (_canonical(t) for t in qtype.split(_QTYPE_SEPARATOR))
        pairs[(source, target)] = step
    for (source, target), step in list(pairs.items()):
        pairs.setdefault((target, source), PathStep(step.relation, not step.forward))
    return pairs


_METAQA_PAIRS = _pair_table(METAQA_RELATION_TABLE)


def metaqa_gold_path(qtype: str, table: dict[str, PathStep] | None = None) -> RelationPath:
    """The relation path of a MetaQA qtype, composed from its 1-hop type pairs.

    ``movie_to_director_to_movie`` -> (directed_by forward, directed_by backward).

    Raises:
      StemError: the qtype is malformed, names an unknown entity type, or chains two types that
        no KB relation connects.
    """
    pairs = _METAQA_PAIRS if table is None else _pair_table(table)
    known = {t for pair in pairs for t in pair} | set(_TOKEN_ALIASES)
    tokens = qtype.strip().split(_QTYPE_SEPARATOR)
    if len(tokens) < 2 or not all(tokens):
        raise StemError(
            f"malformed MetaQA qtype {qtype!r}: expected entity types joined by '_to_', e.g. movie_to_director"
        )
    unknown = [t for t in tokens if t not in known]
    if unknown:
        raise StemError(
            f"unknown entity type {unknown[0]!r} in MetaQA qtype {qtype!r}; known types: {', '.join(sorted(known))}"
        )
    path = []
    for source, target in zip(tokens, tokens[1:], strict=False):
        step = pairs.get((_canonical(source), _canonical(target)))
        if step is None:
            raise StemError(
                f"no KB relation connects {source!r} to {target!r} in MetaQA qtype {qtype!r}; "
                "every hop must be a 1-hop qtype such as movie_to_director"
            )
        path.append(step)
    return tuple(path)


def derive_metaqa_relation_table(dataset_1hop_dev: Dataset | Iterable[Question], index: KGIndex) -> dict[str, PathStep]:
    """Map each 1-hop qtype to the (relation, direction) that links topic entities to their answers.

    Each question votes once for every (relation, direction) with at least one KB triple from its
    topic entity to one of its gold answers; the qtype takes the majority. Voting per question
    rather than per triple keeps questions with long answer lists (an actor's 40 films) from
    outweighing the rest. Ties break by relation name, then forward first, so the result is
    deterministic. Questions whose qtype has more than one hop are ignored.

    Raises:
      StemError: no 1-hop question connects to any answer (wrong file or KB).
    """
    questions = dataset_1hop_dev.questions if isinstance(dataset_1hop_dev, Dataset) else dataset_1hop_dev
    votes: dict[str, Counter[tuple[str, bool]]] = defaultdict(Counter)
    for question in questions:
        if not question.qtype or question.qtype.count(_QTYPE_SEPARATOR) != 1 or not question.topic_entities:
            continue
        topic = index.entity_ids.get(question.topic_entities[0])
        answers = [index.entity_ids[a] for a in question.answers if a in index.entity_ids]
        if topic is None or not answers:
            continue
        rows = index.triples[index.incident(topic)]
        forward = rows[:, 0] == topic
        other = np.where(forward, rows[:, 2], rows[:, 0])
        hit = np.isin(other, answers)
        for relation, fwd in set(zip(rows[hit, 1].tolist(), forward[hit].tolist(), strict=True)):
            votes[question.qtype][(index.relations[relation], bool(fwd))] += 1
    if not votes:
        raise StemError("no 1-hop question reaches a gold answer in one KB hop; pass MetaQA 1-hop questions and their KB")
    table = {}
    for qtype in sorted(votes):
        (relation, forward), _ = min(votes[qtype].items(), key=lambda kv: (-kv[1], kv[0][0], not kv[0][1]))
        table[qtype] = PathStep(relation, forward)
    return table


# ---------------------------------------------------------------------------------------------
# Path -> schema graph
# ---------------------------------------------------------------------------------------------


def strategy_for(answers: Sequence[str]) -> Strategy:
    """The paper's training rule (appendix C): one gold answer -> Precision, several -> Breadth."""
    return "Precision" if len(set(answers)) == 1 else "Breadth"


def schema_from_path(topic: str, path: Sequence[PathStep], strategy: Strategy = "Precision") -> SchemaGraph:
    """Chain ``topic -[r1]- [ENT1] -[r2]- [ENT2] ...``; the last placeholder is the answer.

    Each triple keeps the KB relation's orientation, so a backward step from ``prev`` to ``next``
    is written ``(next, r, prev)``: ``movie_to_director_to_movie`` from ``Kismet`` becomes
    ``(Kismet, directed_by, [ENT1]), ([ENT2], directed_by, [ENT1])`` with answer ``[ENT2]``.

    Raises:
      StemError: empty path.
    """
    if not path:
        raise StemError(f"cannot build a schema graph for {topic!r} from an empty relation path")
    triples = []
    previous = topic
    for i, step in enumerate(path, start=1):
        current = f"[ENT{i}]"
        head, tail = (previous, current) if step.forward else (current, previous)
        triples.append(SchemaTriple(head, step.relation, tail))
        previous = current
    return SchemaGraph(triples=tuple(triples), answer=previous, strategy=strategy)


def schema_from_constraints(constraints: Sequence[tuple[str, Sequence[PathStep]] | tuple[str, Sequence[PathStep], int]],
                            strategy: Strategy = "Precision") -> SchemaGraph:
    """One tree for a question with several topic entities: a chain from each topic, all ending at one answer.

    The first constraint is written as :func:`schema_from_path` writes a path; every other one is a
    chain from its topic whose intermediate nodes are new placeholders and whose last step meets the
    first chain's answer node. ``[("Club_X", [plays_in_club_inverse]), ("Forward", [plays_position_inverse])]``
    becomes ``(Club_X, plays_in_club_inverse, [ENT1]), (Forward, plays_position_inverse, [ENT1])``. A later
    constraint written ``(topic, path, at)`` meets the first chain's node after step ``at`` instead (0: the
    answer): a tie to a mediator on the way.

    Raises:
      StemError: no constraint, or one with an empty path.
    """
    if not constraints:
        raise StemError("cannot build a schema graph without constraints")
    first_topic, first_path = constraints[0][:2]
    schema = schema_from_path(first_topic, first_path, strategy)
    triples = list(schema.triples)
    answer = schema.answer
    counter = len(first_path)
    for topic, path, *at in constraints[1:]:
        if not path:
            raise StemError(f"cannot build a schema graph for {topic!r} from an empty relation path")
        meet = f"[ENT{at[0]}]" if at and 0 < at[0] < len(first_path) else answer
        previous = topic
        for i, step in enumerate(path):
            if i == len(path) - 1:
                current = meet
            else:
                counter += 1
                current = f"[ENT{counter}]"
            head, tail = (previous, current) if step.forward else (current, previous)
            triples.append(SchemaTriple(head, step.relation, tail))
            previous = current
    return SchemaGraph(triples=tuple(triples), answer=answer, strategy=strategy)


# ---------------------------------------------------------------------------------------------
# RoG: shortest relation paths in the question's graph
# ---------------------------------------------------------------------------------------------


def _path_key(path: RelationPath) -> list[tuple[str, bool]]:
    """Sort key for relation paths (PathStep is not orderable): relation names, forward first."""
    return [(step.relation, not step.forward) for step in path]


def shortest_relation_paths(
    graph: Iterable[Triple], source: str, targets: Iterable[str], *, max_hops: int = 4, max_paths: int = 8
) -> list[RelationPath]:
    """Distinct relation paths along shortest undirected walks from ``source`` to any of ``targets``.

    A breadth-first search over the graph, ignoring edge direction (RoG graphs hold each fact in
    one direction only, and questions walk them either way), gives each node its distance from
    ``source``; each node on a shortest-path layer then collects the relation paths that reach it
    along shortest walks. Relation paths, not entity paths, are kept because the schema graph
    only names relations; many entity walks share one relation path. Paths are distinct, sorted
    (shorter first, then by relation names) and at most ``max_paths``; each node keeps at most
    ``max_paths`` partial paths, which bounds the work on hub-heavy graphs. Each target counts at
    its own shortest distance, so a question whose answers lie 1 and 2 hops away gets both paths.
    Targets farther than ``max_hops`` or disconnected give nothing; so does a target equal to the
    source.
    """
    adjacency: dict[str, list[tuple[str, PathStep]]] = defaultdict(list)
    for head, relation, tail in graph:
        adjacency[head].append((tail, PathStep(relation, True)))
        if tail != head:
            adjacency[tail].append((head, PathStep(relation, False)))
    wanted = {t for t in targets if t in adjacency and t != source}
    if source not in adjacency or not wanted:
        return []
    distance = {source: 0}
    partial: dict[str, set[RelationPath]] = {source: {()}}
    found: set[RelationPath] = set()
    layer = [source]
    for depth in range(1, max_hops + 1):
        reached: dict[str, set[RelationPath]] = defaultdict(set)
        for node in layer:
            for neighbour, step in adjacency[node]:
                if distance.get(neighbour, depth) < depth:
                    continue  # already reached by a shorter walk: not on a shortest path
                distance[neighbour] = depth
                bucket = reached[neighbour]
                for prefix in sorted(partial[node], key=_path_key):
                    if len(bucket) >= max_paths:
                        break
                    bucket.add((*prefix, step))
        for node in wanted & reached.keys():
            found |= reached[node]
        wanted -= reached.keys()
        if not wanted or not reached:
            break
        partial = reached
        layer = sorted(reached)
    return sorted(found, key=lambda p: (len(p), _path_key(p)))[:max_paths]


# ---------------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)  # a few dozen qtypes, parsed once each (every eval record asks, twice)
def _cached_metaqa_path(qtype: str) -> RelationPath:
    return metaqa_gold_path(qtype)


@dataclasses.dataclass(frozen=True)
class GoldPaths:
    """A question's gold relation paths, each from a topic entity, or why there are none.

    ``source`` says where they came from: ``"gold_path"``, ``"qtype"``, ``"shortest"`` (RoG) or
    ``"constraints"`` (one path per topic entity, all meeting at the answer: a conjunctive question).
    """

    paths: tuple[tuple[str, RelationPath], ...]
    source: str | None = None
    reason: str | None = None


def gold_paths(question: Question, *, max_hops: int = 4, max_paths: int = 8) -> GoldPaths:
    """The gold relation paths of ``question`` (see the module docstring for the precedence).

    A MetaQA qtype or a stored gold path is returned even when the KG lacks the triples to walk it:
    the oracle's plan is right, the KG is incomplete, and tracing will show that.
    """
    if not question.topic_entities:
        return GoldPaths((), reason="question has no topic entity")
    topic = question.topic_entities[0]
    if question.constraints:
        return GoldPaths(tuple((t, tuple(p)) for t, p in question.constraints), source="constraints")
    if question.gold_path:
        return GoldPaths(((topic, tuple(question.gold_path)),), source="gold_path")
    if question.graph is not None:
        found = []
        for entity in dict.fromkeys(question.topic_entities):
            for path in shortest_relation_paths(
                question.graph, entity, question.answers, max_hops=max_hops, max_paths=max_paths
            ):
                found.append((entity, path))
        if not found:
            return GoldPaths((), reason=f"no answer within {max_hops} hops of a question entity in its graph")
        return GoldPaths(tuple(found[:max_paths]), source="shortest")
    if question.qtype:
        try:
            return GoldPaths(((topic, _cached_metaqa_path(question.qtype)),), source="qtype")
        except StemError as err:
            return GoldPaths((), reason=str(err))
    return GoldPaths((), reason="no gold path, MetaQA qtype or question graph to derive one from")


@dataclasses.dataclass(frozen=True)
class OraclePlanner:
    """Plans from gold relation paths: the upper bound for every learned or prompted planner.

    ``plan`` returns one schema graph per gold path: one for gold-path and MetaQA questions, up to
    ``max_paths`` for RoG questions whose answers several shortest relation paths reach (a beam
    larger than 1, as the paper's B candidate plans). Questions with no gold path (unknown qtype,
    answer unreachable within ``max_hops``) get ``[]``; :func:`gold_paths` says why, so callers
    can count them.
    """

    max_hops: int = 4
    max_paths: int = 8
    # entity id -> display name (a KG with opaque ids, entity_names.tsv): plans then name their constants
    # as the question and every other planner does (plan.base.display_named_schema)
    names: Mapping[str, str] | None = dataclasses.field(default=None, compare=False, hash=False)

    def plan(self, question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
        """Schema graphs for ``question``; ``index`` is unused (the oracle needs no KG lookups)."""
        del index  # same signature as the other planners; the gold paths never need the KG
        from stem_jax.plan.base import display_named_schema

        found = gold_paths(question, max_hops=self.max_hops, max_paths=self.max_paths)
        strategy = strategy_for(question.answers)
        if found.source == "constraints":
            schemas = [schema_from_constraints(found.paths, strategy)]
        else:
            schemas = [schema_from_path(topic, path, strategy) for topic, path in found.paths]
        return [display_named_schema(s, self.names) for s in schemas] if self.names else schemas


# ---------------------------------------------------------------------------------------------
# Gold evidence: triples on gold paths that reach an answer (coverage, paper eq. 17)
# ---------------------------------------------------------------------------------------------


def path_walk_triples(index: KGIndex, topic: int, path: Sequence[PathStep], answers: np.ndarray) -> np.ndarray:
    """Triple ids on walks of ``path`` from ``topic`` that end in one of ``answers``, sorted.

    Walks forward step by step as :func:`stem_jax.kg.paths.follow_relation_path` does (the topic is
    never an intermediate or final node, as in MetaQA), recording each step's triples with their
    source and target, then prunes backwards: a last-step triple is kept when its target is an
    answer, an earlier one when its target is the source of a kept triple one step later. A step reads
    the relation's triples through :class:`~stem_jax.kg.index.RelationAdjacency` (directed), as
    :func:`stem_jax.kg.paths.step_edges` does. One walk of :func:`path_walk_triples_many`.
    """
    return path_walk_triples_many(index, [topic], path, [answers])[0]


def path_walk_triples_many(index: KGIndex, topics: Sequence[int], path: Sequence[PathStep],
                           answers: Sequence[np.ndarray]) -> list[np.ndarray]:
    """:func:`path_walk_triples` for many walks of one relation path at once, one per (topic, answers).

    The walks' frontiers are kept together as (walk, entity) pairs, so each step is one batch of
    binary searches for all of them and each walk's triples, sources and targets stay tagged with
    their walk; the result of walk ``j`` is exactly ``path_walk_triples(index, topics[j], path,
    answers[j])`` (property-tested against it and against a scan of every triple)."""
    walks = len(topics)
    if walks == 0 or not path:
        return [np.zeros(0, np.int32) for _ in range(walks)]
    keys = _walk_keys(index, topics, path, [len(a) for a in answers],
                      np.concatenate([np.asarray(a, dtype=np.int64) for a in answers]))
    return _split_keys(keys, walks, index)


def _walk_keys(index: KGIndex, topics: Sequence[int], path: Sequence[PathStep], answer_counts: Sequence[int],
               answers: np.ndarray) -> np.ndarray:
    """The walks of :func:`path_walk_triples_many` (``answers``: every walk's answers in turn, ``answer_counts``
    of each) as sorted ``walk * num_triples + triple id`` keys, so batches of walks stay flat arrays."""
    walks = len(topics)
    none = np.zeros(0, np.int64)
    n_entities = max(index.num_entities, 1)
    topics = np.asarray(topics, dtype=np.int64)
    walk = np.arange(walks, dtype=np.int64)
    entity = topics
    adjacency = index.relation_adjacency
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (triple ids, walks, sources, targets)
    for step in path:
        relation = index.relation_ids.get(step.relation)
        if relation is None:
            return none
        ids, rows = adjacency.step_rows(entity, relation, step.forward)
        owner, source = walk[rows], entity[rows]
        target = index.triples[ids, 2 if step.forward else 0].astype(np.int64)
        keep = target != topics[owner]
        ids, owner, source, target = ids[keep], owner[keep], source[keep], target[keep]
        steps.append((ids, owner, source, target))
        pairs = sorted_unique(owner * n_entities + target)
        walk, entity = pairs // n_entities, pairs % n_entities
    wanted = sorted_unique(np.repeat(np.arange(walks, dtype=np.int64), answer_counts) * n_entities + answers)
    n_triples = max(index.num_triples, 1)
    kept: list[np.ndarray] = []
    for ids, owner, source, target in reversed(steps):
        on_path = _sorted_contains(wanted, owner * n_entities + target)
        kept.append(owner[on_path] * n_triples + ids[on_path])
        wanted = sorted_unique(owner[on_path] * n_entities + source[on_path])
    return sorted_unique(np.concatenate(kept))


def _sorted_contains(sorted_values: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``np.isin(queries, sorted_values)`` for ascending ``sorted_values`` (one binary search, no re-sort)."""
    if sorted_values.size == 0:
        return np.zeros(queries.shape, bool)
    at = np.minimum(np.searchsorted(sorted_values, queries), sorted_values.size - 1)
    return sorted_values[at] == queries


def gold_path_triples(question: Question, index: KGIndex, *, max_hops: int = 4, max_paths: int = 8) -> set[Triple]:
    """The ground-truth reasoning path ``R`` of ``question`` as (head, relation, tail) strings.

    The union over the question's gold paths (:func:`gold_paths`) of the KG triples on walks from
    the topic entity that reach a gold answer. RoG questions walk their own graph; all others walk
    ``index``. Empty when there is no gold path, the topic is not in the KG, or no walk reaches an
    answer; coverage callers should count such questions rather than score them.
    """
    found = gold_paths(question, max_hops=max_hops, max_paths=max_paths)
    if not found.paths:
        return set()
    kg = build_index(question.graph) if _walks_own_graph(question, found) else index
    return set(kg.triple_strings(_walk_gold_paths(kg, [(question, found)])[0]))


def gold_path_triple_ids(questions: Sequence[Question], index: KGIndex, *, max_hops: int = 4,
                         max_paths: int = 8) -> list[np.ndarray | None]:
    """:func:`gold_path_triples` of many questions as sorted triple ids of ``index``, walked together.

    Questions are grouped by gold relation path and each group walked at once
    (:func:`path_walk_triples_many`). ``None`` for a question whose ``R`` lies in its own graph (RoG's
    shortest paths), whose triples have no ids in ``index``: call :func:`gold_path_triples` for it.
    ``index`` deduplicates triples, so ids and (head, relation, tail) strings correspond one to one."""
    keys, own_graph = gold_path_triple_keys(questions, index, max_hops=max_hops, max_paths=max_paths)
    return [None if own else ids for ids, own in zip(_split_keys(keys, len(questions), index), own_graph, strict=True)]


def gold_path_triple_keys(questions: Sequence[Question], index: KGIndex, *, max_hops: int = 4,
                          max_paths: int = 8) -> tuple[np.ndarray, list[bool]]:
    """:func:`gold_path_triple_ids` as one sorted int64 array of ``position * max(index.num_triples, 1) + triple
    id`` keys (each question's ``R`` one run of it, ``position`` its place in ``questions``), and per question
    whether its ``R`` lies in its own graph instead (it has no keys): a batch's coverage is then array work."""
    own_graph: list[bool] = []
    todo: list[tuple[Question, GoldPaths]] = []
    places: list[int] = []
    for i, question in enumerate(questions):
        found = gold_paths(question, max_hops=max_hops, max_paths=max_paths)
        own = bool(found.paths) and _walks_own_graph(question, found)
        own_graph.append(own)
        if not own:
            todo.append((question, found))
            places.append(i)
    keys = _gold_keys(index, todo)
    n_triples = max(index.num_triples, 1)
    return np.asarray(places, dtype=np.int64)[keys // n_triples] * n_triples + keys % n_triples, own_graph


def _split_keys(keys: np.ndarray, count: int, kg: KGIndex) -> list[np.ndarray]:
    """Sorted ``position * num_triples + triple id`` keys -> int32 triple ids per position ``0 .. count - 1``."""
    n_triples = max(kg.num_triples, 1)
    bounds = np.searchsorted(keys // n_triples, np.arange(count + 1)).tolist()
    triple_ids = (keys % n_triples).astype(np.int32)
    return [triple_ids[bounds[i] : bounds[i + 1]] for i in range(count)]


def _walks_own_graph(question: Question, found: GoldPaths) -> bool:
    return question.graph is not None and found.source == "shortest"


def _walk_gold_paths(kg: KGIndex, questions: Sequence[tuple[Question, GoldPaths]]) -> list[np.ndarray]:
    """Sorted triple ids of ``R`` in ``kg`` per (question, its gold paths), the walks of each path batched."""
    return _split_keys(_gold_keys(kg, questions), len(questions), kg)


def _gold_keys(kg: KGIndex, questions: Sequence[tuple[Question, GoldPaths]]) -> np.ndarray:
    """``R`` of every (question, its gold paths) as sorted ``position * num_triples + triple id`` keys: one walk
    batch per relation path; the batch's answers are looked up in one pass and each walk's gathered by index."""
    entity_ids = kg.entity_ids
    sizes = [len(question.answers) for question, _ in questions]
    answer_ids = np.fromiter(map(entity_ids.get, chain.from_iterable(q.answers for q, _ in questions), repeat(-1)),
                             dtype=np.int64, count=sum(sizes))
    known = answer_ids >= 0
    answer_ids = answer_ids[known]
    counts = np.bincount(np.repeat(np.arange(len(questions)), sizes)[known], minlength=len(questions))
    starts = np.cumsum(counts) - counts
    has_answers = counts.astype(bool).tolist()
    jobs: dict[RelationPath, tuple[list[int], list[int]]] = {}  # path -> its walks' positions and topic ids
    for i, (_, found) in enumerate(questions):
        if not has_answers[i]:
            continue
        for topic, path in found.paths:
            if topic in entity_ids:
                positions, topics = jobs.setdefault(tuple(path), ([], []))
                positions.append(i)
                topics.append(entity_ids[topic])
    n_triples = max(kg.num_triples, 1)
    parts = [np.zeros(0, np.int64)]
    for path, (positions, topics) in jobs.items():
        owner = np.asarray(positions, dtype=np.int64)
        walk_counts = counts[owner]
        ends = np.cumsum(walk_counts)
        gather = np.arange(ends[-1]) + np.repeat(starts[owner] - (ends - walk_counts), walk_counts)
        keys = _walk_keys(kg, topics, path, walk_counts, answer_ids[gather])
        parts.append(owner[keys // n_triples] * n_triples + keys % n_triples)
    return sorted_unique(np.concatenate(parts))

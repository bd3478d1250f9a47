"""Step-level supervision for SCR from MetaQA's gold relation paths (eqs. 10-11).

The paper supervises each step with shortest paths from the topic to the answers. MetaQA gives
every question its gold relation path (through its qtype, :func:`stem_jax.plan.oracle.gold_paths`;
RoG data falls back to shortest relation paths there), whose walks from the topic reach exactly the answers
(:func:`stem_jax.kg.paths.follow_relation_path`), so we use those walks: they are shortest
paths in the question's intended sense, and unlike graph-distance shortest paths they never
shortcut through an unrelated relation (a 3-hop "movies that share actors, their directors"
answer is often also 1 hop away via ``directed_by``).

Walks are breadth-first and deterministic (:func:`walk_layers`): the layers of every walk along the
gold relations that ends on an answer are found once per question (a question with none is dropped
and counted, never silently), and a training walk is drawn inside them with a generator seeded by
(seed, step), so it cannot fail and a resumed run sees the same walks. Every edge counts: when a
pair of entities is joined by two relations (a director who also wrote the film), the neighbour is
a positive under either. A walk is teacher-forced: at step i on e_i (i < L), the positives are e_i's
candidates over the gold relation of hop i+1 that stay inside the next layer, neither visited nor
the topic; at step L the only positive is staying on e_L (the stop). Several positives at a step
(all actors of a film) are all correct, so the loss is the multi-positive form of InfoNCE:
-log Σ_pos P(e | q_i, e_i).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

import numpy as np

from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.methods.scr.graph import NeighbourTable
from stem_jax.plan.oracle import gold_paths


@dataclasses.dataclass(frozen=True)
class GoldSteps:
    """One question's usable gold path: topic id and wanted directed relation per hop."""

    question: int  # row in the question table
    topic: int
    relations: tuple[int, ...]  # directed relation ids in [0, 2R)
    answers: frozenset[int]
    layers: tuple[frozenset[int], ...] | None = None  # breadth-first walk layers (:func:`walk_layers`)


def gold_steps(questions: list[Question], index: KGIndex, skipped: Counter) -> list[GoldSteps]:
    """Questions with a gold path whose topic and relations are in the KG (others counted in ``skipped``)."""
    out = []
    r = index.num_relations
    for row, q in enumerate(questions):
        found = gold_paths(q)
        if not found.paths:
            skipped["no gold relation path"] += 1
            continue
        topic_name, path = found.paths[0]
        topic = index.entity_ids.get(topic_name)
        rels = [index.relation_ids.get(step.relation) for step in path]
        if topic is None or any(x is None for x in rels):
            skipped["topic or relation not in the KG"] += 1
            continue
        directed = tuple(int(x) + (0 if step.forward else r) for x, step in zip(rels, path, strict=True))
        answers = frozenset(index.entity_ids[a] for a in q.answers if a in index.entity_ids)
        out.append(GoldSteps(row, topic, directed, answers))
    return out


def next_over(neighbours: NeighbourTable, entities: Iterable[int], relation: int) -> set[int]:
    """Entities one directed ``relation`` edge away from any of ``entities`` (every edge of a pair counts)."""
    out: set[int] = set()
    for entity in entities:
        ents, rels, _ = neighbours.edges(int(entity))
        out.update(ents[rels == relation].tolist())
    return out


def walk_layers(gold: GoldSteps, neighbours: NeighbourTable) -> list[frozenset[int]] | None:
    """Breadth-first layers of the gold walks that end on an answer: layer i holds the entities reached at
    hop i from which the remaining gold relations still reach an answer (the topic never re-enters).

    Forward: every entity along the gold relations (over every edge, so a pair's second relation
    counts); backward: keep only those with a successor kept one layer on, starting from the answers
    (from every end entity when the question lists none). None when no walk reaches an answer."""
    layers: list[set[int]] = [{gold.topic}]
    for relation in gold.relations:
        layers.append(next_over(neighbours, layers[-1], relation) - {gold.topic})
        if not layers[-1]:
            return None
    if gold.answers:
        layers[-1] &= gold.answers
    for i in range(len(gold.relations) - 1, -1, -1):
        if not layers[i + 1]:
            return None
        keep = set()
        for entity in layers[i]:
            ents, rels, _ = neighbours.edges(entity)
            if layers[i + 1].intersection(ents[rels == gold.relations[i]].tolist()):
                keep.add(entity)
        layers[i] = keep
    return [frozenset(layer) for layer in layers] if layers[0] else None


def sample_walk(gold: GoldSteps, layers: list[frozenset[int]], neighbours: NeighbourTable, rng: np.random.Generator
                ) -> list[int] | None:
    """A walk e0..eL inside ``layers`` (no entity twice), the choice at each hop drawn with ``rng``.

    Depth-first over the shuffled (sorted, then permuted) options, so it fails only when every walk
    of the layers repeats an entity."""
    def extend(entities: list[int]) -> list[int] | None:
        i = len(entities) - 1
        if i == len(gold.relations):
            return entities
        options = sorted((next_over(neighbours, [entities[-1]], gold.relations[i]) & layers[i + 1]) - set(entities))
        for pick in rng.permutation(len(options)):
            found = extend(entities + [options[pick]])
            if found is not None:
                return found
        return None

    return extend([gold.topic])


def walkable(golds: list[GoldSteps], neighbours: NeighbourTable, *, max_steps: int, skipped: Counter
             ) -> list[GoldSteps]:
    """``golds`` with their breadth-first walk layers attached; every question dropped is counted in ``skipped``."""
    out = []
    for gold in golds:
        if len(gold.relations) >= max_steps:
            skipped["gold path longer than max_steps - 1"] += 1
            continue
        layers = walk_layers(gold, neighbours)
        if layers is None:
            skipped["gold relations reach no answer over the capped neighbour lists"] += 1
            continue
        out.append(dataclasses.replace(gold, layers=tuple(layers)))
    return out


@dataclasses.dataclass
class StepItems:
    """Teacher-forced reasoning steps, padded: one row per (question, step)."""

    question: np.ndarray  # int32 [I] row in the question-embedding table
    path_entities: np.ndarray  # int32 [I, T+1]
    path_relations: np.ndarray  # int32 [I, T]
    length: np.ndarray  # int32 [I]
    cand_entities: np.ndarray  # int32 [I, C]
    cand_relations: np.ndarray  # int32 [I, C] directed relation of each candidate (-1: stop, padding)
    cand_valid: np.ndarray  # bool [I, C]
    positive: np.ndarray  # bool [I, C]
    valid: np.ndarray  # bool [I]


def step_items(golds: list[GoldSteps], neighbours: NeighbourTable, rng: np.random.Generator, *, max_steps: int,
               rows: int, width: int | None = None, skipped: Counter | None = None) -> StepItems:
    """Items of all steps of ``golds``' walks, padded to ``rows`` rows (and a power-of-two candidate width).

    ``golds`` come from :func:`walkable` (layers attached). At step i on e_i (i < L) the positives are
    the candidates one gold-relation edge away that stay inside layer i+1 and are not visited (faithful
    SCR: the neighbour *entity*, whichever of the pair's relations the list names; relation-aware
    lists: the edge must carry the gold relation); at step L the stop slot is the positive."""
    skipped = Counter() if skipped is None else skipped
    items: list[tuple[int, list[int], list[int], int, set[int] | None, int]] = []  # pos None = stop step
    for gold in golds:
        layers = gold.layers if gold.layers is not None else walk_layers(gold, neighbours)
        entities = sample_walk(gold, layers, neighbours, rng) if layers is not None else None
        if entities is None:
            skipped["no walk along the gold path within the neighbour cap"] += 1
            continue
        relations = list(gold.relations)
        for i in range(len(relations) + 1):
            if i < len(relations):
                pos = (next_over(neighbours, [entities[i]], relations[i]) & layers[i + 1]) - set(entities[: i + 1])
                items.append((gold.question, entities[: i + 1], relations[:i], i, pos, relations[i]))
            else:
                items.append((gold.question, entities[: i + 1], relations[:i], i, None, -1))
    if len(items) > rows:
        skipped["steps beyond the batch rows"] += len(items) - rows
        items = items[:rows]
    current = np.asarray([it[1][-1] for it in items] + [-1] * (rows - len(items)), np.int64)
    cand_e, cand_r, _, cand_valid = neighbours.candidates(current, width)
    out = StepItems(np.zeros(rows, np.int32), np.full((rows, max_steps + 1), -1, np.int32),
                    np.full((rows, max_steps), -1, np.int32), np.zeros(rows, np.int32), cand_e, cand_r, cand_valid,
                    np.zeros(cand_e.shape, bool), np.zeros(rows, bool))
    for row, (question, entities, relations, i, pos, relation) in enumerate(items):
        out.question[row] = question
        out.path_entities[row, : len(entities)] = entities
        out.path_relations[row, : len(relations)] = relations
        out.length[row] = i
        if pos is None:
            out.positive[row, 0] = True
        else:
            hit = np.isin(cand_e[row, 1:], np.fromiter(pos, np.int64, len(pos))) & cand_valid[row, 1:]
            if neighbours.per_edge:
                hit &= cand_r[row, 1:] == relation
            out.positive[row, 1:] = hit
        out.valid[row] = out.positive[row].any()
    return out

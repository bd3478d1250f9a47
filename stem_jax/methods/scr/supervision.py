"""Step-level supervision for SCR from MetaQA's gold relation paths (eqs. 10-11).

The paper supervises each step with shortest paths from the topic to the answers. MetaQA gives
every question its gold relation path (through its qtype, :func:`stem_jax.plan.oracle.gold_paths`;
RoG data falls back to shortest relation paths there), whose walks from the topic reach exactly the answers
(:func:`stem_jax.kg.paths.follow_relation_path`), so we use those walks: they are shortest
paths in the question's intended sense, and unlike graph-distance shortest paths they never
shortcut through an unrelated relation (a 3-hop "movies that share actors, their directors"
answer is often also 1 hop away via ``directed_by``).

A training walk is teacher-forced: at step i on e_i (i < L), the positives are e_i's listed
neighbours over the gold relation of hop i+1 (in its direction), neither visited nor the topic;
one of them, drawn with a seeded generator, becomes e_{i+1}. At step L the only positive is
staying on e_L (the stop). Several positives at a step (all actors of a film) are all correct, so
the loss is the multi-positive form of InfoNCE: -log Σ_pos P(e | q_i, e_i).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

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


def positives(neighbours: NeighbourTable, entity: int, relation: int, visited: list[int], topic: int) -> np.ndarray:
    """Neighbour entities of ``entity`` over directed ``relation``, not visited and not the topic."""
    ents, rels, _ = neighbours.neighbours(entity)
    keep = (rels == relation) & ~np.isin(ents, visited) & (ents != topic)
    return ents[keep]


def sample_walk(gold: GoldSteps, neighbours: NeighbourTable, rng: np.random.Generator, tries: int = 4
                ) -> tuple[list[int], list[int]] | None:
    """A walk e0..eL along the gold relations ending on an answer (None: none found in ``tries``)."""
    for _ in range(tries):
        entities, ok = [gold.topic], True
        for relation in gold.relations:
            options = positives(neighbours, entities[-1], relation, entities, gold.topic)
            if options.size == 0:
                ok = False
                break
            entities.append(int(options[rng.integers(options.size)]))
        if ok and (not gold.answers or entities[-1] in gold.answers):
            return entities, list(gold.relations)
    return None


@dataclasses.dataclass
class StepItems:
    """Teacher-forced reasoning steps, padded: one row per (question, step)."""

    question: np.ndarray  # int32 [I] row in the question-embedding table
    path_entities: np.ndarray  # int32 [I, T+1]
    path_relations: np.ndarray  # int32 [I, T]
    length: np.ndarray  # int32 [I]
    cand_entities: np.ndarray  # int32 [I, C]
    cand_valid: np.ndarray  # bool [I, C]
    positive: np.ndarray  # bool [I, C]
    valid: np.ndarray  # bool [I]


def step_items(golds: list[GoldSteps], neighbours: NeighbourTable, rng: np.random.Generator, *, max_steps: int,
               rows: int, width: int | None = None, skipped: Counter | None = None) -> StepItems:
    """Items of all steps of ``golds``' walks, padded to ``rows`` rows (and a power-of-two candidate width)."""
    skipped = Counter() if skipped is None else skipped
    items: list[tuple[int, list[int], list[int], int, np.ndarray | None]] = []  # pos None = stop step
    for gold in golds:
        if len(gold.relations) >= max_steps:
            skipped["gold path longer than max_steps - 1"] += 1
            continue
        walk = sample_walk(gold, neighbours, rng)
        if walk is None:
            skipped["no walk along the gold path within the neighbour cap"] += 1
            continue
        entities, relations = walk
        for i in range(len(relations) + 1):
            if i < len(relations):
                pos = positives(neighbours, entities[i], relations[i], entities[: i + 1], gold.topic)
            else:
                pos = None
            items.append((gold.question, entities[: i + 1], relations[:i], i, pos))
    if len(items) > rows:
        skipped["steps beyond the batch rows"] += len(items) - rows
        items = items[:rows]
    current = np.asarray([e[-1] for _, e, _, _, _ in items] + [-1] * (rows - len(items)), np.int64)
    cand_e, _, _, cand_valid = neighbours.candidates(current, width)
    out = StepItems(np.zeros(rows, np.int32), np.full((rows, max_steps + 1), -1, np.int32),
                    np.full((rows, max_steps), -1, np.int32), np.zeros(rows, np.int32), cand_e, cand_valid,
                    np.zeros(cand_e.shape, bool), np.zeros(rows, bool))
    for row, (question, entities, relations, i, pos) in enumerate(items):
        out.question[row] = question
        out.path_entities[row, : len(entities)] = entities
        out.path_relations[row, : len(relations)] = relations
        out.length[row] = i
        if pos is None:
            out.positive[row, 0] = True
        else:
            out.positive[row, 1:] = np.isin(cand_e[row, 1:], pos) & cand_valid[row, 1:]
        out.valid[row] = out.positive[row].any()
    return out

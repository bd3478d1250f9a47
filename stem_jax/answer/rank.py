"""Merging the runs of one question (plans x anchors) into ranked answers and evidence.

:class:`ChunkAnswers` ranks the questions of a chunk together; :class:`stem_jax.answer.reference.QuestionAnswers`
is the same rules written plainly, one question and one binding at a time, which the property test compares it
against. Two rankings:

* ``"max"`` (the paper's): an entity's score is its best cumulative score S over all bindings of
  the answer placeholder, whatever plan produced it. Longer plans add more T-Scores, so a long
  wrong plan outranks a short right one when the planner's beam holds both.
* ``"beam"``: an entity's *support* is the summed probability of the distinct beams (plans) that
  bind it; ties go to its best *length-fair* score, the mean T-Score per step on its path
  ((S - S_anchor) / depth of the answer slot), then the entity id. With one beam (or the oracle)
  this orders exactly like ``"max"``; with B beams the first answer comes from the most probable
  plan unless other beams agree on another entity.

A beam only supports the entities it binds nearly as well as its best one: with ``gap`` finite, beam b
adds its probability to entity e only when e's length-fair score in b is within ``gap`` of the best
length-fair score b reached. Breadth admits any incident triple whose cosine passes θ, and when an
entity's name dominates a KG triple's text a triple of the wrong relation passes too (``what year was
[The Childhood of Maxim Gorky] released`` binds the film's writer through ``written_by``, about one
relation bonus below the ``release_year`` binding); without the gap such a binding collects the beam's
full probability and, with any other beam agreeing, outranks the right answer.

The answer set is cut to entities whose support is at least ``cut`` times the best support, so
answers that only a minority of the beam's probability mass produced do not dilute precision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from stem_jax.kg.subgraph import sorted_unique
from stem_jax.ragged import pad_ragged

RANKINGS = ("beam", "max")


def answer_depth(steps: np.ndarray, answer_slot: int) -> int:
    """Number of schema steps from the anchor (slot 0) to ``answer_slot`` (0 if unreachable)."""
    parent = {int(child): int(par) for par, child, _ in np.asarray(steps).reshape(-1, 3).tolist()}
    depth, slot = 0, answer_slot
    while slot > 0 and slot in parent and depth <= len(parent):
        slot, depth = parent[slot], depth + 1
    return depth if slot == 0 else 0


def answer_depths(steps: Sequence[np.ndarray], answer_slots: Sequence[int]) -> np.ndarray:
    """int64 [R]: :func:`answer_depth` of each (``steps[r]``, ``answer_slots[r]``), in array passes over all the plans.

    The plans are padded into one [R, S] table (a child listed twice keeps its last parent, as the dict does) and every
    run climbs one parent per pass, for as many passes as the longest plan has distinct children."""
    n = len(steps)
    slot = np.asarray(answer_slots, np.int64).reshape(n)
    if not n:
        return np.zeros(0, np.int64)
    table, live = pad_ragged([np.asarray(st).reshape(-1, 3) for st in steps], -1, np.int64, tail=(3,))  # [R, S, 3]
    width = table.shape[1]
    parent, child = table[..., 0], table[..., 1]
    # distinct children per plan (len of the reference's dict): a child counts at its last listing
    later = (child[:, :, None] == child[:, None, :]) & live[:, None, :] & np.triu(np.ones((width, width), bool), 1)
    n_parent = (live & ~later.any(2)).sum(1)
    # parent of each slot that can be climbed from (positive, within the largest slot named); -1: not listed
    size = int(max(child.max(initial=0), slot.max(initial=0))) + 1
    up = np.full((n, size), -1, np.int64)
    known = np.zeros((n, size), bool)
    rows_at = np.arange(n)
    for s in range(width):  # in listing order: a later listing of a child overwrites an earlier one
        ok = live[:, s] & (child[:, s] > 0)
        up[rows_at[ok], child[ok, s]] = parent[ok, s]
        known[rows_at[ok], child[ok, s]] = True
    depth = np.zeros(n, np.int64)
    for _ in range(width + 1):  # the reference stops once depth exceeds the number of children
        at = np.clip(slot, 0, size - 1)
        step = (slot > 0) & (slot < size) & known[rows_at, at] & (depth <= n_parent)
        if not step.any():
            break
        slot = np.where(step, up[rows_at, at], slot)
        depth += step
    return np.where(slot == 0, depth, 0)


class ChunkAnswers:
    """The answers of many questions at once: runs are collected as arrays, then every question is ranked
    in a few numpy passes (no per-binding Python), bit for bit as the plain reference
    :class:`~stem_jax.answer.reference.QuestionAnswers` ranks each question alone.

    The beam rule's support is a float sum, so it is added in the order the reference adds it: for
    each (question, entity), the beams in the order they first bound the entity (``tests/answer/test_rank_chunk.py``
    compares both on random runs)."""

    def __init__(self, n_questions: int) -> None:
        self.n_questions = n_questions
        self.overflow = np.zeros(n_questions, np.int64)
        self._nodes: list[np.ndarray] = []  # answer-slot bindings per run that has an answer slot
        self._scores: list[np.ndarray] = []
        self._run_meta: list[tuple[int, int, float, float, int]] = []  # question, beam, prob, anchor score, depth
        self._via: list[np.ndarray] = []
        self._via_question: list[int] = []

    def add_run(self, question: int, nodes: np.ndarray, scores: np.ndarray, via: np.ndarray, answer_slot: int,
                overflow: int, *, beam: int = 0, beam_prob: float = 1.0, depth: int = 1) -> None:
        """One traced run of question ``question`` ([slots, F] arrays, -1 where empty); as
        the reference's ``add_run``, with exclusions given to :meth:`ranked`."""
        self.overflow[question] += int(overflow)
        self._via.append(via.reshape(-1))
        self._via_question.append(question)
        if answer_slot < 0:
            return
        self._nodes.append(nodes[answer_slot])
        self._scores.append(scores[answer_slot])
        self._run_meta.append((question, beam, float(beam_prob), float(scores[0, 0]), max(depth, 1)))

    def add_runs(self, question: Sequence[int], nodes: Sequence[np.ndarray], scores: Sequence[np.ndarray],
                 via: Sequence[np.ndarray], answer_slot: Sequence[int], overflow: Sequence[int], *,
                 beam: Sequence[int], beam_prob: Sequence[float], depth: Sequence[int]) -> None:
        """Many runs at once, as :meth:`add_run` of each in order: the run fields as sequences of equal length."""
        question, slots = [int(q) for q in question], [int(a) for a in answer_slot]
        np.add.at(self.overflow, np.asarray(question, np.int64), np.asarray(overflow, np.int64).reshape(len(question)))
        self._via.extend([v.reshape(-1) for v in via])
        self._via_question.extend(question)
        kept = [r for r, a in enumerate(slots) if a >= 0]
        self._nodes.extend([nodes[r][slots[r]] for r in kept])
        self._scores.extend([scores[r][slots[r]] for r in kept])
        # .item(0) is element [0, 0] of a [slots, F] array, as a Python float (what float(scores[r][0, 0]) gives)
        self._run_meta.extend([(question[r], beam[r], float(beam_prob[r]), scores[r].item(0), max(depth[r], 1))
                               for r in kept])

    def answer_runs(self) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """What :meth:`ranked` ranks, for another ranker (``kernels/answers.py``): per run with an answer slot its
        bindings there and their scores, in insertion order, and float64 [R, 5] (question, beam, probability,
        anchor score, depth >= 1) per run."""
        return self._nodes, self._scores, np.asarray(self._run_meta, np.float64).reshape(-1, 5)

    def evidence(self) -> list[list[int]]:
        """Per question, its runs' bound triple ids, ascending and distinct."""
        if not self._via:
            return [[] for _ in range(self.n_questions)]
        sizes = np.fromiter(map(len, self._via), np.int64, len(self._via))
        triple = np.concatenate(self._via)
        live = triple >= 0
        question = np.repeat(np.asarray(self._via_question, np.int64), sizes)[live]
        triple = triple[live].astype(np.int64)
        span = int(triple.max(initial=0)) + 1
        keys = sorted_unique(question * span + triple)
        bounds = np.searchsorted(keys // span, np.arange(self.n_questions + 1))
        triples = (keys % span).tolist()
        return [triples[bounds[q] : bounds[q + 1]] for q in range(self.n_questions)]

    def ranked(self, rule: str = "max", cut: float = 0.0, gap: float | Sequence[float] = math.inf,
               exclude: Iterable[tuple[int, int]] = (), never: np.ndarray | None = None) -> list[list[tuple[int, float]]]:
        """Per question, its runs ranked as the reference's ``ranked`` does; ``gap`` is one for all questions or one
        per question, ``exclude`` holds (question, entity) pairs never returned (the questions' topic
        entities), and ``never`` is a bool mask over entities never returned for any question (mediators)."""
        if rule not in RANKINGS:
            raise ValueError(f"unknown answer ranking {rule!r}; use one of {', '.join(RANKINGS)}")
        out: list[list[tuple[int, float]]] = [[] for _ in range(self.n_questions)]
        if not self._nodes:
            return out
        sizes = np.fromiter(map(len, self._nodes), np.int64, len(self._nodes))
        meta = np.asarray(self._run_meta, np.float64)  # question, beam, prob, anchor score, depth per run
        # empty slots (most of a Breadth run's width) are dropped before any other pass over the bindings
        entity = np.concatenate(self._nodes)
        live = entity >= 0
        if never is not None:
            live &= ~never[np.maximum(entity, 0)]
        run = np.repeat(np.arange(len(sizes)), sizes)[live]
        entity = entity[live].astype(np.int64)
        score = np.concatenate(self._scores)[live].astype(np.float64)
        question = meta[run, 0].astype(np.int64)
        span = int(entity.max(initial=0)) + 1  # above every live entity: the pair keys below stay distinct
        pair = question * span + entity  # (question, entity) key
        excluded = sorted_unique(np.fromiter((q * span + e for q, e in exclude if 0 <= e < span), np.int64))
        if excluded.size:  # a few per question: binary search beats np.isin's sort of every binding
            keep = excluded[np.minimum(np.searchsorted(excluded, pair), excluded.size - 1)] != pair
            run, entity, score, question, pair = run[keep], entity[keep], score[keep], question[keep], pair[keep]
        if not len(pair):
            return out
        # One stable sort groups the bindings by (question, entity[, beam]); a stable sort keeps each group in
        # insertion order, so its first element is where the group was first bound. The input comes grouped by
        # question already, which the sort's merge of presorted runs makes cheap.
        if rule == "max":
            order = np.argsort(pair, kind="stable")
            pair = pair[order]
            starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
            keys, value, tie = pair[starts], np.maximum.reduceat(score[order], starts), np.zeros(len(starts))
        else:
            fair = (score - meta[run, 3]) / meta[run, 4]  # float64, as the reference's Python floats
            beam = meta[run, 1].astype(np.int64)
            n_beams = int(beam.max()) + 1
            key = pair * n_beams + beam
            order = np.argsort(key, kind="stable")
            key = key[order]
            starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])  # one (question, entity, beam) each
            first = order[starts]  # where each was first bound
            beam_fair = np.maximum.reduceat(fair[order], starts)
            support = np.maximum(np.maximum.reduceat(meta[run[order], 2], starts), 0.0)  # the reference starts at 0.0
            grouped, grouped_beam = key[starts] // n_beams, key[starts] % n_beams
            beam_of = grouped // span * n_beams + grouped_beam  # (question, beam)
            best = np.full(self.n_questions * n_beams, -np.inf)
            np.maximum.at(best, beam_of, beam_fair)
            gaps = np.broadcast_to(np.asarray(gap, np.float64), (self.n_questions,))
            counts = np.where(beam_fair >= best[beam_of] - gaps[beam_of // n_beams], support, 0.0)
            is_start = np.r_[True, grouped[1:] != grouped[:-1]]
            pair_starts = np.flatnonzero(is_start)  # one (question, entity) each, its beams contiguous
            owner_of = np.cumsum(is_start) - 1
            # the reference sums a float per beam in first-binding order: each beam's position in that order
            # (x + 0.0 is x, so a beam outside the gap adds 0.0 where the reference skips it)
            position = np.zeros(len(starts), np.int64)
            for shift in range(1, n_beams):  # a pair's beams lie within n_beams of each other
                position[shift:] += (owner_of[shift:] == owner_of[:-shift]) & (first[:-shift] < first[shift:])
                position[:-shift] += (owner_of[:-shift] == owner_of[shift:]) & (first[shift:] < first[:-shift])
            value = np.zeros(len(pair_starts))
            for k in range(int(position.max()) + 1):
                at = np.flatnonzero(position == k)
                value[owner_of[at]] += counts[at]
            keys, tie = grouped[pair_starts], np.maximum.reduceat(beam_fair, pair_starts)
        owner, ent = keys // span, keys % span
        order = np.lexsort((ent, -tie, -value, owner))
        owner, ent, value = owner[order], ent[order], value[order]
        bounds = np.searchsorted(owner, np.arange(self.n_questions + 1))
        if rule == "beam" and cut > 0:
            # float noise must not split a tie: beams with equal probabilities give equal support
            top = value[np.minimum(bounds[:-1], len(value) - 1)]
            keep = value >= (cut * top - 1e-9)[owner]
            owner, ent, value = owner[keep], ent[keep], value[keep]
            bounds = np.searchsorted(owner, np.arange(self.n_questions + 1))
        pairs = list(zip(ent.tolist(), value.tolist(), strict=True))
        for q in np.flatnonzero(np.diff(bounds)).tolist():
            out[q] = pairs[bounds[q] : bounds[q + 1]]
        return out

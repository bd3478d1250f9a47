"""Answer ranking in one compiled call: the runs of many questions merged into each question's ranked answers.

:func:`rank_answers` is :meth:`stem_jax.answer.rank.ChunkAnswers.ranked` as a jitted kernel over padded arrays
(static shapes, segment ops and sorts; no loop over runs or bindings): from every run's answer-slot bindings it
gives, per question, the first ``k`` answer ids with their scores, the same entities in the same order and, for
both rankings, the same float64 scores bit for bit. The rules (``"max"``, ``"beam"`` with its gap and cut,
length-fair ties, entity-id ties, excluded topic entities and mediators) are described in
:mod:`stem_jax.answer.rank`; :class:`stem_jax.answer.reference.QuestionAnswers` is their plain reference, which
``tests/kernels/test_kernels_answers.py`` compares this kernel against on random runs.

Exactness needs float64: the host ranks in float64 (the length-fair score ``(S - S_anchor) / depth`` and the
beam support, a sum of beam probabilities added in the order the beams first bound the entity), so
:func:`rank_answers` runs under ``jax.enable_x64`` and adds each entity's beams in that same order (one
segment sum per position, each with one non-zero term per entity, so the result does not depend on how a
segment sum orders its terms). :func:`pack_runs` pads the host-side runs to power-of-two buckets, so a split
compiles a handful of shapes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

RULES = ("beam", "max")
ENTITY_SPAN = 1 << 31  # above every int32 entity id: (question, entity[, beam]) packs into one int64 sort key
CUT_SLACK = 1e-9  # what ChunkAnswers subtracts from the cut so float noise does not split a tie


class AnswerRuns(NamedTuple):
    """The runs of a chunk as padded host arrays (:func:`pack_runs`); N bindings, R runs, Q questions.

    The bindings are a flat list in insertion order (run by run, each run's in slot order), each with its run: the
    tracer's [R, F] answer-slot rows flattened, or (what :func:`pack_runs` gives) only their live entries."""

    nodes: np.ndarray  # int32 [N] answer-slot bindings, -1 where empty (padding)
    scores: np.ndarray  # float32 [N] their cumulative scores S
    run: np.ndarray  # int32 [N] the run of each binding (0 for padding)
    question: np.ndarray  # int32 [R] question of each run (-1: padding)
    beam: np.ndarray  # int32 [R] the run's plan's position in the planner's beam
    beam_prob: np.ndarray  # float64 [R] that plan's probability
    anchor_score: np.ndarray  # float32 [R] S of the anchor (the run's scores[0, 0])
    depth: np.ndarray  # int32 [R] schema steps from the anchor to the answer slot (at least 1)
    gap: np.ndarray  # float64 [Q] the beam gap of each question
    exclude: np.ndarray  # int32 [Q, X] entities never returned for the question (its topic entities), -1 padded


class RankedAnswers(NamedTuple):
    """Per question its first ``k`` answers: ids (-1 padded), scores (0 padded) and how many it has in all."""

    ids: np.ndarray  # int32 [Q, k]
    scores: np.ndarray  # float64 [Q, k]
    count: np.ndarray  # int32 [Q]: answers after the cut; above k, only the first k are in ids/scores


def _bucket(n: int, least: int = 1) -> int:
    """The power of two at or above ``max(n, least)``: the padded size, so new sizes compile rarely."""
    return 1 << (max(n, least) - 1).bit_length()


def pack_runs(n_questions: int, nodes: Sequence[np.ndarray], scores: Sequence[np.ndarray],
              meta: np.ndarray, gap: float | Sequence[float] = math.inf,
              exclude: Iterable[tuple[int, int]] = (), *, min_runs: int = 4, min_bindings: int = 64,
              min_questions: int = 1) -> AnswerRuns:
    """Pad a chunk's answer-slot bindings for :func:`rank_answers`.

    ``nodes``/``scores``: per run with an answer slot, its bindings there ([F_r] each, in chunk order);
    ``meta``: float64 [R, 5] per run (question, beam, probability, anchor score, depth >= 1), as
    :meth:`stem_jax.answer.rank.ChunkAnswers.answer_runs` gives them; ``gap`` one for all questions or one per
    question; ``exclude`` (question, entity) pairs never returned. Only live bindings are kept (most of a
    Breadth run's width is empty), in order. Bindings, runs, questions and exclusions per question are padded to
    powers of two (at least ``min_bindings``, ``min_runs``, ``min_questions``: a caller that knows its largest sizes
    compiles one shape)."""
    n_runs = len(nodes)
    rows = _bucket(n_runs, min_runs)
    n_q = _bucket(n_questions, min_questions)
    flat_nodes = np.concatenate(nodes) if n_runs else np.zeros(0, np.int32)
    live = flat_nodes >= 0
    n_live = int(live.sum())
    size = _bucket(n_live, min_bindings)
    out_nodes = np.full(size, -1, np.int32)
    out_scores = np.full(size, -np.inf, np.float32)
    out_run = np.zeros(size, np.int32)
    if n_live:
        out_nodes[:n_live] = flat_nodes[live]
        out_scores[:n_live] = np.concatenate(scores)[live]
        out_run[:n_live] = np.repeat(np.arange(n_runs, dtype=np.int32), np.fromiter(map(len, nodes), np.int64, n_runs))[live]
    meta = np.asarray(meta, np.float64).reshape(n_runs, 5)
    question = np.full(rows, -1, np.int32)
    beam = np.zeros(rows, np.int32)
    prob = np.zeros(rows, np.float64)
    anchor = np.zeros(rows, np.float32)
    depth = np.ones(rows, np.int32)
    question[:n_runs], beam[:n_runs], prob[:n_runs] = meta[:, 0], meta[:, 1], meta[:, 2]
    anchor[:n_runs], depth[:n_runs] = meta[:, 3], meta[:, 4]  # anchor scores are float32 values held in float64
    gaps = np.full(n_q, math.inf)
    gaps[:n_questions] = np.broadcast_to(np.asarray(gap, np.float64), (n_questions,))
    per_question: list[list[int]] = [[] for _ in range(n_questions)]
    for q, e in exclude:
        per_question[q].append(int(e))
    excluded = np.full((n_q, _bucket(max(map(len, per_question), default=1))), -1, np.int32)
    for q, ents in enumerate(per_question):
        excluded[q, : len(ents)] = ents
    return AnswerRuns(out_nodes, out_scores, out_run, question, beam, prob, anchor, depth, gaps, excluded)


def _shift(x: jax.Array, by: int, fill) -> jax.Array:
    """``x`` moved ``by`` places (positive: towards higher indices), ``fill`` where nothing moved in."""
    pad = jnp.full((abs(by),), fill, x.dtype)
    return jnp.concatenate([pad, x[:-by]]) if by > 0 else jnp.concatenate([x[-by:], pad])


def _key(x: jax.Array) -> jax.Array:
    """``-x`` as a sort key that sorts -0.0 with 0.0 (lax.sort orders floats totally, -0.0 first)."""
    return jnp.where(x == 0, jnp.zeros_like(x), -x)


def _starts(*keys: jax.Array) -> jax.Array:
    """bool [N]: where the tuple of sorted ``keys`` differs from the entry before (a new group)."""
    differs = jnp.zeros(keys[0].shape, bool).at[0].set(True)
    for key in keys:
        differs = differs | (key != _shift(key, 1, key[0]))
    return differs


@functools.partial(jax.jit, static_argnames=("n_questions", "rule", "k", "n_beams"))
def _rank(runs: AnswerRuns, never: jax.Array, cut: jax.Array, *, n_questions: int, rule: str, k: int,
          n_beams: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    n = runs.nodes.shape[0]
    q_pad = runs.gap.shape[0]
    dead_q = q_pad  # the question key of dead entries: after every question
    entity, run = runs.nodes, runs.run
    question = runs.question[run]
    live = (entity >= 0) & (question >= 0) & (question < n_questions)
    safe_e = jnp.maximum(entity, 0)
    live &= ~never[jnp.minimum(safe_e, never.shape[0] - 1)] | (safe_e >= never.shape[0])
    safe_q = jnp.clip(question, 0, q_pad - 1)
    live &= ~(runs.exclude[safe_q] == entity[:, None]).any(1)
    score = runs.scores.astype(jnp.float64)
    fair = (score - runs.anchor_score[run].astype(jnp.float64)) / jnp.maximum(runs.depth[run], 1).astype(jnp.float64)
    beam = jnp.where(live, runs.beam[run], 0)
    prob = runs.beam_prob[run]
    # (question, entity) as one int64 key (entity ids are int32): one-key sorts are the cheap ones
    pair_key = jnp.where(live, question, dead_q).astype(jnp.int64) * ENTITY_SPAN + jnp.where(live, entity, 0)
    slot = jnp.arange(n, dtype=jnp.int32)  # insertion order (run-major): what "first bound" means
    positions = jnp.arange(n, dtype=jnp.int32)
    if rule == "max":
        key_s, s_s = jax.lax.sort((pair_key, score), num_keys=1, is_stable=True)
        q_s, e_s = (key_s // ENTITY_SPAN).astype(jnp.int32), (key_s % ENTITY_SPAN).astype(jnp.int32)
        start = _starts(key_s)
        pair = jnp.cumsum(start) - 1
        value = jax.ops.segment_max(s_s, pair, num_segments=n)
        tie = jnp.zeros(n, jnp.float64)
        first_at = jnp.zeros(n, jnp.int32).at[jnp.where(start, pair, n)].set(positions, mode="drop")
        pair_q, pair_e = q_s[first_at], e_s[first_at]
        n_pairs = start.sum()
    else:
        key_s, slot_s, fair_s, prob_s = jax.lax.sort((pair_key * n_beams + beam, slot, fair, prob), num_keys=1,
                                                     is_stable=True)
        b_s = (key_s % n_beams).astype(jnp.int32)
        q_s = (key_s // (n_beams * ENTITY_SPAN)).astype(jnp.int32)
        e_s = (key_s // n_beams % ENTITY_SPAN).astype(jnp.int32)
        start = _starts(key_s)  # one group per (question, entity, beam)
        group = jnp.cumsum(start) - 1
        n_groups = start.sum()
        first = jax.ops.segment_min(slot_s, group, num_segments=n)  # where the group was first bound
        beam_fair = jax.ops.segment_max(fair_s, group, num_segments=n)
        support = jnp.maximum(jax.ops.segment_max(prob_s, group, num_segments=n), 0.0)
        at = jnp.zeros(n, jnp.int32).at[jnp.where(start, group, n)].set(positions, mode="drop")
        valid = (positions < n_groups) & (q_s[at] < dead_q)
        g_q, g_e, g_b = jnp.where(valid, q_s[at], dead_q), e_s[at], b_s[at]
        # each beam's best length-fair score per question; a beam supports what lies within the gap of it
        beam_of = g_q * n_beams + g_b
        best = jax.ops.segment_max(jnp.where(valid, beam_fair, -jnp.inf), beam_of, num_segments=(q_pad + 1) * n_beams)
        gap = jnp.concatenate([runs.gap, jnp.zeros(1, runs.gap.dtype)])[g_q]
        counts = jnp.where(valid & (beam_fair >= best[beam_of] - gap), support, 0.0)
        # groups of one (question, entity) are contiguous (sorted by beam): its beams' first-binding order
        pair_start = _starts(g_q, g_e)
        pair = jnp.cumsum(pair_start) - 1
        order = jnp.zeros(n, jnp.int32)
        for by in range(1, n_beams):  # a pair's groups lie within n_beams of each other
            order += ((_shift(pair, by, -1) == pair) & (_shift(first, by, n) < first)).astype(jnp.int32)
            order += ((_shift(pair, -by, -1) == pair) & (_shift(first, -by, n) < first)).astype(jnp.int32)
        value = jnp.zeros(n, jnp.float64)
        for position in range(n_beams):  # added in first-binding order, as the reference adds them
            value = value + jax.ops.segment_sum(jnp.where(order == position, counts, 0.0), pair, num_segments=n)
        tie = jax.ops.segment_max(jnp.where(valid, beam_fair, -jnp.inf), pair, num_segments=n)
        first_at = jnp.zeros(n, jnp.int32).at[jnp.where(pair_start, pair, n)].set(positions, mode="drop")
        pair_q, pair_e = g_q[first_at], g_e[first_at]
        n_pairs = pair_start.sum()
    pair_q = jnp.where((positions < n_pairs) & (pair_q < dead_q), pair_q, dead_q)
    pair_q, _, _, pair_e, value = jax.lax.sort((pair_q, _key(value), _key(tie), pair_e, value), num_keys=4)
    bounds = jnp.searchsorted(pair_q, jnp.arange(q_pad + 1, dtype=pair_q.dtype))
    rank = positions - bounds[jnp.minimum(pair_q, q_pad - 1)]
    keep = pair_q < dead_q
    if rule == "beam":
        top = value[jnp.minimum(bounds[:-1], n - 1)]
        floor = jnp.concatenate([cut * top - CUT_SLACK, jnp.zeros(1, top.dtype)])[pair_q]
        keep &= (cut <= 0) | (value >= floor)
    count = jax.ops.segment_sum(keep.astype(jnp.int32), jnp.where(keep, pair_q, q_pad), num_segments=q_pad + 1)
    write = keep & (rank < k)
    row, col = jnp.where(write, pair_q, q_pad), jnp.where(write, rank, 0)
    ids = jnp.full((q_pad, k), -1, jnp.int32).at[row, col].set(pair_e, mode="drop")
    scores = jnp.zeros((q_pad, k), jnp.float64).at[row, col].set(value, mode="drop")
    return ids, scores, count[:q_pad]


def rank_answers(runs: AnswerRuns, never: np.ndarray | None, *, n_questions: int, rule: str = "max",
                 cut: float = 0.0, k: int = 64, min_beams: int = 1) -> RankedAnswers:
    """Per question (of ``n_questions``), its first ``k`` ranked answers, as ``ChunkAnswers.ranked`` ranks them.

    ``runs``: :func:`pack_runs`'s arrays; ``never``: bool [n_entities] entities never returned (mediators) or
    None; ``rule``/``cut``: the ranking and its cut (``"beam"`` only, as on the host). One compiled call and one
    transfer back; returned as host arrays cut to ``n_questions`` rows. A question whose ``count`` exceeds
    ``k`` has more answers than came back (the caller ranks it on the host or asks again with a larger ``k``).
    ``min_beams``: the beams a call is compiled for at least (the planner's beam width: one shape whatever a
    batch's plans number)."""
    if rule not in RULES:
        raise ValueError(f"unknown answer ranking {rule!r}; use one of {', '.join(RULES)}")
    n_beams = _bucket(int(runs.beam.max(initial=0)) + 1, min_beams)
    if never is None or not len(never):
        never = np.zeros(1, bool)
    with jax.enable_x64(True):
        ids, scores, count = jax.device_get(_rank(runs, jnp.asarray(never), jnp.float64(cut), n_questions=n_questions,
                                                  rule=rule, k=k, n_beams=n_beams))
    return RankedAnswers(ids[:n_questions], scores[:n_questions], count[:n_questions])


def ranked_lists(ranked: RankedAnswers) -> list[list[tuple[int, float]]]:
    """Per question, (entity, score) pairs best first, as ``ChunkAnswers.ranked`` returns them (questions with
    more than ``k`` answers are cut to ``k``: check ``ranked.count`` first)."""
    n = np.minimum(ranked.count, ranked.ids.shape[1]).tolist()
    ids, scores = ranked.ids.tolist(), ranked.scores.tolist()
    return [list(zip(ids[q][: n[q]], scores[q][: n[q]], strict=True)) for q in range(len(n))]

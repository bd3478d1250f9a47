"""SCR's stepwise beam search (eqs. 7, 12-15), batched over questions and jitted.

State of a batch of B questions with K beams each (device arrays):
``path_entities`` [B, K, T+1] (e0 .. e_len, -1 after), ``path_relations`` / ``path_triples``
[B, K, T] (hop j's directed relation and KG triple), ``length`` [B, K] hops taken, ``logp`` [B, K]
log path probability (-inf = empty slot), ``done`` [B, K] (the beam chose to stay: its entity
is a hypothesis answer).

One step (:func:`search_step`): for each live beam, h_{q_i} from its context; candidates are its
entity (slot 0, the stop option) and its neighbours (padded to a power-of-two width, visited
entities masked, as the paper records all traversed entities); P(e | q_i, e_i) = softmax of
cosine / τ over the candidates; a candidate's path probability is the parent's times P (eq. 14).
The K best of {finished hypotheses} ∪ {expansions of live beams} survive (eq. 15,
:func:`select_beams`). Hypotheses below the path-probability threshold are dropped as soon as they
fall below it: probabilities only shrink along a path, and a below-threshold beam in the top K
means fewer than K beams are above it, so this prunes nothing the final filter would keep.

The host loop (:func:`beam_search`) runs at most ``max_steps`` steps, gathering the padded
neighbour lists of the current entities between steps (one [B, K] transfer per step); beams
still moving after the last step stop where they are. Answers aggregate path probabilities per
entity (eq. 13 with P(a | q, p) = 1 for the entity a path ends on).

Mediator nodes (Freebase CVTs, :mod:`stem_jax.kg.mediators`) join the parts of one fact and are never an
answer: with ``SearchTables.no_stop`` set, a beam on one may not stop (its slot 0 is masked like
``min_hops``'s), so it walks through to the fact's other parts; one still moving after the last step ends
there and the method drops that answer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.methods.scr.graph import NeighbourTable
from stem_jax.methods.scr.model import ScrModel, context_segments, cosine_logits, encode_contexts
from stem_jax.methods.scr.text import context_tokens

NEG = -1e30


def select_beams(logp: jax.Array, done: jax.Array, cand_logp: jax.Array, beam: int
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Top-``beam`` hypotheses per question (eq. 15).

    Args: logp [B, K] (-inf = empty), done [B, K], cand_logp [B, K, C] log P of each candidate
    (slot 0 = stay; -inf = not a candidate). A finished beam competes once, with its own logp, in
    slot 0. Returns (parent [B, beam], choice [B, beam], new logp [B, beam]); ties go to the lower
    flat index (parent-major), like ``lax.top_k``."""
    num_beams, width = cand_logp.shape[1], cand_logp.shape[2]
    live = jnp.isfinite(logp) & ~done
    expand = jnp.where(live[..., None], logp[..., None] + cand_logp, -jnp.inf)
    kept = jnp.where(jnp.arange(width) == 0, logp[..., None], -jnp.inf)
    expand = jnp.where((done & jnp.isfinite(logp))[..., None], kept, expand)
    flat_scores = expand.reshape(expand.shape[0], num_beams * width)
    if num_beams * width < beam:  # fewer hypotheses than beam slots: pad with empty ones
        flat_scores = jnp.pad(flat_scores, ((0, 0), (0, beam - num_beams * width)), constant_values=-jnp.inf)
    values, flat = jax.lax.top_k(flat_scores, beam)
    return (flat // width).astype(jnp.int32), (flat % width).astype(jnp.int32), values


def select_beams_reference(logp: np.ndarray, done: np.ndarray, cand_logp: np.ndarray, beam: int
                           ) -> list[list[tuple[int, int, float]]]:
    """Plain-Python :func:`select_beams`: per question, the finite (parent, choice, logp) kept, best first."""
    out = []
    for b in range(logp.shape[0]):
        pool = []
        for k in range(logp.shape[1]):
            if not np.isfinite(logp[b, k]):
                continue
            if done[b, k]:
                pool.append((float(logp[b, k]), k * cand_logp.shape[2], k, 0))
                continue
            for c in range(cand_logp.shape[2]):
                value = float(logp[b, k]) + float(cand_logp[b, k, c])
                if np.isfinite(value):
                    pool.append((value, k * cand_logp.shape[2] + c, k, c))
        pool.sort(key=lambda item: (-item[0], item[1]))
        out.append([(k, c, v) for v, _, k, c in pool[:beam]])
    return out


@flax.struct.dataclass
class SearchTables:
    """Device-resident, question-independent inputs of the search."""

    features: jax.Array  # [N, d] GNN entity features (eq. 6), computed once
    entity_text: jax.Array  # [N, text] frozen MiniLM entity vectors
    relation_text: jax.Array  # [R, text] frozen MiniLM relation vectors
    encoder: Any = None  # question_encoder = "minilm": text.EncoderTables (token tables, frozen MiniLM bottom)
    # bool [N]: entities a beam may not stop on (the KG's mediator nodes, Freebase CVTs: walked through, never an
    # answer); None: a beam may stop anywhere (training, and KGs without mediators: no change there)
    no_stop: Any = None


def question_states(model: ScrModel, params: Any, tables: SearchTables, question: jax.Array, path_entities: jax.Array,
                    path_relations: jax.Array, length: jax.Array) -> jax.Array:
    """h_{q_i} [..., d] of each path's context q_i (eqs. 1, 8).

    ``question`` is the question's frozen MiniLM vector [..., text] (segments head) or its word pieces
    [..., Lq] (minilm: the context string is assembled from token tables and re-encoded by the fine-tuned
    MiniLM, one call for every row)."""
    if model.spec.minilm:
        enc = tables.encoder
        tokens, mask = context_tokens(question, enc.entity_tokens, enc.relation_tokens, path_entities,
                                      path_relations, length, model.spec.context_tokens)
        return encode_contexts(model, params, enc.frozen, tokens, mask)
    segments, seg_type, mask = context_segments(question, tables.entity_text, tables.relation_text,
                                                path_entities, path_relations, length)
    return model.apply(params, segments, seg_type, mask, method=ScrModel.questions)


def candidate_log_probs(model: ScrModel, params: Any, tables: SearchTables, question: jax.Array,
                        path_entities: jax.Array, path_relations: jax.Array, length: jax.Array,
                        cand_entities: jax.Array, cand_relations: jax.Array, cand_valid: jax.Array,
                        min_hops: int = 0) -> jax.Array:
    """log P(e | q_i, e_i) over each beam's candidates (eq. 7 as a softmax of eq. 11's scores), -inf off-list.

    Shapes: question [..., text] (or [..., Lq] word pieces, minilm) per beam [..., K]; candidates [..., K, C].
    With ``min_hops`` > 0, a beam that has taken fewer hops may not stop (its slot 0 is masked before the
    softmax); nor may a beam on an entity of ``tables.no_stop`` (a mediator: it walks on or is dropped)."""
    h_q = question_states(model, params, tables, question, path_entities, path_relations, length)
    h_e = model.apply(params, tables.features, tables.relation_text, cand_entities, cand_relations,
                      method=ScrModel.candidates)
    logits = cosine_logits(h_q, h_e, model.spec.tau)
    visited = (cand_entities[..., :, None] == path_entities[..., None, :]).any(-1)
    visited = visited.at[..., 0].set(False)  # staying put is the stop option, not a revisit
    allowed = cand_valid & ~visited
    if min_hops > 0:
        allowed = allowed.at[..., 0].set(allowed[..., 0] & (length >= min_hops))
    if tables.no_stop is not None:  # slot 0 holds the beam's own entity; -1 (an empty beam) is invalid anyway
        allowed = allowed.at[..., 0].set(allowed[..., 0] & ~tables.no_stop[jnp.maximum(cand_entities[..., 0], 0)])
    logp = jax.nn.log_softmax(jnp.where(allowed, logits, NEG), axis=-1)
    return jnp.where(allowed, logp, -jnp.inf)


@functools.partial(jax.jit, static_argnames=("model", "beam", "log_threshold", "min_hops"))
def search_step(model: ScrModel, params: Any, tables: SearchTables, question: jax.Array, state: dict[str, jax.Array],
                cand_entities: jax.Array, cand_relations: jax.Array, cand_triples: jax.Array, cand_valid: jax.Array,
                *, beam: int, log_threshold: float, min_hops: int = 0) -> dict[str, jax.Array]:
    """One reasoning step for a batch (see the module docstring); returns the new state."""
    questions = jnp.broadcast_to(question[:, None, :], (*state["length"].shape, question.shape[-1]))
    cand_logp = candidate_log_probs(model, params, tables, questions, state["path_entities"],
                                    state["path_relations"], state["length"], cand_entities, cand_relations,
                                    cand_valid, min_hops)
    parent, choice, logp = select_beams(state["logp"], state["done"], cand_logp, beam)
    logp = jnp.where(logp >= log_threshold, logp, -jnp.inf)
    take = lambda a: jnp.take_along_axis(a, parent.reshape(*parent.shape, *(1,) * (a.ndim - 2)), axis=1)  # noqa: E731
    was_done = take(state["done"])
    length = take(state["length"])
    moves = ~was_done & (choice > 0)
    pick = lambda a: jnp.take_along_axis(take(a), choice[..., None], axis=2)[..., 0]  # noqa: E731
    steps = state["path_relations"].shape[-1]
    slot = jax.nn.one_hot(length, steps, dtype=bool) & moves[..., None]  # hop index `length` gets the move
    path_entities = take(state["path_entities"])
    next_slot = jax.nn.one_hot(length + 1, steps + 1, dtype=bool) & moves[..., None]
    return {
        "path_entities": jnp.where(next_slot, pick(cand_entities)[..., None], path_entities),
        "path_relations": jnp.where(slot, pick(cand_relations)[..., None], take(state["path_relations"])),
        "path_triples": jnp.where(slot, pick(cand_triples)[..., None], take(state["path_triples"])),
        "length": length + moves.astype(jnp.int32),
        "logp": logp,
        "done": was_done | (choice == 0),
    }


def initial_state(topics: np.ndarray, beam: int, max_steps: int) -> dict[str, np.ndarray]:
    """Beam 0 of each question on its topic entity (probability 1); topics < 0 are padding rows."""
    b = topics.shape[0]
    path_entities = np.full((b, beam, max_steps + 1), -1, np.int32)
    path_entities[:, 0, 0] = topics
    logp = np.full((b, beam), -np.inf, np.float32)
    logp[:, 0] = np.where(topics >= 0, 0.0, -np.inf)
    return {"path_entities": path_entities, "path_relations": np.full((b, beam, max_steps), -1, np.int32),
            "path_triples": np.full((b, beam, max_steps), -1, np.int32), "length": np.zeros((b, beam), np.int32),
            "logp": logp, "done": np.zeros((b, beam), bool)}


@dataclasses.dataclass
class Hypothesis:
    """One (path, answer) pair of B_K: entities e0..e_l, directed relations, triples, probability."""

    entities: list[int]
    relations: list[int]
    triples: list[int]
    prob: float
    stopped: bool  # False: forced to stop at max_steps


def beam_search(model: ScrModel, params: Any, tables: SearchTables, neighbours: NeighbourTable,
                questions: np.ndarray, topics: np.ndarray, *, beam: int, threshold: float, max_steps: int,
                min_hops: int = 0) -> tuple[list[list[Hypothesis]], dict[str, int]]:
    """Search a padded batch (questions [B, text], or [B, Lq] word pieces for minilm; topics [B], -1 = padding
    row); hypotheses per row.

    Returns (per-row hypotheses, best first, each with probability >= threshold; stats). ``max_steps`` may be
    below the model's own (``model.spec.max_steps``): paths keep the model's length, the search stops earlier."""
    if max_steps > model.spec.max_steps:
        raise ValueError(f"max_steps {max_steps} is above the {model.spec.max_steps} the model was trained for")
    # The context's segment count (and the head's position table) is fixed by the trained spec.
    state = {k: jnp.asarray(v) for k, v in initial_state(topics, beam, model.spec.max_steps).items()}
    question = jnp.asarray(questions, jnp.int32 if model.spec.minilm else jnp.float32)
    log_threshold = float(np.log(threshold)) if threshold > 0 else -np.inf
    host = {"length": np.zeros(state["length"].shape, np.int32), "done": np.zeros(state["done"].shape, bool),
            "logp": np.asarray(state["logp"])}
    current = np.where(host["logp"] > -np.inf, topics[:, None], -1).astype(np.int64)
    stats = {"steps": 0, "widths": 0}
    for _ in range(max_steps):
        live = np.isfinite(host["logp"]) & ~host["done"]
        if not live.any():
            break
        cand = neighbours.candidates(np.where(live, current, -1))
        state = search_step(model, params, tables, question, state, *(jnp.asarray(a) for a in cand),
                            beam=beam, log_threshold=log_threshold, min_hops=min_hops)
        ends = jnp.take_along_axis(state["path_entities"], state["length"][..., None], axis=2)[..., 0]
        current, done, logp = jax.device_get((ends, state["done"], state["logp"]))
        host = {"done": done, "logp": logp}
        stats["steps"] += 1
        stats["widths"] = max(stats["widths"], cand[0].shape[-1])
    final = jax.device_get(state)
    out: list[list[Hypothesis]] = []
    for b in range(topics.shape[0]):
        row = []
        for k in np.argsort(-final["logp"][b], kind="stable"):
            if not np.isfinite(final["logp"][b, k]):
                continue
            n = int(final["length"][b, k])
            row.append(Hypothesis([int(e) for e in final["path_entities"][b, k, : n + 1]],
                                  [int(r) for r in final["path_relations"][b, k, :n]],
                                  [int(t) for t in final["path_triples"][b, k, :n]],
                                  float(np.exp(final["logp"][b, k])), bool(final["done"][b, k])))
        out.append(row)
    return out, stats


def above_cut(answers: Sequence[tuple[Any, float]], cut: float) -> list[tuple[Any, float]]:
    """``answers`` (best first, as :func:`aggregate_answers` orders them) whose probability is at least ``cut`` times
    the best one's (``scr.answer_cut``; 0 keeps every one)."""
    if not answers or cut <= 0:
        return list(answers)
    best = answers[0][1]
    return [(e, p) for e, p in answers if p >= cut * best]


def aggregate_answers(hypotheses: list[Hypothesis]) -> list[tuple[int, float]]:
    """P(a | q) = Σ over kept paths ending on a (eq. 13), best first (ties: lower entity id)."""
    total: dict[int, float] = {}
    for h in hypotheses:
        total[h.entities[-1]] = total.get(h.entities[-1], 0.0) + h.prob
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


# The reference scores one beam's list at a time; jit only saves op-by-op dispatch.
_reference_log_probs = jax.jit(candidate_log_probs, static_argnums=(0, 10))


def beam_search_reference(model: ScrModel, params: Any, tables: SearchTables, neighbours: NeighbourTable,
                          question: np.ndarray, topic: int, *, beam: int, threshold: float, max_steps: int,
                          min_hops: int = 0) -> list[Hypothesis]:
    """One question, one beam at a time, unpadded neighbour lists and Python lists: the plain reference."""
    hyps = [Hypothesis([topic], [], [], 1.0, False)]
    q = jnp.asarray(question, jnp.int32 if model.spec.minilm else jnp.float32)
    for _ in range(max_steps):
        if all(h.stopped for h in hyps):
            break
        pool: list[tuple[float, int, Hypothesis]] = []
        for k, h in enumerate(hyps):
            if h.stopped:
                pool.append((np.log(h.prob), k * 10**6, h))
                continue
            ents, rels, tris = neighbours.neighbours(h.entities[-1])
            cand_e = np.concatenate([[h.entities[-1]], ents]).astype(np.int32)
            cand_r = np.concatenate([[-1], rels]).astype(np.int32)
            cand_t = np.concatenate([[-1], tris]).astype(np.int32)
            width = neighbours.width(np.asarray([h.entities[-1]]))  # padded only to share one compile
            padded = np.full(width, -1, np.int32)
            padded[: cand_e.size] = cand_e
            padded_r = np.full(width, -1, np.int32)
            padded_r[: cand_r.size] = cand_r
            path_e = np.full(model.spec.max_steps + 1, -1, np.int32)
            path_e[: len(h.entities)] = h.entities
            path_r = np.full(model.spec.max_steps, -1, np.int32)
            path_r[: len(h.relations)] = h.relations
            logp = np.asarray(_reference_log_probs(model, params, tables, q, jnp.asarray(path_e), jnp.asarray(path_r),
                                                   jnp.asarray(len(h.relations)), jnp.asarray(padded),
                                                   jnp.asarray(padded_r), jnp.asarray(padded >= 0), min_hops))[: cand_e.size]
            for c in range(cand_e.size):
                value = np.log(h.prob) + float(logp[c])
                if not np.isfinite(value):
                    continue
                if c == 0:
                    nxt = Hypothesis(h.entities, h.relations, h.triples, float(np.exp(value)), True)
                else:
                    nxt = Hypothesis(h.entities + [int(cand_e[c])], h.relations + [int(cand_r[c])],
                                     h.triples + [int(cand_t[c])], float(np.exp(value)), False)
                pool.append((value, k * 10**6 + c, nxt))
        pool.sort(key=lambda item: (-item[0], item[1]))
        hyps = [h for v, _, h in pool[:beam] if threshold <= 0 or v >= np.log(threshold)]
    return sorted(hyps, key=lambda h: -h.prob)

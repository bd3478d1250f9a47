"""Reference tracer: Algorithms 1-2 of the STEM paper (appendix H), in plain Python/NumPy.

This is the oracle the JAX tracer is tested against, so it favours being obviously right over
being fast. Two orders of the used-triple list (``final_list`` / CONTRADICT) are supported:

* ``order="sequential"`` is the literal algorithm: depth first, the list grows after every
  selection, so a branch explored earlier can use up triples a later sibling would have taken.
* ``order="level"`` is what a vectorised tracer can do: all branches bound to a schema node
  select at once against the list as it stood before the step, and the step's kept selections
  are added afterwards. Within a step two branches may select the same triple. Branches are then
  ordered by cumulative score (ties: parent order, then rank within the parent) and truncated to
  ``frontier_cap``; the triples of dropped branches are neither evidence nor used.

Under ``used="run"`` that list is the run's (Algorithm 2); ``"branch"`` bars only the triples on a
binding's own path from the anchor, ``"step"`` bars nothing. ``direction="directed"`` keeps only
KG triples in the schema step's orientation (:class:`~stem_jax.trace.types.TraceOptions`).

Scores are float32 with the same operation order as the JAX tracer, so on inputs whose dot
products are exact in float32 both tracers agree bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernels.rows import project_queries_reference
from stem_jax.config import TracerConfig
from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import GroundedPlan
from stem_jax.trace.types import DIRECTIONS, USED_RULES, TraceOptions, TraceResult, stable_order

F32 = np.float32


def anchor_reference(
    entity_emb: np.ndarray, mention_emb: np.ndarray, top_n: int, lam: float, entity_guidance: np.ndarray | None,
    named: Sequence[tuple[int, int]] = (),
) -> tuple[int, float]:
    """Eqs. 8-11 and 15: top-N entities by cosine, λ-boosted inside the guidance set, best one wins.

    ``named``: (entity id, level) of KG entities the question names, in priority order; level 2 =
    the topic's exact id (cosine 1), level 1 = a case/accent-folded name match (its own cosine).
    The highest level present wins, then the boosted score, then the earlier candidate (named ones
    come before the cosine top-N).
    """
    cos = entity_emb.astype(F32, copy=False) @ mention_emb.astype(F32, copy=False)
    candidates = [(int(e), int(level), F32(1.0) if level >= 2 else F32(cos[e])) for e, level in named if e >= 0]
    candidates += [(int(e), 0, F32(cos[e])) for e in stable_order(cos)[:top_n]]
    top_level = max(level for _, level, _ in candidates)
    best, best_score = -1, None
    for e, level, c in candidates:
        if level != top_level:
            continue
        boost = F32(lam) if entity_guidance is not None and entity_guidance[e] else F32(1.0)
        score = F32(c * boost)
        if best_score is None or score > best_score:
            best, best_score = e, score
    return best, float(best_score)


class _Scorer:
    def __init__(self, index, triple_emb, step_emb, steps, config, options, triple_guidance, forward):
        self.index = index
        self.forward = forward
        self.directed = options.direction == "directed"
        self.scale = self.bias = None
        if hasattr(triple_emb, "codes"):  # compact rows: cosine = scale · (code · basisᵀq) + q · mean (kernels.rows)
            self.triple_emb = np.asarray(triple_emb.codes, F32)  # no copy when the caller converted it once
            self.scale = None if triple_emb.scale is None else np.asarray(triple_emb.scale, F32)
            self.step_emb, self.bias = project_queries_reference(step_emb, triple_emb.basis, triple_emb.mean)
        else:
            self.triple_emb = triple_emb.astype(F32, copy=False)
            self.step_emb = step_emb.astype(F32, copy=False)
        self.steps = steps
        self.tau = F32(config.tau)
        self.theta = F32(config.theta)
        self.options = options
        self.triple_guidance = triple_guidance

    def t_score(self, t: int, s: int) -> np.float32:
        """Eq. 12-13: cos(schema triple, KG triple) + τ·[triple in guidance] (+1 relation bonus)."""
        score = F32(np.dot(self.triple_emb[t], self.step_emb[s]))
        if self.scale is not None:
            score = F32(score * self.scale[t])
        if self.bias is not None:
            score = F32(score + self.bias[s])
        score = F32(score + (self.tau if self.triple_guidance is not None and self.triple_guidance[t] else F32(0.0)))
        if self.options.relation_bonus and self._same_relation(t, s):
            score = F32(score + F32(1.0))
        return score

    def _same_relation(self, t: int, s: int) -> bool:
        return int(self.steps[s, 2]) >= 0 and int(self.index.triples[t, 1]) == int(self.steps[s, 2])

    def qualifies(self, t: int, s: int, score: np.float32) -> bool:
        if not self.options.tau_admits and self.triple_guidance is not None and self.triple_guidance[t]:
            score = F32(score - self.tau)  # the JAX tracer subtracts the same float32 τ
        return bool(score >= self.theta) or (self.options.relation_bonus and self._same_relation(t, s))

    def other_end(self, t: int, node: int, s: int) -> int:
        h, _, tail = self.index.triples[t]
        if self.directed:  # the step's orientation decides (a self-loop leads back to node either way)
            return int(tail) if self.forward[s] else int(h)
        return int(tail) if int(h) == node else int(h)

    def incident(self, node: int, s: int) -> list[int]:
        """GET_N(e*): the triples at ``node``; directed, only those with ``node`` at the step's own end."""
        found = self.index.incident(node).tolist()
        if not self.directed:
            return found
        column = 0 if self.forward[s] else 2
        return [t for t in found if int(self.index.triples[t, column]) == node]

    def breadth_matches(self, node: int, s: int, used) -> tuple[list[tuple[int, np.float32]], int]:
        """Qualifying (triple, T) of ``node`` for step ``s``, best first (ties: triple id), capped."""
        found = []
        for t in self.incident(node, s):
            if t in used:
                continue
            score = self.t_score(t, s)
            if self.qualifies(t, s, score):
                found.append((t, score))
        found.sort(key=lambda ts: (-ts[1], ts[0]))
        cap = self.options.breadth_cap
        if cap and len(found) > cap:
            return found[:cap], len(found) - cap
        return found, 0

    def precision_match(self, node: int, s: int, base: np.float32, used) -> tuple[int, np.float32] | None:
        """Algorithm 2 STEP_PRECISION: first triple maximising S + T, if that beats -1."""
        best, max_score = None, F32(-1.0)
        for t in self.incident(node, s):
            if t in used:
                continue
            score = F32(base + self.t_score(t, s))
            if score > max_score:
                best, max_score = t, score
        return None if best is None else (best, max_score)


def trace_reference(
    index: KGIndex,
    plan: GroundedPlan,
    *,
    strategy: str,
    anchor: int,
    anchor_score: float,
    triple_emb: Any,
    step_emb: np.ndarray,
    config: TracerConfig = TracerConfig(),
    options: TraceOptions = TraceOptions(),
    triple_guidance: np.ndarray | None = None,
) -> TraceResult:
    """Trace ``plan`` through the KG from ``anchor`` (whose eq.-15 score is ``anchor_score``).

    ``step_emb`` [S, d] holds the embedding of each DFS step's schema triple text; ``triple_emb``
    [m, d] the KG triples' (or a :class:`~stem_jax.encoder.compact.CompactRows`: the schema steps are then
    projected into its space, as the JAX tracer does). ``triple_guidance`` [m] bool marks guidance-graph triples (τ bonus).
    """
    steps = plan.steps
    if options.direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {options.direction!r}: use one of {', '.join(DIRECTIONS)}")
    if options.used not in USED_RULES:
        raise ValueError(f"unknown used-triple rule {options.used!r}: use one of {', '.join(USED_RULES)}")
    scorer = _Scorer(index, triple_emb, step_emb, steps, config, options, triple_guidance, plan.orientation())
    n_slots = plan.num_steps + 1
    result = TraceResult(
        anchor=anchor, anchor_score=float(anchor_score),
        nodes=[[anchor]] + [[] for _ in range(n_slots - 1)],
        scores=[[float(F32(anchor_score))]] + [[] for _ in range(n_slots - 1)],
        via=[[-1]] + [[] for _ in range(n_slots - 1)],
        parents=[[-1]] + [[] for _ in range(n_slots - 1)],
    )
    if options.order == "level":
        _trace_level(scorer, steps, strategy, options, result)
    elif options.order == "sequential":
        _trace_sequential(scorer, steps, strategy, options.used, result)
    else:
        raise ValueError(f"unknown trace order {options.order!r}: use 'level' or 'sequential'")
    return result


def _branch_triples(result: TraceResult, parent_of: dict[int, int], slot: int, index: int) -> set[int]:
    """The triples on the path from the anchor to binding ``index`` of ``slot``."""
    found = set()
    while slot > 0:
        found.add(result.via[slot][index])
        slot, index = parent_of[slot], result.parents[slot][index]
    return found


def _trace_level(scorer: _Scorer, steps: np.ndarray, strategy: str, options: TraceOptions, result: TraceResult) -> None:
    used: set[int] = set()
    parent_of = {int(c): int(p) for p, c, _ in steps.tolist()}
    for s, (parent, child, _) in enumerate(steps.tolist()):
        found = []  # (node, score, triple, parent index) in parent order, then rank within parent
        for p_index, (node, base) in enumerate(zip(result.nodes[parent], result.scores[parent], strict=True)):
            base = F32(base)
            barred = (used if options.used == "run" else
                      _branch_triples(result, parent_of, parent, p_index) if options.used == "branch" else set())
            if strategy == "Precision":
                match = scorer.precision_match(node, s, base, barred)
                if match is not None:
                    t, total = match
                    found.append((scorer.other_end(t, node, s), total, t, p_index))
            else:
                matches, dropped = scorer.breadth_matches(node, s, barred)
                result.overflow += dropped
                for t, score in matches:
                    found.append((scorer.other_end(t, node, s), F32(base + score), t, p_index))
        order = stable_order(np.asarray([f[1] for f in found], dtype=F32)) if found else []
        kept = [found[i] for i in order]
        if options.frontier_cap and len(kept) > options.frontier_cap:
            result.overflow += len(kept) - options.frontier_cap
            kept = kept[: options.frontier_cap]
        for node, score, t, p_index in kept:
            result.nodes[child].append(node)
            result.scores[child].append(float(score))
            result.via[child].append(t)
            result.parents[child].append(p_index)
        used.update(t for _, _, t, _ in kept)


def _trace_sequential(scorer: _Scorer, steps: np.ndarray, strategy: str, rule: str, result: TraceResult) -> None:
    used: set[int] = set()  # final_list (rule "run"); "branch" passes each branch's own list down
    children: dict[int, list[int]] = {}
    for s, (parent, _, _) in enumerate(steps.tolist()):
        children.setdefault(parent, []).append(s)

    def bind(slot: int, node: int, score: np.float32, t: int, p_index: int) -> int:
        result.nodes[slot].append(node)
        result.scores[slot].append(float(score))
        result.via[slot].append(t)
        result.parents[slot].append(p_index)
        return len(result.nodes[slot]) - 1

    def match(slot: int, node: int, base: np.float32, b_index: int, branch: frozenset[int]) -> None:  # MATCH
        for s in children.get(slot, []):
            child = int(steps[s, 1])
            barred = used if rule == "run" else branch if rule == "branch" else frozenset()
            if strategy == "Precision":  # Algorithm 2 STEP_PRECISION
                found = scorer.precision_match(node, s, base, barred)
                if found is None:
                    continue
                t, total = found
                if rule == "run":
                    used.add(t)
                next_node = scorer.other_end(t, node, s)
                match(child, next_node, total, bind(child, next_node, total, t, b_index), branch | {t})
            else:  # Algorithm 2 STEP_BREADTH: mark every candidate used, then recurse in KG order
                matches, dropped = scorer.breadth_matches(node, s, barred)
                result.overflow += dropped
                matches.sort(key=lambda ts: ts[0])
                if rule == "run":
                    used.update(t for t, _ in matches)
                for t, score in matches:
                    total = F32(base + score)
                    next_node = scorer.other_end(t, node, s)
                    match(child, next_node, total, bind(child, next_node, total, t, b_index), branch | {t})

    match(0, result.nodes[0][0], F32(result.scores[0][0]), 0, frozenset())

"""Inputs and outputs shared by the reference and the JAX tracer."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class TraceOptions:
    """Search behaviour beyond the paper's hyper-parameters (those live in TracerConfig).

    Attributes:
      relation_bonus: the authors' released code adds 1 to the T-Score of every incident KG triple
        whose relation equals the schema relation, and Breadth always keeps such triples. Off by
        default (the paper does not describe it).
      breadth_cap: keep at most this many Breadth matches per frontier node and step, best first
        (the authors' code uses 12); 0 = no cap in the reference. The JAX tracer always has a
        finite per-node capacity and counts what it drops as overflow.
      frontier_cap: keep at most this many bindings per schema node (best cumulative score first);
        0 = unbounded (reference only).
      order: ``"level"`` updates the used-triple list once per schema step for all branches (what
        the vectorised tracer does); ``"sequential"`` follows Algorithms 1-2 literally, updating it
        after every selection in depth-first order.
    """

    relation_bonus: bool = False
    tau_admits: bool = True  # False: Breadth's θ test ignores the guidance bonus τ (τ only ranks)
    breadth_cap: int = 0
    frontier_cap: int = 0
    order: str = "level"


@dataclasses.dataclass
class TraceResult:
    """What one traced (question, plan, anchor) produced.

    Bindings are per slot (slot 0 = anchor, slot s+1 = child of step s), in the tracer's order
    (cumulative score descending, then discovery order).
    """

    anchor: int
    anchor_score: float
    nodes: list[list[int]]  # per slot: bound KG entity ids
    scores: list[list[float]]  # per slot: cumulative score S of each binding
    via: list[list[int]]  # per slot: KG triple id that bound it (-1 for the anchor)
    parents: list[list[int]]  # per slot: index of the parent binding in its parent slot (-1 for the anchor)
    overflow: int = 0  # matches dropped by breadth_cap / frontier_cap

    def evidence(self) -> set[int]:
        return {t for slot in self.via for t in slot if t >= 0}

    def answers(self, answer_slot: int) -> dict[int, float]:
        """Entity -> best cumulative score among bindings of the answer slot."""
        best: dict[int, float] = {}
        if answer_slot < 0 or answer_slot >= len(self.nodes):
            return best
        for node, score in zip(self.nodes[answer_slot], self.scores[answer_slot], strict=True):
            if node not in best or score > best[node]:
                best[node] = score
        return best


def rank_answers(answer_scores: dict[int, float]) -> list[tuple[int, float]]:
    """Entities by score descending, ties by entity id (deterministic across tracers)."""
    return sorted(answer_scores.items(), key=lambda kv: (-kv[1], kv[0]))


def stable_order(scores: np.ndarray) -> np.ndarray:
    """Indices sorting ``scores`` descending, ties kept in input order (as lax.top_k does)."""
    return np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")

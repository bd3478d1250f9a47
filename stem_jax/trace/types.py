"""Inputs and outputs shared by the reference and the JAX tracer."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

DIRECTIONS = ("undirected", "directed")
USED_RULES = ("run", "branch", "step")


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
      direction: ``"undirected"`` (the paper's GET_N: every incident triple, either orientation) or
        ``"directed"``: a step matches only KG triples in its schema triple's orientation (the
        parent's KG node is the head of a step that leaves the schema head, the tail otherwise);
        a self-loop has both.
      used: the used-triple rule (CONTRADICT). ``"run"``: a triple selected anywhere in the run is
        never selected again (Algorithm 2's ``final_list``); ``"branch"``: only the triples on a
        binding's own path from the anchor are barred, so sibling branches may share a triple and
        a walk may come back along a paired inverse triple; ``"step"``: nothing is barred (a
        self-loop or a triple may serve several steps).
    """

    relation_bonus: bool = False
    tau_admits: bool = True  # False: Breadth's θ test ignores the guidance bonus τ (τ only ranks)
    breadth_cap: int = 0
    frontier_cap: int = 0
    order: str = "level"
    direction: str = "undirected"
    used: str = "run"


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


def stable_order(scores: np.ndarray) -> np.ndarray:
    """Indices sorting ``scores`` descending, ties kept in input order (as lax.top_k does)."""
    return np.argsort(-np.asarray(scores, dtype=np.float32), kind="stable")


def prune_unreached(nodes: np.ndarray, via: np.ndarray, parents: np.ndarray, steps: np.ndarray,
                    constants: Sequence[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Bindings of one traced run ([slots, F] arrays, -1 where empty) with unreached constants pruned.

    A schema with several question entities is traced from one anchor; each other question entity
    is a constant slot (``constants``: (slot, KG id), id -1 = not checked). A binding of a constant
    slot holds only when it is that entity. A binding of any slot holds when, for every child slot
    whose subtree has a checked constant, some binding of that child with it as parent holds; a
    binding is kept when it holds and its parent binding is kept. Pruned bindings (and their
    triples) become -1, so they are neither answers nor evidence. Without checked constants the
    arrays are returned unchanged.
    """
    checked = {int(slot): int(entity) for slot, entity in constants if entity >= 0}
    if not checked:
        return nodes, via
    steps = np.asarray(steps).reshape(-1, 3)
    parent_of = {int(child): int(parent) for parent, child, _ in steps.tolist()}
    children: dict[int, list[int]] = {}
    for child, parent in parent_of.items():
        children.setdefault(parent, []).append(child)
    constrained: set[int] = set()
    for slot in checked:  # every slot on the way from a checked constant up to the anchor
        while slot not in constrained:
            constrained.add(slot)
            if slot not in parent_of:
                break
            slot = parent_of[slot]
    n_slots, width = nodes.shape
    holds = nodes >= 0
    for slot in range(n_slots - 1, -1, -1):
        if slot in checked:
            holds[slot] &= nodes[slot] == checked[slot]
        for child in children.get(slot, []):
            if child not in constrained:
                continue
            reached = np.zeros(width, bool)
            good = holds[child] & (parents[child] >= 0)
            reached[parents[child][good]] = True
            holds[slot] &= reached
    kept = np.zeros_like(holds)
    kept[0] = holds[0]
    for slot in range(1, n_slots):
        if slot not in parent_of:
            continue
        up = parents[slot]
        kept[slot] = holds[slot] & (up >= 0) & kept[parent_of[slot]][np.clip(up, 0, width - 1)]
    return np.where(kept, nodes, -1), np.where(kept, via, -1)

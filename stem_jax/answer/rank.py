"""Merging the runs of one question (plans x anchors) into ranked answers and evidence."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class QuestionAnswers:
    """LLM-free answers of one question: entities bound to the answer placeholder, by score."""

    scores: dict[int, float] = dataclasses.field(default_factory=dict)  # entity -> best cumulative S
    evidence: set[int] = dataclasses.field(default_factory=set)  # G_reason triple ids
    anchors: list[int] = dataclasses.field(default_factory=list)
    overflow: int = 0
    runs: int = 0

    def add_run(self, nodes: np.ndarray, scores: np.ndarray, via: np.ndarray, answer_slot: int, overflow: int) -> None:
        """Fold one traced run ([slots, F] arrays, -1 where empty) into the question's answers."""
        self.runs += 1
        self.overflow += int(overflow)
        self.anchors.append(int(nodes[0, 0]))
        self.evidence.update(int(t) for t in via[via >= 0])
        if answer_slot < 0:
            return
        live = nodes[answer_slot] >= 0
        for node, score in zip(nodes[answer_slot][live].tolist(), scores[answer_slot][live].tolist(), strict=True):
            if node not in self.scores or score > self.scores[node]:
                self.scores[node] = score

    def ranked(self) -> list[tuple[int, float]]:
        """Entities by score descending, ties by entity id (the same order as the reference)."""
        return sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))

"""The answer ranking of :mod:`stem_jax.answer.rank`, written plainly: one question, one binding at a time.

Not used to answer questions: :class:`~stem_jax.answer.rank.ChunkAnswers` ranks every question of a chunk
in a few numpy passes, and the property test (``tests/answer/test_rank_chunk.py``) checks that it gives
what :class:`QuestionAnswers` gives, bit for bit, on random runs. The rules themselves are described in
:mod:`stem_jax.answer.rank`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np

from stem_jax.answer.rank import RANKINGS


@dataclasses.dataclass
class QuestionAnswers:
    """LLM-free answers of one question: entities bound to the answer placeholder, by score."""

    scores: dict[int, float] = dataclasses.field(default_factory=dict)  # entity -> best cumulative S
    fair: dict[int, float] = dataclasses.field(default_factory=dict)  # entity -> best mean T per step
    support: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)  # entity -> beam -> prob
    beam_fair: dict[int, dict[int, float]] = dataclasses.field(default_factory=dict)  # beam -> entity -> fair
    evidence: set[int] = dataclasses.field(default_factory=set)  # G_reason triple ids
    anchors: list[int] = dataclasses.field(default_factory=list)
    overflow: int = 0
    runs: int = 0

    def add_run(self, nodes: np.ndarray, scores: np.ndarray, via: np.ndarray, answer_slot: int, overflow: int, *,
                beam: int = 0, beam_prob: float = 1.0, depth: int = 1, exclude: Iterable[int] = ()) -> None:
        """Fold one traced run ([slots, F] arrays, -1 where empty) into the question's answers.

        ``beam``/``beam_prob``: the plan's position in the planner's beam and its probability;
        ``depth``: schema steps from the anchor to the answer slot; ``exclude``: entities never
        returned as answers (the question's topic entities).
        """
        self.runs += 1
        self.overflow += int(overflow)
        self.anchors.append(int(nodes[0, 0]))
        self.evidence.update(int(t) for t in via[via >= 0])
        if answer_slot < 0:
            return
        excluded = set(exclude)
        anchor_score = float(scores[0, 0])
        live = nodes[answer_slot] >= 0
        for node, score in zip(nodes[answer_slot][live].tolist(), scores[answer_slot][live].tolist(), strict=True):
            if node in excluded:
                continue
            fair = (score - anchor_score) / max(depth, 1)
            if node not in self.scores or score > self.scores[node]:
                self.scores[node] = score
            if node not in self.fair or fair > self.fair[node]:
                self.fair[node] = fair
            beams = self.support.setdefault(node, {})
            beams[beam] = max(beams.get(beam, 0.0), float(beam_prob))
            within = self.beam_fair.setdefault(beam, {})
            if node not in within or fair > within[node]:
                within[node] = fair

    def ranked(self, rule: str = "max", cut: float = 0.0, gap: float = math.inf) -> list[tuple[int, float]]:
        """(entity, score) best first, ties by entity id; see the module docstring for the rules.

        ``"max"`` scores are cumulative S; ``"beam"`` scores are the support (beam probability mass),
        where a beam counts for an entity only if the entity's length-fair score in it is within ``gap``
        of the beam's best.
        """
        if rule == "max":
            return sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0]))
        if rule != "beam":
            raise ValueError(f"unknown answer ranking {rule!r}; use one of {', '.join(RANKINGS)}")
        best = {b: max(f.values()) for b, f in self.beam_fair.items() if f}
        mass = {e: float(sum(p for b, p in beams.items() if self.beam_fair[b][e] >= best[b] - gap))
                for e, beams in self.support.items()}
        order = sorted(mass, key=lambda e: (-mass[e], -self.fair[e], e))
        if order and cut > 0:
            # float noise must not split a tie: beams with equal probabilities give equal support
            floor = cut * mass[order[0]] - 1e-9
            order = [e for e in order if mass[e] >= floor]
        return [(e, mass[e]) for e in order]

"""Two planners' beams as one: each schema's probability is the weighted sum of what either planner gives it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stem_jax.data.types import Question
from stem_jax.plan.base import ScoredSchema


class MixedPlanner:
    """The template classifier and the path ranker together (``planner.paths = both``): a plan both propose
    adds up both probabilities, so agreement ranks first; the beam keeps the ``beam`` most probable."""

    def __init__(self, first: Any, second: Any, *, weight: float = 0.5, beam: int = 4, name: str = "pattern-both"):
        self.first, self.second, self.weight, self.beam, self.name = first, second, weight, beam, name

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        beams = []
        for a, b in zip(self.first.plan_batch(questions), self.second.plan_batch(questions), strict=True):
            mass: dict[tuple, float] = {}
            schema_of = {}
            for entries, w in ((a, self.weight), (b, 1.0 - self.weight)):
                for entry in entries:
                    key = (entry.schema.triples, entry.schema.answer)  # one plan, whatever strategy each chose
                    mass[key] = mass.get(key, 0.0) + w * entry.score
                    schema_of.setdefault(key, entry.schema)
            order = sorted(mass, key=lambda k: -mass[k])[: self.beam]
            beams.append([ScoredSchema(schema_of[k], mass[k]) for k in order])
        return beams

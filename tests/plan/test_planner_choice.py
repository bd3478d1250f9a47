"""train-planner's choice between templates and paths rests on a beam's best answer, walked exactly."""

from __future__ import annotations

from stem_jax.data.types import PathStep, Question
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.mixed import MixedPlanner
from stem_jax.plan.oracle import schema_from_path
from stem_jax.plan.training import beam_answer_hit

INDEX = build_index([("Kismet", "directed_by", "Dieterle"), ("Kismet", "written_by", "Knoblock"),
                     ("Kismet", "starred", "Colman"), ("Kismet", "starred", "Dietrich")])
QUESTION = Question(qid="q", text="who directed Kismet", topic_entities=("Kismet",), answers=("Dieterle",))


class FixedPlanner:
    def __init__(self, *beam):
        self.beam = [ScoredSchema(schema_from_path("Kismet", (PathStep(r),), "Breadth"), p) for r, p in beam]

    def plan_batch(self, questions):
        return [list(self.beam) for _ in questions]


def test_the_answer_with_most_beam_probability_counts():
    assert beam_answer_hit(FixedPlanner(("directed_by", 0.6), ("written_by", 0.4)), [QUESTION], INDEX) == 1.0
    assert beam_answer_hit(FixedPlanner(("written_by", 0.6), ("directed_by", 0.4)), [QUESTION], INDEX) == 0.0
    # two plans agreeing on an answer outweigh a more probable single plan
    agree = FixedPlanner(("written_by", 0.45), ("directed_by", 0.3), ("directed_by", 0.25))
    assert beam_answer_hit(agree, [QUESTION], INDEX) == 1.0


def test_a_tie_is_a_fair_draw_among_the_tied():
    q = Question(qid="q", text="who starred in Kismet", topic_entities=("Kismet",), answers=("Colman",))
    assert beam_answer_hit(FixedPlanner(("starred", 1.0)), [q], INDEX) == 0.5


def test_mixed_beams_add_the_probabilities_of_one_plan():
    mixed = MixedPlanner(FixedPlanner(("written_by", 0.9), ("directed_by", 0.1)),
                         FixedPlanner(("directed_by", 0.8), ("starred", 0.2)), weight=0.5)
    (beam,) = mixed.plan_batch([QUESTION])
    assert [(e.schema.triples[0].relation, round(e.score, 6)) for e in beam] == [
        ("written_by", 0.45), ("directed_by", 0.45), ("starred", 0.1)]

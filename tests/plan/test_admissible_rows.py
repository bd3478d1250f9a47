"""The pattern planner's type filter over a batch (array passes) equals the plain template-by-template reference."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.data.types import Question
from stem_jax.kg.index import build_index
from stem_jax.plan.pattern import PatternPlanner, TrainConfig
from stem_jax.plan.templates import Template


def _planner(rng: np.random.Generator) -> PatternPlanner:
    triples = [(f"e{rng.integers(20)}", f"r{rng.integers(5)}", f"e{rng.integers(20)}") for _ in range(40)]
    triples.append(("e0", "r0", "e0"))  # a self-loop heads and tails one relation
    index = build_index(triples)
    relations = [f"r{i}" for i in range(6)]  # r5 is in no triple: a template needing it is never admissible

    def node(slot: int) -> str:
        return f"{{{slot}}}" if slot >= 0 else "[ENT1]"

    templates = []
    for _ in range(int(rng.integers(1, 15))):
        edges = tuple((node(int(rng.integers(-1, 3))), str(rng.choice(relations)), node(int(rng.integers(-1, 3))))
                      for _ in range(int(rng.integers(1, 4))))
        templates.append(Template(edges, "[ENT1]"))
    t = len(templates)
    return PatternPlanner(templates=tuple(templates), params={}, config=TrainConfig(),
                          bank=np.zeros((1, 4), np.float16), bank_targets=np.zeros((1, t), np.float32),
                          bank_breadth=np.zeros(1, np.float32), prior_breadth=np.zeros(t, np.float32),
                          encoder_name="x", index=index)


@pytest.mark.parametrize("seed", range(30))
def test_batched_type_filter_equals_the_per_template_reference(seed):
    rng = np.random.default_rng(seed)
    planner = _planner(rng)
    questions = [Question(qid=str(i), text="q", answers=(),
                          topic_entities=tuple(f"e{e}" if e < 22 else "missing" for e in
                                               rng.integers(0, 24, int(rng.integers(0, 4)))))
                 for i in range(int(rng.integers(0, 8)))]
    got = planner.admissible_rows(questions)
    assert got.shape == (len(questions), len(planner.templates))
    for row, question in zip(got, questions, strict=True):
        assert row.tolist() == planner.admissible(question).tolist()

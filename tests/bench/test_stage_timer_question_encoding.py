"""`bench stages` times a wrapped template classifier's question encoding as its own stage when the request keeps the
vectors (batches of at most the encoder's memo call), and counts it as planning otherwise."""

from __future__ import annotations

import types

from stem_jax.bench.stages import StageTimer
from stem_jax.plan.mixed import MixedPlanner


class _Classifier:
    def embed(self, questions):
        return questions

    def score_embeddings(self, x):
        return x


def _timer(planner, memo_call: int) -> StageTimer:
    timer = StageTimer.__new__(StageTimer)
    timer.engine = types.SimpleNamespace(encoder=types.SimpleNamespace(MEMO_CALL=memo_call))
    timer.planner = planner
    return timer


def test_the_classifier_inside_a_mixed_planner_encodes_as_its_own_stage():
    classifier = _Classifier()
    wrapped = types.SimpleNamespace(base=MixedPlanner(classifier, types.SimpleNamespace()))
    assert _timer(wrapped, 64)._question_encoder(64) is classifier
    assert _timer(wrapped, 64)._question_encoder(65) is None  # the request would not keep its vectors
    assert _timer(types.SimpleNamespace(), 64)._question_encoder(1) is None  # no classifier inside

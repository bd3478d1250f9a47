"""What every small model trained over the text encoder's embeddings carries, and how its parameters are filed.

The path planner (:class:`~stem_jax.plan.path_ranker.PathRanker`) and the answer scorer
(:class:`~stem_jax.answer.scorer.AnswerScorer`) are both a dict of arrays read against one encoder's vectors, a
softmax temperature fitted on held-out questions and a training report; both save their parameters as
``params/<name>`` members of one ``.npz`` next to a JSON manifest (:func:`stem_jax.atomic.save_model_files`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

PARAMS_PREFIX = "params/"


@dataclasses.dataclass(kw_only=True)
class TrainedModel:
    """``params``: the model's arrays by name. ``encoder_name``: the encoder whose vectors it was trained on (a run
    that encodes with another is refused, since the vectors would mean something else). ``temperature``: divides
    the logits before the softmax, fitted on held-out questions. ``report``: what training measured."""

    params: dict[str, np.ndarray]
    encoder_name: str
    temperature: float = 1.0
    report: dict[str, Any] = dataclasses.field(default_factory=dict)

    def param_members(self) -> dict[str, np.ndarray]:
        """The parameters as ``.npz`` members (``params/<name>``)."""
        return {f"{PARAMS_PREFIX}{k}": np.asarray(v) for k, v in self.params.items()}


def params_from_members(arrays: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters among a saved model's ``.npz`` members (the inverse of :meth:`TrainedModel.param_members`)."""
    return {k[len(PARAMS_PREFIX):]: v for k, v in arrays.items() if k.startswith(PARAMS_PREFIX)}

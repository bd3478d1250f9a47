"""The one small interface every retrieval method (STEM, SAFE, SCR, ...) implements.

A method is built once from a :class:`MethodContext` (the shared dataset, KG index, embeddings,
encoder, planner and config, all loaded by :class:`stem_jax.engine.Engine`) and then answers
batches of questions with :meth:`RetrievalMethod.retrieve`. Everything a method returns is in KG
ids; turning it into a ``predictions.jsonl`` record (display names, coverage against the gold
path, per-stage milliseconds) is shared code (:func:`stem_jax.eval.records.make_record`), so
every method's rows are scored identically.

A new method is one folder ``stem_jax/methods/<name>/`` whose ``__init__`` exposes
``build(context) -> RetrievalMethod`` and an entry in :data:`stem_jax.methods.METHODS`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from stem_jax.answer.scorer import ScoredAnswers
from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.kg.index import KGIndex
from stem_jax.kg.mediators import mediator_mask


@dataclasses.dataclass
class Retrieval:
    """What a method found for one question.

    Attributes:
      qid: the question's id.
      answers: (KG entity id, score) pairs, best first.
      evidence: KG triple ids of the retrieved evidence subgraph.
      chains: optional readable reasoning chains (for display and LLM answer generation).
      stage_ms: milliseconds per stage spent on this question (shares of batch times).
      info: method-specific JSON-able extras written into the record (plans, strategies, ...).
      overflow: matches dropped by a capacity (0 when the method has none).
    """

    qid: str
    answers: list[tuple[int, float]]
    evidence: list[int] = dataclasses.field(default_factory=list)
    chains: list[str] = dataclasses.field(default_factory=list)
    stage_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    overflow: int = 0


@dataclasses.dataclass
class MethodContext:
    """Shared, already-loaded resources a method is built from (never re-loaded per method)."""

    dataset: Dataset
    index: KGIndex
    embeddings: Any  # stem_jax.kg.embeddings.KGEmbeddings
    encoder: Any  # stem_jax.encoder.base.TextEncoder
    config: StemConfig
    cache_dir: Path | None = None  # <cache>/<dataset>: per-dataset cache folder
    planner: Any = None  # stem_jax.plan.base.BatchPlanner, or None for methods without one
    guidance: Any = None  # optional guidance provider (STEM's Triple-GNN)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)  # method-specific (checkpoint paths, ...)

    def display(self, entity: str) -> str:
        names = self.dataset.entity_names or {}
        return names.get(entity, entity)

    @functools.cached_property
    def mediators(self) -> np.ndarray | None:
        """bool [entities]: the KG's mediator nodes (:mod:`stem_jax.kg.mediators`), walked through and never
        returned as answers; None when the KG has none or ``engine.skip_mediators`` is off. Made once."""
        if not self.config.engine.skip_mediators:
            return None

        mask = mediator_mask(self.index.entities, self.dataset.entity_names)
        return mask if mask.any() else None

    @functools.cached_property
    def answer_scorer(self) -> Any:
        """The KG's learned answer scorer (:class:`stem_jax.answer.scorer.ScoredAnswers`) when ``train-planner``
        stored one for this encoder and ``engine.answer_scorer`` is ``auto`` (the paper preset has none); else None.
        Loaded once."""
        engine = self.config.engine
        if engine.answer_scorer == "off" or engine.preset == "paper" or self.cache_dir is None:
            return None

        return ScoredAnswers.stored(self.cache_dir, self.index, self.dataset.entity_names, self.encoder)


@runtime_checkable
class RetrievalMethod(Protocol):
    """A retrieval method: questions in, ranked KG entities and evidence triples out."""

    name: str

    def prepare(self, questions: Sequence[Question], *, show_progress: bool = False) -> dict[str, Any]:
        """Optional whole-split work before the first batch (planning, text encodings).

        Returns JSON-able statistics for metrics.json (may be empty)."""
        ...

    def retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        """One :class:`Retrieval` per question, in order."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes this method's results (config sections, checkpoints, planner)."""
        ...

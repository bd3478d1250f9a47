""":class:`StemPipeline`: the STEM holder (:class:`~stem_jax.methods.stem.resources.StemResources`) with each stage
as a method, for callers that hold one object (tests, experiments, benchmarks).

Every method is one call of a stage function: :func:`~stem_jax.methods.stem.plan.plan`,
:func:`~stem_jax.methods.stem.anchor.anchor`, :func:`~stem_jax.methods.stem.trace.trace` and
:func:`~stem_jax.methods.stem.rank.rank`; :meth:`StemPipeline.trace_points` composes anchor and trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from stem_jax.answer.rank import ChunkAnswers
from stem_jax.data.types import Question
from stem_jax.eval.records import make_record
from stem_jax.methods.base import Retrieval
from stem_jax.methods.stem import anchor as anchor_stage
from stem_jax.methods.stem import plan as plan_stage
from stem_jax.methods.stem import rank as rank_stage
from stem_jax.methods.stem import trace as trace_stage
from stem_jax.methods.stem.resources import StemResources
from stem_jax.methods.stem.trace import default_grid_batch, narrowed, trace_grid_batch
from stem_jax.methods.stem.types import (
    STEP_BUCKETS,
    Output,
    Planner,
    Run,
    StemHyper,
    fold_name,
    run_buckets,
    split_by_question,
    steps_bucket,
)
from stem_jax.trace.tracer import TraceBatch

__all__ = ["STEP_BUCKETS", "Planner", "Run", "StemHyper", "StemPipeline", "default_grid_batch", "fold_name",
           "narrowed", "run_buckets", "steps_bucket", "trace_grid_batch", "trace_points"]


def trace_points(res: StemResources, runs: Sequence[Run], hypers: Sequence[StemHyper],
                 guidance: np.ndarray | None = None, *, grid_batch: int | None = -1,
                 ) -> tuple[list[list[Output]], dict[str, float]]:
    """Anchor and trace ``runs`` at each of the P points ``hypers``: per point, per-run host arrays, and the
    stage seconds (``guidance``: int32 [P, R, G], default the runs' own rows at every point)."""
    traced = trace_stage.trace(res, anchor_stage.anchor(res, runs, hypers, guidance), grid_batch=grid_batch)
    return traced.outputs, traced.seconds


class StemPipeline(StemResources):
    """The STEM holder with the stages as methods (each one stage function call)."""

    def plan_all(self, questions: Sequence[Question], planner: Planner) -> tuple[list[list[Run]], dict[str, int]]:
        """:func:`~stem_jax.methods.stem.plan.plan`."""
        return plan_stage.plan(self, questions, planner)

    def guidance_rows(self, runs: Sequence[Run]) -> np.ndarray:
        """:func:`~stem_jax.methods.stem.anchor.guidance_rows`."""
        return anchor_stage.guidance_rows(self, runs)

    def anchor(self, runs: Sequence[Run], guidance_rows: np.ndarray, timings: dict[str, float] | None = None, *,
               lam: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every run's (anchor, score) at λ=``lam`` (default: the configured λ)."""
        anchored = anchor_stage.anchor(self, runs, [self.hyper.replace(lam=self.hyper.lam if lam is None else lam)],
                                       guidance_rows[None])
        if timings is not None:
            timings["anchor"] = timings.get("anchor", 0.0) + anchored.seconds
        return anchored.entity[0], anchored.score[0]

    def exact_anchor(self, run: Run, guidance_row: np.ndarray, lam: float | None = None,
                     ) -> tuple[int, np.float32] | None:
        return anchor_stage.exact_anchor(self, run, guidance_row, self.hyper.lam if lam is None else lam)

    def exact_anchors(self, runs: Sequence[Run], guidance_rows: np.ndarray, lam: float | None = None,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return anchor_stage.exact_anchors(self, runs, guidance_rows, self.hyper.lam if lam is None else lam)

    def named_rows(self, runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
        return anchor_stage.named_rows(self, runs)

    def mention_rows(self, runs: Sequence[Run]) -> dict[str, np.ndarray]:
        return anchor_stage.mention_rows(self, runs)

    def _anchor_on_device(self, runs: Sequence[Run], guidance_rows: np.ndarray, anchors: np.ndarray,
                          scores: np.ndarray, where: np.ndarray, lam: float) -> None:
        anchor_stage.anchor_on_device(self, runs, guidance_rows, anchors, scores, where, lam)

    def groups(self, runs: Sequence[Run], buckets: np.ndarray | None = None,
               ) -> list[tuple[tuple[bool, int], list[int]]]:
        return trace_stage.groups(self, runs, buckets)

    def trace_batch(self, runs: Sequence[Run], anchors: np.ndarray, anchor_scores: np.ndarray, size: int,
                    bucket: int, guidance_rows: np.ndarray | None = None) -> TraceBatch:
        """:func:`~stem_jax.methods.stem.trace.make_batch`."""
        return trace_stage.make_batch(self, runs, anchors, anchor_scores, size, bucket, guidance_rows)

    def trace(self, runs: Sequence[Run], hyper: StemHyper | None = None,
              ) -> tuple[list[Output], dict[str, float]]:
        """Anchor and trace ``runs`` at ``hyper`` (default: the configured λ, τ and effective θ)."""
        outputs, seconds = trace_points(self, runs, [self.resolve(hyper)])
        return outputs[0], seconds

    def trace_points(self, runs: Sequence[Run], hypers: Sequence[StemHyper], guidance: np.ndarray | None = None, *,
                     grid_batch: int | None = -1) -> tuple[list[list[Output]], dict[str, float]]:
        """:func:`trace_points` on this holder."""
        return trace_points(self, runs, hypers, guidance, grid_batch=grid_batch)

    def warm_up(self, step_buckets: Sequence[int], max_runs: int) -> int:
        """Compile every tracer a call of at most ``max_runs`` runs can reach
        (:func:`~stem_jax.methods.stem.trace.warm_up`), and the device ranking when answers are ranked there."""
        visited = trace_stage.warm_up(self, step_buckets, max_runs)
        if self.answers_on_device():
            rank_stage.warm_up_ranking(self.rank_rules())
        return visited

    def ranking_gap(self, runs: Sequence[Run], hyper: StemHyper | None = None) -> float:
        return rank_stage.ranking_gap(self.rank_rules(), runs, self.resolve(hyper))

    def rank_on_device(self, chunk: ChunkAnswers, gaps: Sequence[float], exclude: Sequence[tuple[int, int]],
                       ) -> list[list[tuple[int, float]]]:
        rules = dataclasses.replace(self.rank_rules(), mediator_mask=self.mediator_mask())
        return rank_stage.rank_on_device(rules, chunk, gaps, exclude)

    def fold_chunk(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
                   outputs: Sequence[Sequence[Output]]) -> tuple[ChunkAnswers, list[tuple[int, int]]]:
        chunk, exclude, _ = self._fold_chunk(questions, runs, outputs)
        return chunk, exclude

    def _fold_chunk(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
                    outputs: Sequence[Sequence[Output]],
                    ) -> tuple[ChunkAnswers, list[tuple[int, int]], list[tuple[np.ndarray, np.ndarray]]]:
        return rank_stage.fold(self.index, self.rank_rules(), questions, runs, outputs)

    def retrievals(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
                   outputs: Sequence[Sequence[Output]], stage_ms: dict[str, float] | None = None,
                   hyper: StemHyper | None = None) -> list[Retrieval]:
        """:func:`~stem_jax.methods.stem.rank.rank` under this holder's rules."""
        return rank_stage.rank(self.index, self.rank_rules(), questions, runs, outputs, self.resolve(hyper),
                               display=self.context.display, stage_ms=stage_ms)

    def retrieval(self, question: Question, runs: Sequence[Run], outputs: Sequence[Output],
                  stage_ms: dict[str, float] | None = None, hyper: StemHyper | None = None) -> Retrieval:
        return self.retrievals([question], [runs], [outputs], stage_ms, hyper)[0]

    def record(self, question: Question, runs: Sequence[Run], outputs: Sequence[Output],
               stage_ms: dict[str, float] | None = None, hyper: StemHyper | None = None) -> dict[str, Any]:
        """The ``predictions.jsonl`` record of :meth:`retrieval` (the shared record builder)."""
        return make_record(self.context, question, self.retrieval(question, runs, outputs, stage_ms, hyper), "stem")

    def split(self, flat: Sequence[Any], runs: Sequence[Sequence[Run]]) -> list[list[Any]]:
        return split_by_question(flat, runs)

"""STEM as a :class:`~stem_jax.methods.base.RetrievalMethod`: plan, ground, encode, guide, anchor, trace.

A thin adapter over :class:`stem_jax.eval.runner.Evaluator`, which holds the device-side KG and the
compiled tracers. :meth:`StemMethod.prepare` plans every question of a split once (so the
schema-text cache key is stable across resumed runs), embeds the schema triples and attaches the
guidance graph; :meth:`StemMethod.retrieve` anchors and traces a chunk in padded jit batches.
Questions that were not prepared (``stem-jax ask``) are prepared on the fly.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from stem_jax.config import as_dict
from stem_jax.data.types import Question
from stem_jax.methods.base import MethodContext, Retrieval


class StemMethod:
    name = "stem"

    def __init__(self, context: MethodContext, *, evaluator: Any = None):
        """``evaluator``: reuse an existing :class:`~stem_jax.eval.runner.Evaluator` (its device arrays,
        compiled tracers and caches) instead of building one from ``context``."""
        from stem_jax.eval.runner import Evaluator

        self.context = context
        self.evaluator = evaluator or Evaluator(
            context.dataset, context.index, context.embeddings, context.encoder, context.config,
            cache_dir=None if context.cache_dir is None else context.cache_dir / "schema-texts",
            guidance=context.guidance)
        self.runs: dict[str, list[Any]] = {}
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.prepared_questions = 0
        self.skipped: dict[str, int] = defaultdict(int)
        self.planner_fn = context.options.get("planner_fn")  # per-question planner (plan store), if any

    @classmethod
    def from_evaluator(cls, evaluator: Any, planner_fn: Any) -> StemMethod:
        """Wrap an existing evaluator and a per-question planner (the ablation and sweep callers)."""
        context = MethodContext(evaluator.dataset, evaluator.index, evaluator.embeddings, evaluator.encoder,
                                evaluator.config, guidance=evaluator.guidance, options={"planner_fn": planner_fn})
        return cls(context, evaluator=evaluator)

    def fingerprint(self) -> dict[str, Any]:
        config = self.context.config
        info = {"method": self.name, "tracer": as_dict(config.tracer), "engine": as_dict(config.engine),
                "planner": as_dict(config.planner), "subgraph": as_dict(config.subgraph),
                "guidance": None}
        if self.context.guidance is not None:
            info["guidance"] = {"k_prime": config.guidance.k_prime,
                                "params_sha": getattr(self.context.guidance, "info", {}).get("params_sha")}
        return info

    def _planner_fn(self, questions: Sequence[Question]):
        if self.planner_fn is not None:
            return self.planner_fn, {}
        from stem_jax.plan.factory import planned

        log = self.context.options.get("log")
        plan, _, info = planned(self.context.planner, list(questions), log=log if len(questions) > 1 else None)
        return plan, info

    def prepare(self, questions: Sequence[Question], *, show_progress: bool = False) -> dict[str, Any]:
        todo = [q for q in questions if q.qid not in self.runs]
        if not todo:
            return {}
        began = time.perf_counter()
        plan, plan_info = self._planner_fn(todo)
        runs, skipped = self.evaluator.plan_all(todo, plan)
        plan_seconds = time.perf_counter() - began
        for reason, n in skipped.items():
            self.skipped[reason] += n
        began = time.perf_counter()
        texts = [t for rs in runs for run in rs for t in run.plan.step_texts()]
        self._embed(texts, show_progress)
        encode_seconds = time.perf_counter() - began
        stats: dict[str, Any] = {"planning": plan_info, "plan_skips": dict(skipped)}
        began = time.perf_counter()
        if self.context.guidance is not None:
            stats["guidance"] = self.context.guidance.attach(todo, runs, show_progress=show_progress)
        gnn_seconds = time.perf_counter() - began
        for question, rs in zip(todo, runs, strict=True):
            self.runs[question.qid] = rs
        per_question = 1000.0 / max(len(todo), 1)
        self.prepared_ms = {"plan": plan_seconds * per_question, "encode": encode_seconds * per_question}
        if self.context.guidance is not None:
            self.prepared_ms["gnn"] = gnn_seconds * per_question
        self.stage_seconds["plan"] += plan_seconds
        self.stage_seconds["encode"] += encode_seconds
        self.stage_seconds["gnn"] += gnn_seconds
        self.prepared_questions += len(todo)
        return stats

    def _embed(self, texts: list[str], show_progress: bool) -> None:
        """The first call embeds through the resumable disk cache (a whole split); later calls (``ask``,
        ``retrieve`` of new questions) append only unseen texts in memory."""
        import numpy as np

        evaluator = self.evaluator
        if evaluator.text_emb is None:
            evaluator.embed_texts(texts, show_progress)
            self._text_buffer = None
            return
        known = evaluator.text_rows
        new = sorted({t for t in texts if t not in known})  # not set(known): that copies every row per call
        if not new:
            return
        matrix = np.asarray(evaluator.encoder.encode(new), dtype=np.float16).astype(np.float32)
        start = len(known)
        # Rows are appended into a buffer that doubles when full, so a long-lived engine (``ask``, a
        # server) does not copy the whole table for every question; text_emb is a view of its rows.
        buffer = getattr(self, "_text_buffer", None)
        if buffer is None or evaluator.text_emb.base is not buffer or len(buffer) < start + len(new):
            grown = np.empty((max(2 * (start + len(new)), 1024), matrix.shape[1]), np.float32)
            grown[:start] = evaluator.text_emb[:start]
            buffer = self._text_buffer = grown
        buffer[start : start + len(new)] = matrix
        known.update({t: start + i for i, t in enumerate(new)})
        evaluator.text_emb = buffer[: start + len(new)]

    def forget(self, qids: Sequence[str]) -> None:
        """Drop prepared plans, so the next :meth:`retrieve` plans these questions afresh (and times it)."""
        for qid in qids:
            self.runs.pop(qid, None)

    def retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        self.prepare([q for q in questions if q.qid not in self.runs])
        chunk_runs = [run for q in questions for run in self.runs[q.qid]]
        outputs, timings = self.evaluator.trace_runs(chunk_runs)
        n = max(len(questions), 1)
        stage_ms = dict(getattr(self, "prepared_ms", {}))
        stage_ms.update({"anchor": 1000 * timings["anchor"] / n, "trace": 1000 * timings["trace"] / n})
        began = time.perf_counter()
        results, cursor = [], 0
        records = []
        for question in questions:
            mine = self.runs[question.qid]
            outs = outputs[cursor : cursor + len(mine)]
            cursor += len(mine)
            records.append(self.evaluator.record(question, mine, outs, stage_ms))
        answer_ms = 1000 * (time.perf_counter() - began) / n
        for question, record in zip(questions, records, strict=True):
            record.setdefault("ms", {})["answer"] = round(answer_ms, 3)
            results.append(Retrieval(question.qid, answers=[], stage_ms=dict(record["ms"]),
                                     info={"record": record}, overflow=int(record.get("overflow", 0))))
        self.stage_seconds["anchor"] += timings["anchor"]
        self.stage_seconds["trace"] += timings["trace"]
        self.stage_seconds["answer"] += answer_ms * n / 1000
        return results


def build(context: MethodContext) -> StemMethod:
    return StemMethod(context)

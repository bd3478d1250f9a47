"""STEM as a :class:`~stem_jax.methods.base.RetrievalMethod`: plan, ground, encode, guide, anchor, trace.

A thin adapter over :class:`~stem_jax.methods.stem.pipeline.StemPipeline`, which holds the
device-side KG and the compiled tracers. :meth:`StemMethod.prepare` plans every question of a split
once (so the schema-text cache key is stable across resumed runs), embeds the schema triples and
attaches the guidance graph; :meth:`StemMethod.retrieve` traces a chunk through
:meth:`StemPipeline.trace` and answers it with :meth:`StemPipeline.retrieval`, both at the method's
``hyper`` (default: the configured λ, τ and effective θ). Questions that were not prepared
(``stem-jax ask``) are prepared on the fly.

Thread safety: :meth:`prepare`, :meth:`embed`, :meth:`forget` and :meth:`retrieve` grow state that
is shared by every method over one pipeline (the prepared runs, the pipeline's schema-text rows and
embedding table, which are replaced together); they hold one re-entrant lock per pipeline
(:func:`pipeline_lock`) for their whole duration, so concurrent callers take turns and each gets the
answers it would get alone.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import as_dict
from stem_jax.data.types import Question
from stem_jax.eval.loop import evaluate_method
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.methods.stem.pipeline import Planner, Run, StemHyper, StemPipeline
from stem_jax.plan.factory import planned

_LOCKS: weakref.WeakKeyDictionary[StemPipeline, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def pipeline_lock(pipeline: StemPipeline) -> threading.RLock:
    """The one re-entrant lock of ``pipeline``'s mutable state, shared by every method built over it."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(pipeline)
        if lock is None:
            lock = _LOCKS[pipeline] = threading.RLock()
        return lock


class StemMethod:
    name = "stem"

    def __init__(self, context: MethodContext, *, pipeline: StemPipeline | None = None,
                 hyper: StemHyper | None = None):
        """``pipeline``: reuse an existing :class:`StemPipeline` (its device arrays, compiled tracers and
        caches) instead of building one from ``context``; ``hyper``: trace at these λ, τ, θ instead of
        the pipeline's own (an ablation row, a calibration point)."""
        self.context = context
        self.pipeline = pipeline or StemPipeline(
            context.dataset, context.index, context.embeddings, context.encoder, context.config,
            cache_dir=None if context.cache_dir is None else context.cache_dir / "schema-texts",
            guidance=context.guidance)
        self.hyper = self.pipeline.hyper if hyper is None else hyper
        self.pipeline.answer_scorer = context.answer_scorer
        self.runs: dict[str, list[Run]] = {}
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.prepared_questions = 0
        self.prepared_ms: dict[str, float] = {}
        self.skipped: dict[str, int] = defaultdict(int)
        self.planner_fn = context.options.get("planner_fn")  # per-question planner (plan store), if any
        self._text_buffer: np.ndarray | None = None
        self.lock = pipeline_lock(self.pipeline)
        # Questions prepared on the fly by retrieve, least recently used first, with the Question each
        # was prepared for; at most ``keep_online`` of them keep their runs (0: kept until forgotten).
        self.keep_online = 0
        self._online: OrderedDict[str, Question] = OrderedDict()
        # The schema-text table: rows below _base_rows came from the first (whole-split) embed and stay;
        # rows appended later for new questions are compacted once more than max_online_texts of them
        # have accumulated, keeping those that prepared runs still use (see _compact).
        self.max_online_texts = 1 << 15
        self._base_rows: int | None = None
        self._compact_at = self.max_online_texts

    @property
    def compactions(self) -> int:
        """Compactions of the shared step-text table, by this method or another over the same pipeline."""
        return self.pipeline.text_compactions

    @classmethod
    def from_pipeline(cls, pipeline: StemPipeline, planner_fn: Any, *, hyper: StemHyper | None = None) -> StemMethod:
        """Wrap an existing pipeline and a per-question planner (ablations, sweeps, experiments)."""
        context = MethodContext(pipeline.dataset, pipeline.index, pipeline.embeddings, pipeline.encoder,
                                pipeline.config, guidance=pipeline.guidance, options={"planner_fn": planner_fn})
        return cls(context, pipeline=pipeline, hyper=hyper)

    def with_hyper(self, hyper: StemHyper) -> StemMethod:
        """The same method (pipeline, prepared plans and guidance shared) tracing at ``hyper``."""
        other = StemMethod(self.context, pipeline=self.pipeline, hyper=hyper)
        other.runs = self.runs
        other.planner_fn = self.planner_fn
        return other

    def effective(self) -> dict[str, Any]:
        """What this method traces with: the effective engine and θ source, and the traced λ, τ, θ."""
        return {**self.pipeline.settings.as_dict(), "hyper": self.hyper.as_dict()}

    def fingerprint(self) -> dict[str, Any]:
        config = self.context.config
        info = {"method": self.name, "tracer": as_dict(config.tracer), "engine": as_dict(config.engine),
                "planner": as_dict(config.planner), "subgraph": as_dict(config.subgraph),
                "guidance": None, "effective": self.effective(),
                "answer_scorer": None if self.pipeline.answer_scorer is None else self.pipeline.answer_scorer.fingerprint()}
        if self.context.guidance is not None:
            info["guidance"] = {"k_prime": config.guidance.k_prime,
                                "params_sha": getattr(self.context.guidance, "info", {}).get("params_sha")}
        return info

    def planner_for(self, questions: Sequence[Question]) -> tuple[Planner, dict[str, Any]]:
        """The per-question planner for ``questions`` (a plan store's, or the context planner run once)."""
        if self.planner_fn is not None:
            return self.planner_fn, {}
        log = self.context.options.get("log")
        plan, _, info = planned(self.context.planner, list(questions), log=log if len(questions) > 1 else None)
        return plan, info

    def prepare(self, questions: Sequence[Question], *, show_progress: bool = False) -> dict[str, Any]:
        with self.lock:
            return self._prepare(questions, show_progress)

    def _prepare(self, questions: Sequence[Question], show_progress: bool) -> dict[str, Any]:
        todo = [q for q in questions if q.qid not in self.runs]
        if not todo:
            return {}
        began = time.perf_counter()
        plan, plan_info = self.planner_for(todo)
        runs, skipped = self.pipeline.plan_all(todo, plan)
        plan_seconds = time.perf_counter() - began
        for reason, n in skipped.items():
            self.skipped[reason] += n
        began = time.perf_counter()
        self.embed([t for rs in runs for run in rs for t in run.plan.step_texts()], show_progress)
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

    def embed(self, texts: list[str], show_progress: bool) -> None:
        """The first call embeds through the resumable disk cache (a whole split); later calls (``ask``,
        ``retrieve`` of new questions) append only unseen texts in memory."""
        with self.lock:
            self._embed(texts, show_progress)

    def _embed(self, texts: list[str], show_progress: bool) -> None:
        pipeline = self.pipeline
        if pipeline.text_emb is None:
            pipeline.embed_texts(texts, show_progress)
            self._text_buffer = None
            return
        known = pipeline.text_rows
        new = sorted({t for t in texts if t not in known})  # not set(known): that copies every row per call
        if not new:
            return
        matrix = np.asarray(pipeline.encoder.encode(new), dtype=np.float16).astype(np.float32)
        if self._base_rows is None:
            self._base_rows = len(known)
        if len(known) + len(new) - self._base_rows > max(self._compact_at, self.max_online_texts):
            self._compact(texts)
        start = len(known)
        # Rows are appended into a buffer that doubles when full, so a long-lived engine (``ask``, a
        # server) does not copy the whole table for every question; text_emb is a view of its rows.
        buffer = self._text_buffer
        if buffer is None or pipeline.text_emb.base is not buffer or len(buffer) < start + len(new):
            grown = np.empty((max(2 * (start + len(new)), 1024), matrix.shape[1]), np.float32)
            grown[:start] = pipeline.text_emb[:start]
            buffer = self._text_buffer = grown
        buffer[start : start + len(new)] = matrix
        known.update({t: start + i for i, t in enumerate(new)})
        pipeline.text_emb = buffer[: start + len(new)]

    def _compact(self, texts: Sequence[str]) -> None:
        """Drop the online rows of the step-text table that neither ``texts`` nor any prepared run uses.

        Runs once per ``max_online_texts`` new texts, so the table of a long-lived server stays bounded
        without being copied on every call; kept rows keep their vectors (copied, never re-encoded). A run
        of another method over this pipeline whose texts were dropped gets them again before it is traced
        (:meth:`_retrieve` embeds every traced run's texts)."""
        pipeline, base = self.pipeline, self._base_rows or 0
        keep = set(texts)
        for runs in self.runs.values():
            for run in runs:
                keep.update(run.plan.step_texts())
        known = pipeline.text_rows
        online = sorted((i, t) for t, i in known.items() if i >= base)
        kept = [(i, t) for i, t in online if t in keep]
        old = pipeline.text_emb
        buffer = np.empty((max(2 * (base + len(kept)), 1024), old.shape[1]), np.float32)
        buffer[:base] = old[:base]
        buffer[base : base + len(kept)] = old[[i for i, _ in kept]]
        for _, t in online:
            del known[t]
        known.update({t: base + j for j, (_, t) in enumerate(kept)})
        self._text_buffer = buffer
        pipeline.text_emb = buffer[: base + len(kept)]
        self._compact_at = 2 * len(kept)  # a table mostly of kept rows is not compacted again at once
        pipeline.text_compactions += 1

    def forget(self, qids: Sequence[str]) -> None:
        """Drop prepared plans, so the next :meth:`retrieve` plans these questions afresh (and times it).

        A long-lived caller (a server) instead sets ``keep_online`` to N: :meth:`retrieve` keeps the runs
        (plans, grounding, guidance) of the N questions it prepared on the fly and used last, keyed by
        qid and checked against the whole :class:`Question` (text, topic entities, gold path, subgraph),
        so a repeated question is traced without planning or guiding it again."""
        with self.lock:
            for qid in qids:
                self.runs.pop(qid, None)
                self._online.pop(qid, None)

    def retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        with self.lock:
            return self._retrieve(questions)

    def _retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        for q in questions:  # a qid prepared on the fly for another question (other text or topic) is stale
            if q.qid in self._online and self._online[q.qid] != q:
                del self._online[q.qid]
                self.runs.pop(q.qid, None)
        todo = list({q.qid: q for q in questions if q.qid not in self.runs}.values())
        kept = any(q.qid in self._online for q in questions)
        self._prepare(todo, False)
        n = max(len(questions), 1)
        if todo:  # per answer of this call (a batch may mix new and kept questions)
            stage_ms = {k: v * len(todo) / n for k, v in self.prepared_ms.items()}
        elif kept:  # prepared by an earlier call: nothing planned, encoded or guided now
            stage_ms = {k: 0.0 for k in self.prepared_ms}
        else:  # prepared ahead by prepare() (eval): its per-question cost
            stage_ms = dict(self.prepared_ms)
        for q in todo:
            self._online[q.qid] = q
        for q in questions:  # questions prepared ahead by prepare() (eval) are not online-kept
            if q.qid in self._online:
                self._online.move_to_end(q.qid)
        chunk_runs = [run for q in questions for run in self.runs[q.qid]]
        # Until a method compacts the shared table every prepared run's texts are in it; after one, some may
        # have been dropped and are embedded again (no per-call scan of every text before that).
        if chunk_runs and self.pipeline.text_compactions:
            self._embed([t for run in chunk_runs for t in run.plan.step_texts()], False)
        outputs, timings = self.pipeline.trace(chunk_runs, self.hyper)
        stage_ms.update({"anchor": 1000 * timings["anchor"] / n, "trace": 1000 * timings["trace"] / n})
        began = time.perf_counter()
        per_question, per_output, cursor = [], [], 0
        for question in questions:
            mine = self.runs[question.qid]
            per_question.append(mine)
            per_output.append(outputs[cursor : cursor + len(mine)])
            cursor += len(mine)
        results = self.pipeline.retrievals(questions, per_question, per_output, stage_ms, self.hyper)
        answer_ms = 1000 * (time.perf_counter() - began) / n
        for retrieval in results:
            retrieval.stage_ms["answer"] = answer_ms
        self.stage_seconds["anchor"] += timings["anchor"]
        self.stage_seconds["trace"] += timings["trace"]
        self.stage_seconds["answer"] += answer_ms * n / 1000
        while self.keep_online and len(self._online) > max(self.keep_online, len(questions)):
            qid, _ = self._online.popitem(last=False)
            self.runs.pop(qid, None)
        return results



def evaluate(pipeline: StemPipeline, questions: Sequence[Question], planner: Planner, out_dir: Path, *,
             hyper: StemHyper | None = None, show_progress: bool = True,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate ``questions`` with STEM on ``pipeline`` into ``out_dir`` (resumable), then score it.

    For callers that hold a pipeline (experiments, ablations, tests); :class:`stem_jax.engine.Engine`
    and the CLI go through :func:`stem_jax.eval.loop.evaluate_method` with the same method class."""
    method = StemMethod.from_pipeline(pipeline, planner, hyper=hyper)
    return evaluate_method(method, questions, out_dir, chunk_size=pipeline.config.engine.chunk_questions,
                           show_progress=show_progress, log=log)

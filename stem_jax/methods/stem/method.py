"""STEM as a :class:`~stem_jax.methods.base.RetrievalMethod`: plan, ground, encode, guide, anchor, trace.

The method composes the four stage functions over one holder
(:class:`~stem_jax.methods.stem.pipeline.StemPipeline`: the device-side KG, encoder and tracer shapes).
:meth:`StemMethod.prepare` plans every question of a split once (so the schema-text cache key is stable
across resumed runs), embeds the schema triples and attaches the guidance graph; :meth:`StemMethod.retrieve`
anchors, traces and ranks a chunk at the method's ``hyper`` (default: the configured λ, τ and effective θ),
and :meth:`StemMethod.score_grid` does the same at many points at once. Questions that were not prepared
(``stem-jax ask``) are prepared on the fly.

Thread safety: :meth:`prepare`, :meth:`embed`, :meth:`forget` and :meth:`retrieve` grow state that
is shared by every method over one pipeline (the prepared runs, the pipeline's schema-text rows and
embedding table, which are replaced together); they hold one re-entrant lock per pipeline
(:func:`pipeline_lock`) for their whole duration, so concurrent callers take turns and each gets the
answers it would get alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import gc
import threading
import time
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import as_dict
from stem_jax.data.types import Question
from stem_jax.encoder.request import request_scope
from stem_jax.eval.loop import evaluate_method
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.methods.stem import trace as trace_stage
from stem_jax.methods.stem.anchor import anchor, guidance_rows
from stem_jax.methods.stem.pipeline import StemPipeline
from stem_jax.methods.stem.plan import plan as plan_runs
from stem_jax.methods.stem.rank import rank
from stem_jax.methods.stem.settings import EffectiveSettings
from stem_jax.methods.stem.trace import trace
from stem_jax.methods.stem.types import Planner, RankRules, Run, StemHyper, split_by_question
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


@dataclasses.dataclass(frozen=True)
class StagedChunk:
    """A chunk :meth:`StemMethod.stage` has planned, anchored and traced, for :meth:`StemMethod.finish` to rank."""

    questions: list[Question]
    runs: list[list[Run]]  # per question, as traced
    outputs: list[Any]  # per run, in the order of ``runs`` flattened
    stage_ms: dict[str, float]
    rules: RankRules
    hyper: StemHyper
    context: contextvars.Context | None = None  # the request scope the chunk was traced in


@dataclasses.dataclass(frozen=True)
class GridScores:
    """What :meth:`StemMethod.score_grid` gives: per point, per question, a :class:`~stem_jax.methods.base.Retrieval`,
    and the wall seconds of its anchoring, tracing and answering, and of its compiled trace calls."""

    retrievals: list[list[Retrieval]]  # [P][Q]
    seconds: dict[str, float]
    calls: int


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

    @property
    def settings(self) -> EffectiveSettings:
        """The effective configuration this method traces with (preset-resolved engine, θ and its source)."""
        return self.pipeline.settings

    @property
    def resources(self) -> StemPipeline:
        """The holder of this method's device tables, encoder and schema-text table, for tools that check the
        stages against their plain references (``stem-jax bench trace``)."""
        return self.pipeline

    @property
    def default_hyper(self) -> StemHyper:
        """The configured λ and τ and the effective θ (what :meth:`retrieve` traces at unless given a ``hyper``)."""
        return self.pipeline.hyper

    def guidance_width(self) -> int:
        """G, the guidance entities per run a trace call takes (``engine.guidance``)."""
        return self.pipeline.shapes[True].guidance

    def guidance_rows(self, questions: Sequence[Question]) -> dict[str, np.ndarray]:
        """Per prepared question, its runs' guidance entity ids as they stand now (int32 [runs, G], -1 padded)."""
        return {q.qid: guidance_rows(self.pipeline, self.runs[q.qid]) for q in questions}

    @contextlib.contextmanager
    def answer_scorer_as(self, scorer: Any) -> Iterator[None]:
        """Within the block, rank with ``scorer`` (a learned answer scorer, a candidate collector, or None)."""
        with self.lock:
            kept = self.pipeline.answer_scorer
            self.pipeline.answer_scorer = scorer
            try:
                yield
            finally:
                self.pipeline.answer_scorer = kept

    def plan_runs(self, questions: Sequence[Question], planner: Planner | None = None,
                  ) -> tuple[list[list[Run]], dict[str, int]]:
        """Plan ``questions`` into runs now (``planner``: default this method's), without keeping them."""
        plan = self.planner_for(questions)[0] if planner is None else planner
        return plan_runs(self.pipeline, questions, plan)

    def warm_up(self, step_buckets: Sequence[int], max_runs: int) -> int:
        """Compile every tracer a call of at most ``max_runs`` runs can reach (and the device ranking when answers
        are ranked there), so warm calls never compile; returns the tracer shapes visited. The KG's relation-step
        table is opened (built the first time) too, so that a first request does not pay for it.

        What is alive then (the loaded tables, the compiled programs and JAX's traces of them) lives as long as the
        engine, so it is moved out of the garbage collector's generations (:func:`gc.freeze`): a full collection
        during a request would otherwise walk those hundreds of thousands of objects, a pause that lands on
        whichever call triggers it."""
        with self.lock:
            self.pipeline.relation_steps()
        visited = self.pipeline.warm_up(step_buckets, max_runs)
        gc.collect()  # garbage cycles left by loading and compiling are freed, not frozen
        gc.freeze()
        return visited

    def warm_up_rest(self, step_buckets: Sequence[int], after_runs: int, max_runs: int, *,
                     stop: threading.Event | None = None, progress: Callable[[int, int], None] | None = None,
                     log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
        """Compile the tracer shapes a call of ``max_runs`` runs reaches beyond those of ``after_runs`` runs (which
        :meth:`warm_up` compiled), one at a time, the smaller padded batches and capacities first. A shape compiles
        without the pipeline lock (compiling reads the method's tables only), so requests are answered meanwhile; a
        shape no call can use any more is skipped. ``stop``: when set, returns after the shape being compiled.
        ``progress(done, total)`` is called after each shape; ``log`` gets a line saying how many shapes are left.
        Returns the shapes compiled and skipped."""
        with self.lock:
            done = set(trace_stage.warm_up_shapes(self.pipeline, step_buckets, after_runs))
            todo = sorted((s for s in trace_stage.warm_up_shapes(self.pipeline, step_buckets, max_runs)
                           if s not in done), key=lambda s: (s.size, s.level, s.bucket, s.precision))
        info: dict[str, Any] = {"tracer_shapes": 0, "tracer_skipped": 0, "stopped": False}
        log(f"  compiling the tracer for batches up to {max_runs} runs: {len(todo)} more shapes ...")
        if progress is not None:
            progress(0, len(todo))
        for i, shape in enumerate(todo):
            if stop is not None and stop.is_set():
                info["stopped"] = True
                break
            if trace_stage.reachable(self.pipeline, shape):
                trace_stage.compile_shape(self.pipeline, shape)
                info["tracer_shapes"] += 1
            else:
                info["tracer_skipped"] += 1
            if progress is not None:
                progress(i + 1, len(todo))
        return info

    def score_grid(self, questions: Sequence[Question], hypers: Sequence[StemHyper], *,
                   guidance: Sequence[Mapping[str, np.ndarray]] | None = None,
                   conventions: Mapping[str, Any] | None = None, runs: Sequence[Sequence[Run]] | None = None,
                   points_per_call: int | None = None, grid_batch: int | None = -1,
                   stage_ms: Mapping[str, float] | None = None) -> GridScores:
        """Answer ``questions`` at every point of ``hypers`` (λ, τ, θ), as :meth:`retrieve` answers them at one.

        The one call behind sweeps, calibration, guidance ablations, benchmarks and the answer scorer's training:
        the questions are prepared (planned, embedded, guided) once, then anchored, traced and ranked at each
        point with the same stage functions :meth:`retrieve` uses, so a grid point equals ``eval`` at its flags.

        ``guidance``: per point, per question, guidance rows (int32 [runs, G]; a sweep's K' values), default each
        run's own. ``conventions``: KG conventions (``direction``, ``used_triples``, ``exclude_topic``) to trace
        and rank under instead of the effective engine's. ``runs``: the questions' runs, planned by the caller
        (:meth:`plan_runs`), instead of the prepared ones. ``points_per_call`` caps the points of one compiled
        trace call (None: all; 1: each point alone), ``grid_batch`` how many of them are vmapped together (-1:
        :func:`~stem_jax.methods.stem.trace.default_grid_batch`). ``stage_ms`` is copied into every retrieval's
        timings, beside each point's anchor, trace and answer milliseconds per question."""
        hypers = list(hypers)
        with self.lock:
            if runs is None:
                self._prepare([q for q in questions if q.qid not in self.runs], False)
                runs = [self.runs[q.qid] for q in questions]
            flat = [run for mine in runs for run in mine]
            texts = [t for run in flat for t in run.plan.step_texts()]
            if texts and (self.pipeline.text_emb is None or self.pipeline.text_compactions
                          or any(t not in self.pipeline.text_rows for t in texts)):
                self._embed(texts, False)
            resources = self.pipeline.with_conventions(**conventions) if conventions else self.pipeline
            rules = resources.rank_rules()
            per_call = len(hypers) if points_per_call is None else max(1, points_per_call)
            n = max(len(questions), 1)
            seconds = {"anchor": 0.0, "trace": 0.0, "answer": 0.0}
            retrievals: list[list[Retrieval]] = []
            calls = 0
            for first in range(0, len(hypers), per_call):
                part = hypers[first : first + per_call]
                rows = None
                if guidance is not None:
                    width = resources.shapes[True].guidance
                    rows = np.full((len(part), len(flat), width), -1, np.int32)
                    for j in range(len(part)):
                        if flat:
                            rows[j] = np.concatenate([guidance[first + j][q.qid] for q in questions])
                traced = trace(resources, anchor(resources, flat, part, rows), grid_batch=grid_batch)
                calls += 1
                seconds["anchor"] += traced.seconds["anchor"]
                seconds["trace"] += traced.seconds["trace"]
                share = {**(stage_ms or {}), "anchor": 1000 * traced.seconds["anchor"] / (n * len(part)),
                         "trace": 1000 * traced.seconds["trace"] / (n * len(part))}
                for j, hyper in enumerate(part):
                    began = time.perf_counter()
                    answered = rank(resources.index, rules, questions, runs,
                                    split_by_question(traced.outputs[j], runs), hyper,
                                    display=resources.context.display, stage_ms=share)
                    spent = time.perf_counter() - began
                    seconds["answer"] += spent
                    for retrieval in answered:
                        retrieval.stage_ms["answer"] = 1000 * spent / n
                    retrievals.append(answered)
        return GridScores(retrievals, seconds, calls)

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
        runs, skipped = plan_runs(self.pipeline, todo, plan)
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
        matrix = pipeline.encode_steps(new)  # placeholder-only steps read from the KG's relation-step table
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
        with self.lock, request_scope():
            return self._finish(self._stage(questions))

    def stage(self, questions: Sequence[Question]) -> StagedChunk:
        """The first part of :meth:`retrieve`: plan and encode what is not prepared, anchor and trace.

        ``finish(stage(chunk))`` equals ``retrieve(chunk)``; the two halves may run in different threads, so a
        caller can trace the next chunk while this one is ranked (:func:`stem_jax.eval.overlap.staged_ahead`)."""
        with self.lock, request_scope():
            staged = self._stage(questions)
            # the request's shared vectors travel with the chunk: ranking (a learned answer scorer) reads them
            return dataclasses.replace(staged, context=contextvars.copy_context())

    def finish(self, staged: StagedChunk) -> list[Retrieval]:
        """The rest of :meth:`retrieve` for a chunk :meth:`stage` returned: its answers ranked, in question order.

        Runs without the pipeline lock (it reads only what the chunk carries and the immutable KG index), so
        it overlaps the next chunk's :meth:`stage`; a learned answer scorer, which calls the text encoder,
        takes the lock instead."""
        guard = self.lock if staged.rules.scorer is not None else contextlib.nullcontext()
        with guard:
            if staged.context is None:
                return self._finish(staged)
            return staged.context.run(self._finish, staged)

    def _stage(self, questions: Sequence[Question]) -> StagedChunk:
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
        resources = self.pipeline
        traced = trace(resources, anchor(resources, chunk_runs, [self.hyper]))
        timings = traced.seconds
        stage_ms.update({"anchor": 1000 * timings["anchor"] / n, "trace": 1000 * timings["trace"] / n})
        per_question = [self.runs[question.qid] for question in questions]
        self.stage_seconds["anchor"] += timings["anchor"]
        self.stage_seconds["trace"] += timings["trace"]
        # the chunk keeps its own runs: evicting them below (or another caller forgetting them) cannot touch it
        while self.keep_online and len(self._online) > max(self.keep_online, len(questions)):
            qid, _ = self._online.popitem(last=False)
            self.runs.pop(qid, None)
        return StagedChunk(list(questions), per_question, traced.outputs[0], stage_ms, resources.rank_rules(),
                           self.hyper)

    def _finish(self, staged: StagedChunk) -> list[Retrieval]:
        resources = self.pipeline
        n = max(len(staged.questions), 1)
        began = time.perf_counter()
        results = rank(resources.index, staged.rules, staged.questions, staged.runs,
                       split_by_question(staged.outputs, staged.runs), staged.hyper,
                       display=resources.context.display, stage_ms=staged.stage_ms)
        answer_ms = 1000 * (time.perf_counter() - began) / n
        for retrieval in results:
            retrieval.stage_ms["answer"] = answer_ms
        self.stage_seconds["answer"] += answer_ms * n / 1000
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

"""`stem-jax bench stages`: per-stage latency of a loaded engine at several batch sizes.

Stages, in pipeline order: question encoding (MiniLM over the masked question wordings, pattern
planner only, alone or inside a mixed or branch planner), planning (template head, beam, type check, path
ranker, constraint branches), grounding + schema-triple encoding, GNN guidance (when on), anchoring, tracing, answers (the batch's ranking, evidence and records, each in one pass
over the batch, as ``Engine.retrieve``, ``serve`` and ``eval`` make them). For each batch
size the first call (which compiles new shapes) is timed on its own; then the engine precompiles
what a call of that size can reach (:meth:`~stem_jax.engine.Engine.warm_up`), and ``repeats`` warm
calls on *other* questions of the split, each planned afresh (the path planner's scoring shapes precompiled and
the answer scorer's relation texts embedded too, as ``serve`` does before serving), give p50/p95/p99 per stage and end
to end, and throughput. GNN guidance is computed, not read from its disk cache (the timer turns
that cache off on the engine's provider). The encoder's in-memory memo (repeated question wordings and schema
triples) stays on unless turned off (``encoder.memo_size = 0``: every question wording is then encoded); its hits are
reported, and so are the schema-step texts read from the KG's tables instead of encoded (the step table of texts that
name an entity, ``Kismet directed by [ENT1]``, and the relation-step table of texts between two placeholders,
``[ENT1] location time zones [ENT2]``): those are fixed per KG and encoder, built once into the embedding cache and
bounded by ``encoder.step_table_max``, and the memo setting does not change them.
Compile counts of the jitted tracer/anchor functions, peak host RSS and (on a GPU) device memory are recorded with
the jax/jaxlib versions, machine and commit.
"""

from __future__ import annotations

import contextlib
import contextvars
import resource
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from stem_jax.answer.scorer import warm_answer_scorer
from stem_jax.data.types import Question
from stem_jax.encoder.request import request_scope
from stem_jax.eval.overlap import staged_ahead
from stem_jax.eval.records import make_records
from stem_jax.plan.path_ranker import planner_parts, warm_path_planner

STAGES = ("question_encoding", "planning", "schema_encoding", "gnn", "anchoring", "tracing", "answers")


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _device_memory() -> dict[str, Any] | None:
    device = jax.devices()[0]
    if device.platform == "cpu":
        return None
    stats = device.memory_stats() or {}
    return {k: stats[k] for k in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit") if k in stats}


def _compiles(encoder: Any = None, guidance: Any = None) -> dict[str, int]:
    from stem_jax.trace.tracer import anchor_batch, trace_batch

    counts = {"trace_batch": trace_batch._cache_size(), "anchor_batch": anchor_batch._cache_size()}
    if hasattr(encoder, "compile_count"):
        counts["encoder"] = encoder.compile_count
    if guidance is not None:
        from stem_jax.gnn.infer import forward_fn, reach_forward_fn

        counts["gnn_reach"] = reach_forward_fn(guidance.spec.layers)._cache_size()
        counts["gnn_full"] = forward_fn(guidance.spec)._cache_size()
    return counts


def _memo(encoder: Any, resources: Any = None) -> dict[str, int]:
    # table_hits: schema-step texts read from the KG's step table (stem_jax/kg/step_table.py), memo or not;
    # relation_step_hits: those read from its relation-step table (stem_jax/kg/relation_steps.py)
    return {"hits": getattr(encoder, "memo_hits", 0), "misses": getattr(encoder, "memo_misses", 0),
            "table_hits": getattr(encoder, "table_hits", 0),
            "relation_step_hits": getattr(resources, "relation_step_hits", 0)}


ENCODER_STAGES = ("question_encoding", "schema_encoding")
DOMINANT_SHARE = 0.5  # the text encoder "dominates" a run when it takes at least this share of the warm time


def _encoder_work(encoder: Any) -> dict[str, int]:
    """Counters of the encoder's forwards (MiniLM keeps them; others report zeros)."""
    return {k: int(getattr(encoder, k, 0)) for k in ("tokens_encoded", "padded_tokens", "forward_calls")}


def encoder_cost(warm: Sequence[dict[str, float]], work: dict[str, int]) -> dict[str, Any]:
    """What the text encoder cost over ``warm`` calls that did ``work``: its share of the warm time,
    ms per real and per padded token, and whether it dominates (share >= ``DOMINANT_SHARE``)."""
    seconds = sum(w[s] for w in warm for s in ENCODER_STAGES)
    total = sum(w["total"] for w in warm)
    share = seconds / total if total > 0 else 0.0
    return {**work, "seconds": seconds, "share_of_total": share,
            "ms_per_token": _ms_per(seconds, work["tokens_encoded"]),
            "ms_per_padded_token": _ms_per(seconds, work["padded_tokens"]), "dominates": share >= DOMINANT_SHARE}


def _ms_per(seconds: float, count: int) -> float | None:
    return 1000 * seconds / count if count else None


def encoder_verdicts(results: dict[str, Any]) -> list[str]:
    """One sentence per batch size where the text encoder dominates the warm time (for the report)."""
    lines = []
    for size, row in results["batch_sizes"].items():
        cost = row.get("encoder_timed")
        if not cost or not cost["dominates"]:
            continue
        per_token = f", {cost['ms_per_token']:.3f} ms per token" if cost["ms_per_token"] else ""
        lines.append(f"batch {size}: the text encoder takes {100 * cost['share_of_total']:.0f}% of the warm time "
                     f"({cost['tokens_encoded']} tokens in {cost['forward_calls']} forwards{per_token}): "
                     "it dominates this run, so faster tracing cannot speed it up much")
    return lines


class StageTimer:
    """Runs one batch through the STEM stages of an engine, timing each stage on its own."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.method = engine.method("stem")
        self.planner = engine.planner if engine.planner_spec.plans is None else None
        guidance = self.method.context.guidance
        if guidance is not None:
            # time the GNN, not a read of the guidance cache (an earlier bench of the same questions
            # fills it, and the call would time a cache read)
            guidance.cache_dir = None

    def _plan(self, batch: Sequence[Question], times: dict[str, float]) -> Any:
        planner = self.planner
        if planner is not None and hasattr(planner, "embed") and hasattr(planner, "score_embeddings"):
            began = time.perf_counter()
            x = planner.embed(batch)
            times["question_encoding"] = time.perf_counter() - began
            began = time.perf_counter()
            beams = planner.beams_from_scores(batch, *planner.score_embeddings(x))
        else:
            times["question_encoding"] = 0.0
            encoding = self._question_encoder(len(batch))
            if encoding is not None:
                # a wrapped template classifier (mixed with the path ranker, with constraint branches): its question
                # vectors made first, kept by the request, which plan_batch then reads back instead of encoding
                began = time.perf_counter()
                encoding.embed(batch)
                times["question_encoding"] = time.perf_counter() - began
            began = time.perf_counter()
            beams = planner.plan_batch(batch)
        times["planning"] = time.perf_counter() - began
        by_qid = {q.qid: beam for q, beam in zip(batch, beams, strict=True)}

        def plan(question: Question, index: Any = None) -> list[Any]:
            return by_qid[question.qid]

        plan.beams = by_qid  # the pipeline reads beam probabilities from here
        return plan

    def _question_encoder(self, size: int) -> Any:
        """The template classifier inside a planner that wraps or mixes it, when a request keeps its question vectors
        for a batch of ``size`` (the encoder reads calls of at most ``MEMO_CALL`` texts back from the request);
        else None (its encoding then counts as planning)."""
        if size > getattr(self.engine.encoder, "MEMO_CALL", 0):
            return None
        return next((p for p in planner_parts(self.planner) if p is not self.planner and hasattr(p, "embed")
                     and hasattr(p, "score_embeddings")), None)

    def run(self, batch: Sequence[Question]) -> dict[str, float]:
        """Seconds per stage for ``batch`` (planned, encoded, guided, anchored, traced, answered)."""
        with request_scope():  # one request: its stages share the question's vectors, as retrieve's do
            return self._run(batch)

    def _run(self, batch: Sequence[Question]) -> dict[str, float]:
        times: dict[str, float] = {}
        cpu = time.process_time()
        runs = self.front(batch, times)
        self.back(batch, runs, times)
        times["total"] = sum(times[s] for s in STAGES)
        # CPU seconds of this process over the call (all its threads): on a shared machine wall time
        # includes waiting for a core, this does not, so it estimates what an idle machine would take.
        times["process_cpu"] = time.process_time() - cpu
        return times

    def front(self, batch: Sequence[Question], times: dict[str, float]) -> list[Any]:
        """Question encoding, planning, schema encoding and GNN guidance of ``batch``: its runs."""
        plan = self._plan(batch, times)
        began = time.perf_counter()
        runs, _ = self.method.plan_runs(batch, plan)
        self.method.embed([t for rs in runs for r in rs for t in r.plan.step_texts()], False)
        times["schema_encoding"] = time.perf_counter() - began
        began = time.perf_counter()
        if self.method.context.guidance is not None:
            self.method.context.guidance.attach(batch, runs, show_progress=False)
        times["gnn"] = time.perf_counter() - began
        return runs

    def back(self, batch: Sequence[Question], runs: list[Any], times: dict[str, float]) -> None:
        """Anchoring, tracing and answers of ``batch``'s runs (:meth:`front`'s)."""
        scored = self.method.score_grid(batch, [self.method.hyper], runs=runs)
        times["anchoring"] = scored.seconds["anchor"]
        times["tracing"] = scored.seconds["trace"]
        began = time.perf_counter()
        # the batch ranked together and its records made together, as Engine.retrieve / serve / eval do
        make_records(self.method.context, batch, scored.retrievals[0], "stem")
        times["answers"] = scored.seconds["answer"] + time.perf_counter() - began

    def overlapped(self, batches: Sequence[Sequence[Question]], depth: int = 1) -> dict[str, Any]:
        """Wall time and throughput of ``batches`` with each batch's :meth:`front` run on a background thread
        ahead of the previous batch's :meth:`back` (:func:`~stem_jax.eval.overlap.staged_ahead`)."""

        def front(batch: Sequence[Question]) -> tuple[list[Any], dict[str, float], contextvars.Context]:
            with request_scope():  # the batch's request, carried to its back half
                times: dict[str, float] = {}
                return self.front(batch, times), times, contextvars.copy_context()

        cpu, began = time.process_time(), time.perf_counter()
        with contextlib.closing(staged_ahead(batches, front, depth=depth)) as pairs:
            for batch, (runs, times, context) in pairs:
                context.run(self.back, batch, runs, times)
        seconds = time.perf_counter() - began
        questions = sum(len(b) for b in batches)
        return {"calls": len(batches), "questions": questions, "depth": depth, "seconds": seconds,
                "questions_per_second": questions / max(seconds, 1e-9),
                "process_cpu_seconds": time.process_time() - cpu}


def _percentiles(values: list[float]) -> dict[str, float]:
    ms = 1000 * np.asarray(values)
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)),
            "p99": float(np.percentile(ms, 99)), "mean": float(ms.mean())}


def bench_stages(engine: Any, questions: Sequence[Question], *, batch_sizes: Sequence[int] = (1, 8, 64, 256, 1024),
                 repeats: int | None = None, warmup: int = 2, min_seconds: float = 0.0, precompile: bool = True,
                 overlapped: bool = True, log: Any = None) -> dict[str, Any]:
    """Latency per stage and batch size; see the module docstring. ``repeats`` defaults to a count
    that keeps every batch size near the same number of questions (at least 3 calls). After the
    first call, ``precompile`` runs :meth:`~stem_jax.engine.Engine.warm_up` for the batch size (the
    encoder's short rows, every capacity-ladder tracer shape the batch can escalate to), then
    ``warmup`` untimed calls; compiles in each phase and during the timed calls are reported, and
    the encoder memo's hits and misses during the timed calls. ``overlapped`` also times as many calls again
    (other questions) with each batch's question encoding, planning, schema encoding and guidance run on a
    background thread while the previous batch is anchored, traced and answered: its throughput is the
    ``overlapped`` row (what ``eval`` and a many-question ``Engine.retrieve`` overlap)."""
    timer = StageTimer(engine)
    encoder = engine.encoder
    guidance = timer.method.context.guidance
    questions = list(questions)
    results: dict[str, Any] = {"stages": list(STAGES), "batch_sizes": {}}
    cursor = 0

    def take(n: int) -> list[Question]:
        nonlocal cursor
        if cursor + n > len(questions):
            cursor = 0
        batch = questions[cursor : cursor + n]
        cursor += n
        return batch

    for size in batch_sizes:
        if size > len(questions):
            if log:
                log(f"batch size {size}: skipped, only {len(questions)} questions loaded")
            continue
        before = _compiles(encoder, guidance)
        first = timer.run(take(size))
        after_first = _compiles(encoder, guidance)
        precompiled = engine.warm_up(size) if precompile else None
        if precompile and timer.planner is not None:  # the path planner's scoring shapes, as `serve` warms them
            precompiled = {**precompiled, **warm_path_planner(timer.planner, size, log=lambda _: None)}
        if precompile:  # the answer scorer's relation texts, as `serve` embeds them before serving
            precompiled = {**precompiled, **warm_answer_scorer(engine, log=lambda _: None)}
        after_precompile = _compiles(encoder, guidance)
        for _ in range(warmup):
            timer.run(take(size))
        after_warmup = _compiles(encoder, guidance)
        reps = repeats or max(3, min(50, 2048 // size))
        warm: list[dict[str, float]] = []
        memo_before = _memo(encoder, timer.method.resources)
        work_before = _encoder_work(encoder)
        began = time.perf_counter()
        while len(warm) < reps or time.perf_counter() - began < min_seconds:
            warm.append(timer.run(take(size)))
        after = _compiles(encoder, guidance)
        memo_after = _memo(encoder, timer.method.resources)
        work_after = _encoder_work(encoder)
        ahead = timer.overlapped([take(size) for _ in range(len(warm))]) if overlapped else None
        per_stage = {stage: _percentiles([w[stage] for w in warm]) for stage in (*STAGES, "total", "process_cpu")}
        total_seconds = sum(w["total"] for w in warm)
        results["batch_sizes"][str(size)] = {
            "batch_size": size,
            "warm_calls": len(warm),
            "first_call_ms": {k: 1000 * v for k, v in first.items()},
            "warm_ms": per_stage,
            "questions_per_second": size * len(warm) / max(total_seconds, 1e-9),
            "overlapped": ahead,
            "compiles_first_call": {k: after_first[k] - before[k] for k in before},
            "precompile": precompiled,
            "compiles_precompile": {k: after_precompile[k] - after_first[k] for k in before},
            "compiles_warmup": {k: after_warmup[k] - after_precompile[k] for k in before},
            "compiles_timed": {k: after[k] - after_warmup[k] for k in before},
            "encoder_memo_timed": {k: memo_after[k] - memo_before[k] for k in memo_after},
            "encoder_timed": encoder_cost(warm, {k: work_after[k] - work_before[k] for k in work_after}),
            "peak_rss_mib": _rss_mib(),
            "device_memory": _device_memory(),
        }
        if log:
            row = results["batch_sizes"][str(size)]
            cost = row["encoder_timed"]
            log(f"batch {size:5d}: end-to-end p50 {per_stage['total']['p50']:.1f} ms, "
                f"{row['questions_per_second']:.0f} q/s"
                + (f" ({ahead['questions_per_second']:.0f} q/s overlapped)" if ahead else "")
                + f", first call {row['first_call_ms']['total']:.0f} ms, "
                f"text encoder {100 * cost['share_of_total']:.0f}% of warm time"
                + (" (dominates)" if cost["dominates"] else ""))
    results["compiles_total"] = _compiles(encoder, guidance)
    results["encoder_memo"] = getattr(encoder, "memo_size", None)
    results["peak_rss_mib"] = _rss_mib()
    results["jax"] = jax.__version__
    results["jaxlib"] = __import__("jaxlib").__version__
    results["devices"] = [str(d) for d in jax.devices()]
    return results


def stage_table(results: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Markdown table rows: one row per (batch size, stage) with p50/p95/p99 ms per question batch."""
    headers = ["batch", "stage", "p50 ms", "p95 ms", "p99 ms", "first call ms"]
    rows = []
    for size, row in results["batch_sizes"].items():
        for stage in (*STAGES, "total", "process_cpu"):
            if stage not in row["warm_ms"]:  # results written before process CPU was recorded
                continue
            w = row["warm_ms"][stage]
            rows.append([size, stage, round(w["p50"], 2), round(w["p95"], 2), round(w["p99"], 2),
                         round(row["first_call_ms"][stage], 1)])
        rows.append([size, "questions/s", round(row["questions_per_second"], 1), "", "", ""])
        if row.get("overlapped"):
            rows.append([size, "questions/s overlapped", round(row["overlapped"]["questions_per_second"], 1), "", "", ""])
    return headers, rows


def encoder_table(results: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Markdown rows: the text encoder's work and cost per batch size over the warm calls."""
    headers = ["batch", "tokens", "padded tokens", "forwards", "share of warm time", "ms per token",
               "ms per padded token", "dominates"]
    rows = []
    for size, row in results["batch_sizes"].items():
        cost = row.get("encoder_timed")
        if cost is None:  # results written before the encoder was priced
            continue
        per_token = ["" if cost[k] is None else round(cost[k], 4) for k in ("ms_per_token", "ms_per_padded_token")]
        rows.append([size, cost["tokens_encoded"], cost["padded_tokens"], cost["forward_calls"],
                     f"{100 * cost['share_of_total']:.0f}%", *per_token, "yes" if cost["dominates"] else "no"])
    return headers, rows


def plot_stages(results: dict[str, Any], path: Any) -> None:
    """Latency (p50 per batch) vs batch size, one line per stage, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in results["batch_sizes"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for stage in (*STAGES, "total"):
        values = [results["batch_sizes"][str(s)]["warm_ms"][stage]["p50"] for s in sizes]
        if max(values) <= 0:
            continue
        ax.plot(sizes, values, marker="o", label=stage, linewidth=2.5 if stage == "total" else 1.2)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (questions)")
    ax.set_ylabel("p50 latency per batch (ms)")
    ax.set_title(results.get("title", "stem-jax bench stages"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

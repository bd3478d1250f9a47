"""`stem-jax bench trace`: the jit tracer against the reference tracer on the same runs.

Both tracers get identical inputs (oracle plans, the cached MiniLM embeddings, the same
anchors). Timings exclude compilation, which is reported on its own; the reference is timed
over the same runs. Agreement is measured three ways: JAX vs level-order reference (must be
exact up to float summation order), and level vs the literal sequential order.
"""

from __future__ import annotations

import resource
import time
from typing import Any

import jax
import numpy as np

from stem_jax.eval.runner import Evaluator, Run
from stem_jax.trace.reference import anchor_reference, trace_reference
from stem_jax.trace.tracer import anchor_batch, trace_batch
from stem_jax.trace.types import TraceOptions


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _answers(nodes, slot) -> set[int]:
    return {int(n) for n in np.asarray(nodes[slot]) if n >= 0} if slot >= 0 else set()


def bench_trace(evaluator: Evaluator, runs: list[Run], *, repeats: int = 3, reference_runs: int | None = None) -> dict[str, Any]:
    """Time JAX vs reference tracing of ``runs`` and check that they agree."""
    rss_before = _max_rss_mib()
    trace_batch.clear_cache()
    anchor_batch.clear_cache()
    began = time.perf_counter()
    outputs, _ = evaluator.trace_runs(runs)  # first call: compiles
    first_call = time.perf_counter() - began
    jax_times = []
    for _ in range(repeats):
        began = time.perf_counter()
        outputs, timings = evaluator.trace_runs(runs)
        jax_times.append(time.perf_counter() - began)
    jax_seconds = float(np.median(jax_times))
    compiles = {"trace_batch": trace_batch._cache_size(), "anchor_batch": anchor_batch._cache_size()}
    rss_after_jax = _max_rss_mib()

    config = evaluator.config
    triple_emb = np.asarray(evaluator.embeddings.triples.array, dtype=np.float32)
    entity_emb = np.asarray(evaluator.embeddings.entities.array, dtype=np.float32)
    shapes = evaluator.shapes[False]
    level = TraceOptions(order="level", breadth_cap=shapes.node_matches, frontier_cap=shapes.frontier,
                         relation_bonus=config.engine.relation_bonus)
    sequential = TraceOptions(order="sequential", breadth_cap=shapes.node_matches,
                              relation_bonus=config.engine.relation_bonus)
    subset = runs[: reference_runs or len(runs)]
    agree_jax = agree_seq = evidence_jax = 0
    ref_seconds = ref_anchor_seconds = 0.0
    agree_anchor = 0
    for i, run in enumerate(subset):
        out = outputs[i]
        began = time.perf_counter()
        ref_anchor = anchor_reference(entity_emb, entity_emb[run.anchor_entity], config.tracer.top_n,
                                      config.tracer.lam, None)
        ref_anchor_seconds += time.perf_counter() - began
        anchor, anchor_score = int(out["nodes"][0, 0]), float(out["scores"][0, 0])
        agree_anchor += ref_anchor[0] == anchor
        step_emb = evaluator.text_emb[[evaluator.text_rows[t] for t in run.plan.step_texts()]]
        kwargs = dict(strategy=run.plan.schema.strategy, anchor=anchor, anchor_score=anchor_score,
                      triple_emb=triple_emb, step_emb=step_emb, config=config.tracer)
        began = time.perf_counter()
        ref = trace_reference(evaluator.index, run.plan, options=level, **kwargs)
        ref_seconds += time.perf_counter() - began
        seq = trace_reference(evaluator.index, run.plan, options=sequential, **kwargs)
        slot = run.plan.answer_slot
        jax_answers = _answers(out["nodes"], slot)
        agree_jax += jax_answers == set(ref.answers(slot))
        evidence_jax += {int(t) for t in out["via"].ravel() if t >= 0} == ref.evidence()
        agree_seq += set(seq.answers(slot)) == set(ref.answers(slot))
    ref_per_run = ref_seconds / len(subset)
    ref_anchor_per_run = ref_anchor_seconds / len(subset)
    jax_per_run = jax_seconds / len(runs)
    jax_trace_per_run = timings["trace"] / len(runs)
    return {
        "runs": len(runs),
        "reference_runs": len(subset),
        "jax_seconds": jax_seconds,
        "jax_first_call_seconds": first_call,
        "compile_seconds_estimate": max(first_call - jax_seconds, 0.0),
        "jax_ms_per_run": 1000 * jax_per_run,
        "jax_trace_only_ms_per_run": 1000 * jax_trace_per_run,
        "reference_ms_per_run": 1000 * (ref_per_run + ref_anchor_per_run),
        "reference_trace_only_ms_per_run": 1000 * ref_per_run,
        "speedup": (ref_per_run + ref_anchor_per_run) / jax_per_run,
        "speedup_trace_only": ref_per_run / jax_trace_per_run,
        "agreement_anchor": agree_anchor / len(subset),
        "compiles": compiles,
        "jax_runs_per_second": len(runs) / jax_seconds,
        "agreement_jax_vs_level_reference_answers": agree_jax / len(subset),
        "agreement_jax_vs_level_reference_evidence": evidence_jax / len(subset),
        "agreement_level_vs_sequential_answers": agree_seq / len(subset),
        "max_rss_mib_before": rss_before,
        "max_rss_mib_after_jax": rss_after_jax,
        "max_rss_mib_end": _max_rss_mib(),
        "jax_devices": [str(d) for d in jax.devices()],
        "stage_seconds_last_jax_call": timings,
    }

"""`stem-jax bench trace`: the jit tracer against the reference tracer on the same runs.

Both tracers get identical inputs (oracle plans, the cached MiniLM embeddings, the same anchors)
and the same effective settings: the pipeline's traced λ, τ and (possibly calibrated) θ, its
preset-resolved relation bonus and ``tau_admits``, each run's strategy as the pipeline traces it,
and the capacities of the ladder level each run finished at. The JAX side is
the anchor and trace stages ``stem-jax eval`` runs (:meth:`StemPipeline.trace`). Timings exclude compilation, which
is reported on its own; the reference is timed over the same runs. Agreement is measured for
anchors (the reference anchoring with the run's named entities), answers and evidence (JAX vs
level-order reference: exact up to float summation order), and level vs the literal sequential
order.
"""

from __future__ import annotations

import dataclasses
import resource
import time
from typing import Any

import jax
import numpy as np

from stem_jax.methods.stem import Run, StemHyper, StemPipeline
from stem_jax.trace.reference import anchor_reference, trace_reference
from stem_jax.trace.tracer import anchor_batch, trace_batch
from stem_jax.trace.types import TraceOptions


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _answers(nodes, slot) -> set[int]:
    return {int(n) for n in np.asarray(nodes[slot]) if n >= 0} if slot >= 0 else set()


def _guidance_masks(pipeline: StemPipeline, run: Run) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(entity mask [n], triple mask [m]) of a run's guidance graph (a triple is in it when both ends are)."""
    if run.guidance is None or not len(run.guidance):
        return None, None
    entities = np.zeros(pipeline.index.num_entities, bool)
    entities[np.asarray(run.guidance)] = True
    triples = np.asarray(pipeline.index.triples)
    return entities, entities[triples[:, 0]] & entities[triples[:, 2]]


def bench_trace(pipeline: StemPipeline, runs: list[Run], *, repeats: int = 3, reference_runs: int | None = None,
                hyper: StemHyper | None = None) -> dict[str, Any]:
    """Time :meth:`StemPipeline.trace` vs the reference tracer on ``runs`` and check that they agree."""
    hyper = pipeline.resolve(hyper)
    rss_before = _max_rss_mib()
    trace_batch.clear_cache()
    anchor_batch.clear_cache()
    began = time.perf_counter()
    outputs, _ = pipeline.trace(runs, hyper)  # first call: compiles
    first_call = time.perf_counter() - began
    jax_times = []
    for _ in range(repeats):
        began = time.perf_counter()
        outputs, timings = pipeline.trace(runs, hyper)
        jax_times.append(time.perf_counter() - began)
    jax_seconds = float(np.median(jax_times))
    compiles = {"trace_batch": trace_batch._cache_size(), "anchor_batch": anchor_batch._cache_size()}
    rss_after_jax = _max_rss_mib()

    engine = pipeline.engine  # preset-resolved
    tracer_config = dataclasses.replace(pipeline.config.tracer, lam=hyper.lam, tau=hyper.tau, theta=hyper.theta)
    triple_emb = pipeline.embeddings.trace_rows()  # the rows the JAX tracer reads (float16, or compact)
    triple_emb = (dataclasses.replace(triple_emb, codes=triple_emb.codes.astype(np.float32)) if hasattr(triple_emb, "codes")
                  else np.asarray(triple_emb, dtype=np.float32))
    entity_emb = np.asarray(pipeline.embeddings.entities.array, dtype=np.float32)
    shapes_by_frontier = {shapes.frontier: shapes for shapes in pipeline.ladder}
    subset = runs[: reference_runs or len(runs)]
    mention_rows = pipeline.mention_rows(subset)
    agree_jax = agree_seq = evidence_jax = 0
    ref_seconds = ref_anchor_seconds = 0.0
    agree_anchor = 0
    for i, run in enumerate(subset):
        out = outputs[i]
        precision = pipeline.is_precision(run)
        shapes = pipeline.shapes[True] if precision else shapes_by_frontier[int(out["capacity"])]
        level = TraceOptions(order="level", breadth_cap=shapes.node_matches, frontier_cap=shapes.frontier,
                             **pipeline.tracer_switches())
        sequential = TraceOptions(order="sequential", breadth_cap=shapes.node_matches, **pipeline.tracer_switches())
        entity_guidance, triple_guidance = _guidance_masks(pipeline, run)
        mention = entity_emb[run.anchor_entity] if run.anchor_entity >= 0 else mention_rows[run.mention]
        began = time.perf_counter()
        ref_anchor = anchor_reference(entity_emb, mention, pipeline.config.tracer.top_n, hyper.lam, entity_guidance,
                                      named=run.named[: pipeline.NAMED_WIDTH])
        ref_anchor_seconds += time.perf_counter() - began
        anchor, anchor_score = int(out["nodes"][0, 0]), float(out["scores"][0, 0])
        agree_anchor += ref_anchor[0] == anchor
        kwargs = dict(strategy="Precision" if precision else "Breadth", anchor=anchor, anchor_score=anchor_score,
                      triple_emb=triple_emb, step_emb=pipeline.step_embeddings(run), config=tracer_config,
                      triple_guidance=triple_guidance)
        began = time.perf_counter()
        ref = trace_reference(pipeline.index, run.plan, options=level, **kwargs)
        ref_seconds += time.perf_counter() - began
        seq = trace_reference(pipeline.index, run.plan, options=sequential, **kwargs)
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
        "hyper": hyper.as_dict(),
        "theta_source": pipeline.settings.theta_source,
        "relation_bonus": engine.relation_bonus,
        "tau_admits": engine.guidance_admits,
    }

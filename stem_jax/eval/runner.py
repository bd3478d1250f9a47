"""Batch evaluation: plan -> ground -> encode -> anchor -> trace -> answers -> predictions.jsonl.

Questions are processed in chunks; each finished chunk is appended to ``predictions.jsonl`` and
flushed, so a killed run resumes after the last written question and, because every metric is
computed from that file, ends with the same numbers as an uninterrupted run. Within a chunk,
runs (question x plan x anchor) are grouped by (strategy, steps bucket) and traced in fixed-size
padded batches, one device transfer per batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.answer.rank import QuestionAnswers
from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import open_or_build, texts_fingerprint
from stem_jax.errors import StemError
from stem_jax.eval.metrics import MetricAccumulator, coverage_rate, rog_question_metrics, strict_metrics
from stem_jax.kg.embeddings import KGEmbeddings
from stem_jax.kg.index import KGIndex
from stem_jax.plan.oracle import gold_path_triples
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, ground, match_anchor
from stem_jax.progress import progress
from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, anchor_batch, trace_batch

STEP_BUCKETS = (1, 2, 4, 8, 16)
MAX_EVIDENCE_LISTED = 256

Planner = Callable[[Question, KGIndex], list[SchemaGraph]]


@dataclasses.dataclass
class Run:
    question: int  # index into the chunk
    plan: GroundedPlan
    anchor_entity: int  # KG id of the question entity the run starts from
    guidance: np.ndarray | None = None  # int32 guidance entity ids (set by a guidance provider)


def steps_bucket(n_steps: int) -> int:
    for bucket in STEP_BUCKETS:
        if n_steps <= bucket:
            return bucket
    raise ValueError(f"schema graph with {n_steps} steps exceeds the largest bucket {STEP_BUCKETS[-1]}")


def read_finished(path: Path) -> dict[str, dict]:
    """Records already written; a torn last line (killed mid-write) is cut off and redone."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut < len(data):
        with path.open("r+b") as handle:
            handle.truncate(cut)
    records = {}
    for line in data[:cut].splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["id"]] = record
    return records


class Evaluator:
    """Holds the device-side KG and compiled tracers for one dataset; evaluates questions."""

    def __init__(self, dataset: Dataset, index: KGIndex, embeddings: KGEmbeddings, encoder: TextEncoder,
                 config: StemConfig, *, cache_dir: Path | None = None, guidance: Any = None):
        """``guidance``: optional provider with ``attach(questions, runs_per_question, show_progress=)``
        that sets ``run.guidance`` (e.g. :class:`stem_jax.gnn.provider.GNNGuidance`); None = no guidance."""
        self.dataset = dataset
        self.guidance = guidance
        self.index = index
        self.embeddings = embeddings
        self.encoder = encoder
        self.config = config
        self.cache_dir = cache_dir
        self.names = dataset.entity_names or {}
        self.kg = KGArrays.from_index(index, embeddings.triples.array)
        # float32 on device once: anchoring reads the whole table for every batch
        self.entity_emb = jnp.asarray(np.asarray(embeddings.entities.array, dtype=np.float32))
        engine = config.engine
        node_matches = config.tracer.breadth_cap or engine.node_matches
        self.shapes = {
            True: TracerShapes(frontier=1, node_matches=1, window=engine.window, guidance=engine.guidance),
            False: TracerShapes(frontier=engine.frontier, node_matches=node_matches, window=engine.window,
                                guidance=engine.guidance),
        }
        self.batch = {True: engine.batch_precision, False: engine.batch_breadth}
        self.hyper = Hyper(jnp.float32(config.tracer.tau), jnp.float32(config.tracer.theta))
        self.text_rows: dict[str, int] = {}
        self.text_emb: np.ndarray | None = None

    def display(self, entity: str) -> str:
        return self.names.get(entity, entity)

    # ----- planning and text embeddings -------------------------------------------------------
    def plan_all(self, questions: Sequence[Question], planner: Planner) -> tuple[list[list[Run]], dict[str, int]]:
        """Runs per question, and counts of questions/plans that produced none (with reasons)."""
        runs: list[list[Run]] = []
        skipped: dict[str, int] = defaultdict(int)
        for qi, question in enumerate(questions):
            mine = []
            schemas = planner(question, self.index)
            if not schemas:
                skipped["no plan"] += 1
            for schema in schemas:
                for topic in question.topic_entities:
                    if topic not in self.index.entity_ids:
                        skipped["topic entity not in KG"] += 1
                        continue
                    anchor_name = match_anchor(schema, self.display(topic))
                    if anchor_name is None:
                        skipped["no schema node matches the topic entity"] += 1
                        continue
                    mine.append(Run(qi, ground(schema, anchor_name, self.index), self.index.entity_ids[topic]))
            runs.append(mine)
        return runs, dict(skipped)

    def embed_texts(self, texts: Sequence[str], show_progress: bool) -> None:
        """Embed schema-triple texts once; cached on disk (resumable) when a cache dir is set."""
        unique = sorted(set(texts))
        if self.cache_dir is not None:
            folder = self.cache_dir / f"schema-texts-{texts_fingerprint(unique)[:16]}.zarr"
            table = open_or_build(folder, unique, self.encoder, self.config.encoder.chunk_rows,
                                  progress=show_progress, desc="encode schema triples")
            matrix = table.array
        else:
            matrix = self.encoder.encode(unique).astype(np.float16)
        self.text_rows = {t: i for i, t in enumerate(unique)}
        self.text_emb = np.asarray(matrix, dtype=np.float32)

    # ----- tracing ----------------------------------------------------------------------------
    def trace_runs(self, runs: Sequence[Run]) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Anchor and trace ``runs``; returns per-run host arrays and stage seconds."""
        timings = {"anchor": 0.0, "trace": 0.0}
        outputs: list[dict[str, np.ndarray] | None] = [None] * len(runs)
        if not runs:
            return [], timings
        guidance = self._guidance_rows(runs)
        anchors, anchor_scores = self._anchor([r.anchor_entity for r in runs], guidance, timings)
        groups: dict[tuple[bool, int], list[int]] = defaultdict(list)
        for i, run in enumerate(runs):
            precision = run.plan.schema.strategy == "Precision"
            groups[(precision, steps_bucket(max(run.plan.num_steps, 1)))].append(i)
        for (precision, bucket), members in sorted(groups.items()):
            size = self.batch[precision]
            for start in range(0, len(members), size):
                chunk = members[start : start + size]
                batch = self._batch([runs[i] for i in chunk], anchors[chunk], anchor_scores[chunk], size, bucket,
                                    guidance[chunk])
                began = time.perf_counter()
                out = trace_batch(self.kg, batch, self.hyper, shapes=self.shapes[precision], precision=precision,
                                  relation_bonus=self.config.engine.relation_bonus)
                host = jax.device_get(out)  # the batch's single device->host transfer
                timings["trace"] += time.perf_counter() - began
                for row, i in enumerate(chunk):
                    outputs[i] = {k: getattr(host, k)[row] for k in ("nodes", "scores", "via", "parents", "overflow")}
        return outputs, timings

    def _guidance_rows(self, runs: Sequence[Run]) -> np.ndarray:
        """int32 [len(runs), G]: each run's guidance entity ids, -1 padded."""
        width = self.shapes[True].guidance
        rows = np.full((len(runs), width), -1, np.int32)
        for i, run in enumerate(runs):
            if run.guidance is None:
                continue
            if len(run.guidance) > width:
                raise StemError(f"a run has {len(run.guidance)} guidance entities but engine.guidance={width}\n"
                                f"  how to fix: pass --engine.guidance={1 << (len(run.guidance) - 1).bit_length()}")
            rows[i, : len(run.guidance)] = run.guidance
        return rows

    def _anchor(self, entities: list[int], guidance_rows: np.ndarray, timings: dict[str, float]):
        size = self.batch[True]
        guidance_width = guidance_rows.shape[1]
        anchors = np.zeros(len(entities), np.int32)
        scores = np.zeros(len(entities), np.float32)
        began = time.perf_counter()
        for start in range(0, len(entities), size):
            ids = np.zeros(size, np.int64)
            part = entities[start : start + size]
            ids[: len(part)] = part
            mentions = self.entity_emb[jnp.asarray(ids)].astype(jnp.float32)
            guidance = np.full((size, guidance_width), -1, np.int32)
            guidance[: len(part)] = guidance_rows[start : start + len(part)]
            a, s = jax.device_get(anchor_batch(self.entity_emb, mentions, guidance, jnp.float32(self.config.tracer.lam),
                                               top_n=self.config.tracer.top_n))
            anchors[start : start + len(part)] = a[: len(part)]
            scores[start : start + len(part)] = s[: len(part)]
        timings["anchor"] += time.perf_counter() - began
        return anchors, scores

    def _batch(self, runs: Sequence[Run], anchors, anchor_scores, size: int, bucket: int,
               guidance_rows: np.ndarray | None = None) -> TraceBatch:
        dim = self.text_emb.shape[1]
        steps = np.full((size, bucket, 3), -1, np.int32)
        mask = np.zeros((size, bucket), bool)
        step_emb = np.zeros((size, bucket, dim), np.float32)
        anchor = np.full(size, -1, np.int32)
        anchor_score = np.zeros(size, np.float32)
        for row, run in enumerate(runs):
            n = run.plan.num_steps
            steps[row, :n] = run.plan.steps
            mask[row, :n] = True
            step_emb[row, :n] = self.text_emb[[self.text_rows[t] for t in run.plan.step_texts()]]
            anchor[row] = anchors[row]
            anchor_score[row] = anchor_scores[row]
        guidance = np.full((size, self.shapes[True].guidance), -1, np.int32)
        if guidance_rows is not None:
            guidance[: len(runs)] = guidance_rows
        return TraceBatch(jnp.asarray(steps), jnp.asarray(mask), jnp.asarray(step_emb), jnp.asarray(anchor),
                          jnp.asarray(anchor_score), jnp.asarray(guidance))

    # ----- records ----------------------------------------------------------------------------
    def record(self, question: Question, runs: Sequence[Run], outputs: Sequence[dict], stage_ms: dict[str, float]) -> dict:
        answers = QuestionAnswers()
        for run, out in zip(runs, outputs, strict=True):
            answers.add_run(out["nodes"], out["scores"], out["via"], run.plan.answer_slot, int(out["overflow"]))
        ranked = answers.ranked()
        evidence = self.index.triple_strings(sorted(answers.evidence))
        gold = gold_path_triples(question, self.index)
        display_evidence = [(self.display(h), r, self.display(t)) for h, r, t in evidence]
        return {
            "id": question.qid,
            "question": question.text,
            "hops": question.hops,
            "prediction": [self.display(self.index.entities[e]) for e, _ in ranked],
            "scores": [round(float(s), 6) for _, s in ranked],
            "ground_truth": [self.display(a) for a in question.answers],
            "strategies": sorted({r.plan.schema.strategy for r in runs}),
            "plans": [r.plan.schema.describe() for r in runs],
            "evidence": [list(t) for t in display_evidence[:MAX_EVIDENCE_LISTED]],
            "evidence_count": len(evidence),
            "coverage": coverage_rate(gold, evidence, undirected=False) if gold else None,
            "gold_path_triples": len(gold),
            "overflow": answers.overflow,
            "runs": len(runs),
            "ms": {k: round(v, 3) for k, v in stage_ms.items()},
        }


def evaluate(
    evaluator: Evaluator,
    questions: Sequence[Question],
    planner: Planner,
    out_dir: Path,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Evaluate ``questions`` into ``out_dir`` (resumable), then score predictions.jsonl."""
    out_dir.mkdir(parents=True, exist_ok=True)
    predictions = out_dir / "predictions.jsonl"
    finished = read_finished(predictions)
    wanted = {q.qid for q in questions}
    todo = [q for q in questions if q.qid not in finished]
    if finished:
        log(f"resuming: {len(wanted & set(finished))} of {len(questions)} questions already in {predictions}")

    began = time.perf_counter()
    all_runs, skipped = evaluator.plan_all(questions, planner)  # all questions: a stable text cache key
    plan_seconds = time.perf_counter() - began
    texts = [t for runs in all_runs for run in runs for t in run.plan.step_texts()]
    began = time.perf_counter()
    evaluator.embed_texts(texts, show_progress)
    encode_seconds = time.perf_counter() - began
    guidance_stats = None
    if evaluator.guidance is not None:
        guidance_stats = evaluator.guidance.attach(questions, all_runs, show_progress=show_progress)
    runs_of = {q.qid: runs for q, runs in zip(questions, all_runs, strict=True)}

    chunk_size = evaluator.config.engine.chunk_questions
    stage_totals = defaultdict(float)
    with progress(len(questions), "eval", "q", enabled=show_progress, initial=len(questions) - len(todo)) as bar, \
            predictions.open("a", encoding="utf-8") as sink:
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            chunk_runs = [run for q in chunk for run in runs_of[q.qid]]
            owners = [qi for qi, q in enumerate(chunk) for _ in runs_of[q.qid]]
            outputs, timings = evaluator.trace_runs(chunk_runs)
            per_question_ms = {
                "plan": 1000 * plan_seconds / len(questions),
                "encode": 1000 * encode_seconds / len(questions),
                "anchor": 1000 * timings["anchor"] / max(len(chunk), 1),
                "trace": 1000 * timings["trace"] / max(len(chunk), 1),
            }
            began = time.perf_counter()
            grouped: dict[int, list[int]] = defaultdict(list)
            for i, qi in enumerate(owners):
                grouped[qi].append(i)
            lines = []
            for qi, question in enumerate(chunk):
                members = grouped.get(qi, [])
                record = evaluator.record(question, [chunk_runs[i] for i in members], [outputs[i] for i in members],
                                          per_question_ms)
                lines.append(json.dumps(record, ensure_ascii=False))
            answer_ms = 1000 * (time.perf_counter() - began) / max(len(chunk), 1)
            for key, value in per_question_ms.items():
                stage_totals[key] += value * len(chunk)
            stage_totals["answer"] += answer_ms * len(chunk)
            sink.write("\n".join(lines) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
            bar.update(len(chunk))
    summary = score_predictions(predictions, wanted)
    summary["plan_skips"] = skipped
    if guidance_stats is not None:
        summary["guidance"] = guidance_stats
    summary["stage_ms_total_this_run"] = dict(stage_totals)
    return summary


def score_predictions(path: Path, qids: set[str] | None = None) -> dict[str, Any]:
    """Metrics per hop from predictions.jsonl alone, so a resumed run scores like a fresh one."""
    acc = MetricAccumulator(group_name="hops")
    overflow = defaultdict(int)
    for record in read_finished(path).values():
        if qids is not None and record["id"] not in qids:
            continue
        group = f"{record['hops']}-hop" if record.get("hops") is not None else "all"
        if not record["ground_truth"]:
            acc.skip("no gold answers", group=group)
            continue
        metrics = dict(strict_metrics(record["prediction"], record["ground_truth"]))
        rog = rog_question_metrics(record["prediction"], record["ground_truth"])
        metrics["rog_hit"] = rog["rog_hit"]
        metrics["rog_f1"] = rog["rog_f1"]
        if record.get("coverage") is not None:
            metrics["coverage"] = record["coverage"]
        metrics["overflow_questions"] = float(record["overflow"] > 0)
        acc.add(metrics, group=group)
        overflow[group] += record["overflow"]
    summary = acc.summary()
    summary["overflow_total"] = dict(overflow)
    return summary

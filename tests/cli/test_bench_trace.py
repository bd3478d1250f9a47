"""`stem-jax bench trace` compares the jit tracer and the reference under the SAME effective settings: a
reference run at tracer.theta without exact anchoring, beside a jit tracer running the calibrated engine, would
report a false disagreement."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stem_jax.bench.trace import bench_trace
from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem import StemPipeline
from stem_jax.methods.stem.calibration import calibration_path
from stem_jax.plan.oracle import OraclePlanner


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_bench_trace_agrees_fully_under_a_calibrated_theta(tmp_path, preset):
    dataset = load_dataset(DatasetSpec(name="demo"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder()
    embeddings = build_kg_embeddings(index, encoder, tmp_path / "emb", chunk_rows=1024, progress=False)
    engine = StemConfig().engine
    calibration_path(embeddings).write_text(json.dumps(
        {"theta": 0.2, "engine": {"relation_bonus": engine.relation_bonus, "strategy": engine.strategy},
         "conventions": {"direction": "directed", "used_triples": "branch"}}))
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, engine=dataclasses.replace(
        config.engine, preset=preset, batch_precision=32, batch_breadth=8, frontier=4, node_matches=2, max_frontier=8))
    pipeline = StemPipeline(dataset, index, embeddings, encoder, config)
    assert pipeline.theta == (0.2 if preset == "default" else 0.6)
    questions = [q for q in dataset.questions if q.hops in (2, 3)][::5][:30]
    per_question, _ = pipeline.plan_all(questions, OraclePlanner().plan)
    runs = [run for rs in per_question for run in rs]
    pipeline.embed_texts([t for run in runs for t in run.plan.step_texts()], False)
    result = bench_trace(pipeline, runs, repeats=1)
    assert result["hyper"]["theta"] == pipeline.theta
    assert result["agreement_anchor"] == 1.0
    assert result["agreement_jax_vs_level_reference_answers"] == 1.0
    assert result["agreement_jax_vs_level_reference_evidence"] == 1.0

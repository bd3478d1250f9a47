"""Guidance reaches the evaluator: per-run guidance ids feed anchoring (λ) and T-Scores (τ) exactly as
the reference tracer's entity and triple masks do."""

import dataclasses

import numpy as np
import pytest

from stem_jax.cli.main import main
from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.errors import StemError
from stem_jax.eval.scoring import read_finished
from stem_jax.gnn.data import gold_entities
from stem_jax.gnn.guidance import entity_mask, triple_mask
from stem_jax.methods.stem import StemPipeline, evaluate
from stem_jax.methods.stem.ablation import GUIDANCE_ABLATIONS, row_hyper
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.trace.reference import anchor_reference, trace_reference
from stem_jax.trace.types import TraceOptions


class GoldGuidance:
    """A stand-in provider: the first ``k`` gold-evidence entities of each question."""

    def __init__(self, index, k=12):
        self.index, self.k = index, k

    def attach(self, questions, runs_per_question, show_progress=True):
        for question, runs in zip(questions, runs_per_question, strict=True):
            for run in runs:
                run.guidance = gold_entities(question, self.index)[: self.k]
        return {"stub": True}


@pytest.fixture(scope="module")
def demo(demo_hashing64):
    return demo_hashing64


def _evaluator(demo, provider, **engine):
    """The engine settings of tests/eval/test_eval_runner.py, so one pytest process shares compiled tracers."""
    dataset, index, encoder, embeddings = demo
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    engine = {"batch_precision": 64, "batch_breadth": 16, "frontier": 64, "node_matches": 64, **engine}
    config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, **engine))
    return StemPipeline(dataset, index, embeddings, encoder, config, guidance=provider)


def test_guided_answers_match_the_reference_tracer(demo, tmp_path):
    dataset, index, _, embeddings = demo
    questions = dataset.questions[7::30]
    evaluator = _evaluator(demo, GoldGuidance(index), preset="paper", max_frontier=64)  # the reference is paper-literal
    summary = evaluate(evaluator, questions, OraclePlanner().plan, tmp_path, show_progress=False)
    assert summary["guidance"] == {"stub": True}
    records = read_finished(tmp_path / "predictions.jsonl")
    triple_emb = embeddings.triples.array.astype(np.float32)
    entity_emb = embeddings.entities.array.astype(np.float32)
    tracer = evaluator.config.tracer
    options = TraceOptions(breadth_cap=64, frontier_cap=64)
    checked = changed = 0
    for question in questions:
        runs, _ = evaluator.plan_all([question], OraclePlanner().plan)
        evaluator.guidance.attach([question], runs)
        for run in runs[0]:
            step_emb = evaluator.text_emb[[evaluator.text_rows[t] for t in run.plan.step_texts()]]
            answers = {}
            for guided in (True, False):
                entities = entity_mask(index.num_entities, run.guidance) if guided else None
                triples = triple_mask(index, run.guidance) if guided else None
                anchor, score = anchor_reference(entity_emb, entity_emb[run.anchor_entity], tracer.top_n, tracer.lam,
                                                 entities)
                ref = trace_reference(index, run.plan, strategy=run.plan.schema.strategy, anchor=anchor,
                                      anchor_score=score, triple_emb=triple_emb, step_emb=step_emb, config=tracer,
                                      options=options, triple_guidance=triples)
                answers[guided] = {index.entities[e] for e in ref.answers(run.plan.answer_slot)}
            assert answers[True] == set(records[question.qid]["prediction"])
            changed += answers[True] != answers[False]
            checked += 1
    assert checked >= 15 and changed > 0  # the guidance matters on these questions, and JAX applies it


def test_ablation_rows_only_change_lambda_and_tau(demo):
    evaluator = _evaluator(demo, GoldGuidance(demo[1]))
    base = evaluator.hyper
    for _, _, lam, tau in GUIDANCE_ABLATIONS:
        row = row_hyper(base, lam, tau)
        assert row.lam == (base.lam if lam is None else lam) and row.tau == (base.tau if tau is None else tau)
        assert row.theta == evaluator.theta  # the effective θ, calibrated or not
    assert evaluator.hyper == base and evaluator.config.tracer.lam == 1.5  # the pipeline is untouched


def test_too_many_guidance_entities_is_a_clear_error(demo):
    evaluator = _evaluator(demo, GoldGuidance(demo[1], k=100), guidance=4)
    runs, _ = evaluator.plan_all(demo[0].questions[-1:], OraclePlanner().plan)
    evaluator.guidance.attach(demo[0].questions[-1:], runs)
    assert len(runs[0][0].guidance) > 4
    with pytest.raises(StemError, match="engine.guidance"):
        evaluator.trace(runs[0])


def test_eval_guidance_gnn_needs_a_checkpoint(capsys, tmp_path):
    argv = ["eval", "--encoder.name=hashing", "--cache-dir", str(tmp_path), "--limit", "2", "--no-progress",
            "--guidance", "gnn", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--gnn-checkpoint" in err and "Traceback" not in err

"""Stages overlapped across chunks: the same records in the same order, errors raised in the caller, a bounded queue."""

import dataclasses
import json
import threading
import time

import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.eval.loop import evaluate_method
from stem_jax.eval.overlap import retrieve_overlapped, staged_ahead
from stem_jax.methods.stem import StemPipeline
from stem_jax.methods.stem.method import StemMethod
from stem_jax.plan.oracle import OraclePlanner


def test_staged_chunks_come_back_in_order():
    assert list(staged_ahead(range(20), lambda x: x * x, depth=2)) == [(x, x * x) for x in range(20)]
    assert list(staged_ahead([], lambda x: x)) == []


def test_a_stage_error_is_raised_in_the_caller_after_the_chunks_before_it():
    def stage(x):
        if x == 3:
            raise KeyError("chunk 3")
        return x

    taken = []
    with pytest.raises(KeyError, match="chunk 3"):
        for x, _ in staged_ahead(range(10), stage):
            taken.append(x)
    assert taken == [0, 1, 2]


def test_the_stage_thread_runs_at_most_depth_plus_one_chunks_ahead():
    started, lock = [], threading.Lock()

    def stage(x):
        with lock:
            started.append(x)
        return x

    ahead = []
    for x, _ in staged_ahead(range(12), stage, depth=1):
        time.sleep(0.02)  # a slow caller: the thread fills the queue and waits
        with lock:
            ahead.append(len(started) - (x + 1))
    assert max(ahead) <= 2  # one waiting in the queue, one being staged


def test_a_caller_that_stops_early_stops_the_stage_thread():
    started = []
    pairs = staged_ahead(range(1000), lambda x: started.append(x) or x, depth=1)
    for x, _ in pairs:
        if x == 2:
            break
    pairs.close()  # joins the thread
    assert len(started) <= 5
    assert not any(t.name == "stem-stage-ahead" for t in threading.enumerate())


def test_a_method_without_stages_is_retrieved_chunk_by_chunk():
    class Plain:
        def retrieve(self, chunk):
            return [q * 2 for q in chunk]

    assert list(retrieve_overlapped(Plain(), [[1, 2], [3]])) == [([1, 2], [2, 4]), ([3], [6])]


@pytest.fixture(scope="module")
def demo_method(demo_hashing64):
    dataset, index, encoder, embeddings = demo_hashing64
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, engine=dataclasses.replace(
        config.engine, batch_precision=64, batch_breadth=16, chunk_questions=32))

    def make():
        pipeline = StemPipeline(dataset, index, embeddings, encoder, config)
        return StemMethod.from_pipeline(pipeline, OraclePlanner().plan)

    return dataset, make


def _records(folder):
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("ms")  # timings differ from run to run
    return rows


def test_overlapped_eval_writes_the_sequential_eval_records(demo_method, tmp_path):
    dataset, make = demo_method
    questions = dataset.questions[:200]
    plain = evaluate_method(make(), questions, tmp_path / "plain", chunk_size=32, show_progress=False,
                            log=lambda _: None, overlap=0)
    ahead = evaluate_method(make(), questions, tmp_path / "ahead", chunk_size=32, show_progress=False,
                            log=lambda _: None, overlap=2)
    assert _records(tmp_path / "ahead") == _records(tmp_path / "plain")
    assert [r["id"] for r in _records(tmp_path / "ahead")] == [q.qid for q in questions]
    assert ahead["overall"] == plain["overall"]


def test_an_error_while_tracing_ahead_leaves_the_written_chunks_and_resumes(demo_method, tmp_path):
    dataset, make = demo_method
    questions = dataset.questions[:160]
    method = make()
    calls = []
    real = method.stage

    def failing(chunk):
        calls.append(len(chunk))
        if len(calls) == 3:
            raise RuntimeError("device lost")
        return real(chunk)

    method.stage = failing
    with pytest.raises(RuntimeError, match="device lost"):
        evaluate_method(method, questions, tmp_path / "run", chunk_size=32, show_progress=False, log=lambda _: None)
    assert len(_records(tmp_path / "run")) == 64  # the two chunks before the error, whole
    evaluate_method(make(), questions, tmp_path / "run", chunk_size=32, show_progress=False, log=lambda _: None)
    evaluate_method(make(), questions, tmp_path / "plain", chunk_size=32, show_progress=False, log=lambda _: None,
                    overlap=0)
    assert _records(tmp_path / "run") == _records(tmp_path / "plain")


def test_finish_of_stage_is_retrieve(demo_method):
    dataset, make = demo_method
    chunk = dataset.questions[:40]
    whole = make().retrieve(chunk)
    method = make()
    halves = method.finish(method.stage(chunk))
    assert [(r.answers, r.evidence) for r in halves] == [(r.answers, r.evidence) for r in whole]


def test_engine_retrieve_of_many_chunks_answers_as_one_call(tmp_path):
    from stem_jax import Engine
    from stem_jax.config import apply_overrides

    fast = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}
    answers = []
    for chunk in ("8", "1000"):
        config = apply_overrides(StemConfig(), {**fast, "engine.chunk_questions": chunk})
        engine = Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path, limit=40)
        answers.append([(a.answers, a.record["evidence"]) for a in engine.retrieve(engine.dataset.questions)])
    assert len(answers[0]) > 8 and answers[0] == answers[1]  # several chunks of 8

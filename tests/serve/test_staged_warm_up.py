"""Serve's staged warm-up: the server answers after a one-question warm-up, compiles the larger batches' shapes in the
background while it serves, reports warming -> ready, and stops the background part cleanly on shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from serve_process import read_until

from stem_jax import Engine, StemConfig
from stem_jax.cli.main import build_parser
from stem_jax.cli.serve import WARM_UP_MODES as CLI_MODES
from stem_jax.config import apply_overrides
from stem_jax.engine import _compile_counts
from stem_jax.errors import StemError
from stem_jax.methods.stem import trace as trace_stage
from stem_jax.serve import create_app
from stem_jax.serve.warm import WARM_UP_MODES, ServerWarmUp

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}
ASK = {"qid": "demo/test/2-hop/1", "top": 5}
MAX_BATCH = 2  # the staged split needs a batch above one question; each larger one adds shapes to compile


def _engine(cache) -> Engine:
    return Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=cache, limit=3)


def _wait_ready(client: TestClient, timeout_s: float = 240) -> dict:
    deadline = time.time() + timeout_s
    while True:
        health = client.get("/healthz").json()
        if health["warm_up"]["state"] != "warming":
            return health
        assert time.time() < deadline, health
        time.sleep(0.1)


def _same_answer(a: dict, b: dict) -> None:
    for key in ("answers", "evidence", "plans", "chains", "topic_entities"):
        assert a[key] == b[key], key


@pytest.fixture(scope="module")
def full_answer(tmp_path_factory) -> dict:
    """The answer of a fully warmed server (everything compiled before serving)."""
    engine = _engine(tmp_path_factory.mktemp("full"))
    warm = ServerWarmUp(engine, MAX_BATCH, mode="full", log=lambda _: None)
    warm.before_serving()
    assert warm.status()["state"] == "ready"
    with TestClient(create_app(engine, max_batch=MAX_BATCH, max_wait_ms=1, warm_up=warm)) as client:
        assert client.get("/healthz").json()["ready"] is True
        return client.post("/v1/ask", json=ASK).json()


def test_staged_warm_up_answers_before_the_background_part_ends_as_a_fully_warmed_server(tmp_path, full_answer):
    engine = _engine(tmp_path)
    release, entered = threading.Event(), threading.Event()
    rest = engine.warm_up_rest

    def held_rest(*args, **kwargs):  # the background part waits until a request was answered
        entered.set()
        assert release.wait(120)
        return rest(*args, **kwargs)

    engine.warm_up_rest = held_rest
    lines: list[str] = []
    warm = ServerWarmUp(engine, MAX_BATCH, mode="staged", log=lines.append)
    warm.before_serving()
    assert warm.status()["state"] == "warming"
    with TestClient(create_app(engine, max_batch=MAX_BATCH, max_wait_ms=1, warm_up=warm)) as client:
        assert entered.wait(60)
        health = client.get("/healthz").json()
        assert health["ready"] is False and health["warm_up"]["state"] == "warming"
        assert "stem_warming 1.0" in client.get("/metrics").text
        answer = client.post("/v1/ask", json=ASK).json()
        _same_answer(answer, full_answer)
        release.set()
        health = _wait_ready(client)
        assert health["ready"] is True and health["warm_up"]["state"] == "ready", health
        assert "stem_warming 0.0" in client.get("/metrics").text
        info = client.get("/v1/info").json()["serve"]["warm_up"]
        assert info["background"]["tracer_shapes"] > 0 and info["before_serving"]["tracer_shapes"] > 0
        _same_answer(client.post("/v1/ask", json=ASK).json(), full_answer)
        # ready means a request of the largest batch compiles no tracer shape
        before = _compile_counts()
        batch = [{"qid": q.qid} for q in engine.dataset.questions[:MAX_BATCH]]
        assert client.post("/v1/retrieve", json={"questions": batch}).status_code == 200
        assert _compile_counts() == before
    text = "\n".join(lines)
    assert f"background warm-up for batches of up to {MAX_BATCH} questions" in text and "background warm-up done in" in text


def test_the_staged_shapes_are_the_full_warm_ups_split_in_two(tmp_path):
    engine = _engine(tmp_path)
    res = engine.method("stem").pipeline
    one = trace_stage.warm_up_shapes(res, [1, 2, 4], engine._warm_runs(1))
    every = trace_stage.warm_up_shapes(res, [1, 2, 4], engine._warm_runs(4))
    assert set(one) < set(every) and len(every) == len(set(every))
    assert {s.size for s in one} == {4}  # one question's runs pad to the smallest batch
    assert engine._warm_runs(1, topics=1) == engine.config.planner.beam


def test_a_narrower_steps_bucket_above_the_shared_level_is_skipped_once_a_wider_one_was_traced(tmp_path):
    res = _engine(tmp_path).method("stem").pipeline
    low = trace_stage.WarmShape(False, 1, res.SHARED_BUCKET_LEVEL, 4)
    assert trace_stage.reachable(res, low)
    res.shared_bucket = 2
    assert not trace_stage.reachable(res, low)
    assert trace_stage.reachable(res, low._replace(bucket=2))
    assert trace_stage.reachable(res, low._replace(level=res.SHARED_BUCKET_LEVEL - 1))


class _FakeEngine:
    """What ServerWarmUp calls, recorded; the background part polls ``stop`` like the real one."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.planner = None
        self.dataset = SimpleNamespace(questions=[], name="fake")

    def warm_up(self, batch, *, method, log, topics):
        self.calls.append(("warm_up", batch, topics))
        return {"tracer_shapes": batch}

    def warm_up_rest(self, batch, *, after_questions, after_topics, method, stop, progress, log):
        self.calls.append(("warm_up_rest", batch, after_questions, after_topics))
        for i in range(600):
            if stop.is_set():
                return {"tracer_shapes": i, "stopped": True}
            progress(i + 1, 600)
            time.sleep(0.05)
        return {"tracer_shapes": 600}


def test_full_mode_compiles_every_batch_before_serving_and_starts_nothing_after():
    engine = _FakeEngine()
    warm = ServerWarmUp(engine, 8, mode="full", log=lambda _: None)
    warm.before_serving()
    warm.start()
    assert engine.calls == [("warm_up", 8, None)] and warm.status()["state"] == "ready" and warm._thread is None


def test_staged_mode_compiles_one_question_first_then_the_rest_in_the_background():
    engine = _FakeEngine()
    warm = ServerWarmUp(engine, 8, mode="staged", log=lambda _: None)
    warm.before_serving()
    # one question with one topic entity first (a run per beam), then what --max-batch questions reach
    assert engine.calls == [("warm_up", 1, 1)] and warm.status()["state"] == "warming"
    warm.start()
    deadline = time.time() + 30
    while ("warm_up_rest", 8, 1, 1) not in engine.calls:
        assert time.time() < deadline
        time.sleep(0.01)
    warm.stop()
    assert warm.status()["state"] == "stopped" and not warm._thread.is_alive()


def test_stopping_the_app_during_the_background_warm_up_stops_it(tmp_path):
    engine = _engine(tmp_path)
    fake = _FakeEngine()
    engine.warm_up_rest = fake.warm_up_rest  # 30 s of "shapes" unless stopped
    warm = ServerWarmUp(engine, 8, mode="staged", log=lambda _: None)
    warm.before_serving()
    with TestClient(create_app(engine, max_batch=8, max_wait_ms=1, warm_up=warm)) as client:
        assert client.get("/healthz").json()["warm_up"]["state"] == "warming"
        began = time.perf_counter()
    assert time.perf_counter() - began < 10
    assert warm.status()["state"] == "stopped" and not warm._thread.is_alive()


def test_none_mode_compiles_nothing_and_says_off():
    engine = _FakeEngine()
    warm = ServerWarmUp(engine, 8, mode="none", log=lambda _: None)
    warm.before_serving()
    warm.start()
    assert engine.calls == [] and warm.status()["state"] == "off"


def test_an_unknown_mode_is_refused_with_the_modes():
    with pytest.raises(StemError, match="staged.*full.*none"):
        ServerWarmUp(_FakeEngine(), 8, mode="lazy")


def test_warm_up_flags():
    parse = build_parser().parse_args
    base = ["serve", "--dataset", "demo"]
    assert parse(base).warm_up == "staged"
    assert parse([*base, "--warm-up", "full"]).warm_up == "full"
    assert parse([*base, "--no-warm-up"]).warm_up == "none"
    assert CLI_MODES == WARM_UP_MODES


def test_sigterm_during_the_background_warm_up_exits_cleanly(tmp_path):
    """The real command, staged, for batches big enough that the background part is still compiling: SIGTERM
    stops it after the shape it is in, and the server shuts down gracefully."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "stem_jax.cli.main", "serve", "--dataset", "demo", "--limit", "3",
           "--planner", "oracle", "--encoder.name=hashing", "--engine.batch_breadth=8", "--engine.batch_precision=32",
           "--cache-dir", str(tmp_path), "--port", "0", "--max-batch", "256", "--no-progress", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        lines = read_until(proc, "background warm-up for batches")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + out
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: the default exit status of a TERM
    assert proc.returncode in (0, -signal.SIGTERM), text
    assert "Traceback" not in text
    assert "background warm-up stopped after" in text, text
    assert "background warm-up done in" not in text

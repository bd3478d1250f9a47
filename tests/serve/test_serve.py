"""`stem-jax serve` — the HTTP API, dynamic batching, errors, overload and shutdown.

Demo KG with the hashing encoder and the oracle planner (fast, offline). Split questions are sent by
``qid`` (the oracle plans from their gold path); free text checks the topic link and entity errors.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import httpx
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides
from stem_jax.data.types import Question
from stem_jax.engine import Answer
from stem_jax.errors import StemError
from stem_jax.serve import Batcher, Job, OverloadedError, create_app

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


def _key(answers) -> list[tuple[str, float]]:
    return [(name, round(float(score), 4)) for name, score in answers]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=cache, limit=6)


@pytest.fixture(scope="module")
def expected(engine):
    """What Engine.ask gives, one question at a time: by qid, and for each question's bracketed text."""
    by_qid = {q.qid: _key(engine.ask(q).answers) for q in engine.dataset.questions}
    texts = {}
    for q in engine.dataset.questions[:3]:
        text = q.text.replace(q.topic_entities[0], f"[{q.topic_entities[0]}]")
        texts[text] = _key(engine.ask(text).answers)
    return by_qid, texts


@pytest.fixture(scope="module")
def client(engine, expected):
    app = create_app(engine, max_batch=8, max_wait_ms=10, queue_size=64)
    with TestClient(app) as c:
        yield c


# ----- happy path ------------------------------------------------------------------------------
def test_healthz_info_and_openapi(client, engine):
    assert client.get("/healthz").json()["status"] == "ok"
    info = client.get("/v1/info").json()
    assert info["dataset"] == "demo" and info["method"] == "stem"
    assert info["kg"]["fingerprint"] == engine.index.fingerprint
    assert info["planner"]["name"] == "oracle" and info["encoder"]
    assert info["config"]["encoder"]["name"] == "hashing"
    assert info["serve"]["max_batch"] == 8
    assert "/v1/ask" in client.get("/openapi.json").json()["paths"]


def test_ask_by_qid_matches_engine_ask(client, engine, expected):
    by_qid, _ = expected
    question = engine.dataset.questions[7]
    body = client.post("/v1/ask", json={"qid": question.qid, "top": 1000}).json()
    assert body["qid"] == question.qid
    assert _key((a["entity"], a["score"]) for a in body["answers"]) == by_qid[question.qid]
    assert body["answers"], "the oracle plan of a split question finds answers on the demo KG"
    assert body["plans"] and body["evidence"] and body["chains"]
    assert {"plan", "trace", "answer", "total"} <= set(body["stage_ms"])


def test_ask_text_links_the_topic(client, expected):
    _, texts = expected
    text, answers = next(iter(texts.items()))
    body = client.post("/v1/ask", json={"question": text, "top": 1000}).json()
    assert body["topic_link"]["match"] == ["exact"]
    assert _key((a["entity"], a["score"]) for a in body["answers"]) == answers


def test_retrieve_keeps_order(client, engine, expected):
    by_qid, texts = expected
    qids = [q.qid for q in engine.dataset.questions[::3]]
    text = next(iter(texts))
    items = [{"qid": qid} for qid in qids] + [text]
    results = client.post("/v1/retrieve", json={"questions": items, "top": 1000}).json()["results"]
    assert [r["qid"] for r in results[:-1]] == qids
    for r in results[:-1]:
        assert _key((a["entity"], a["score"]) for a in r["answers"]) == by_qid[r["qid"]]
    assert _key((a["entity"], a["score"]) for a in results[-1]["answers"]) == texts[text]


def test_metrics_prometheus_text(client, engine):
    client.post("/v1/ask", json={"qid": engine.dataset.questions[0].qid})
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'stem_requests_total{endpoint="/v1/ask",status="200"}' in text
    assert 'stem_request_seconds_bucket{endpoint="/v1/ask"' in text
    assert 'stem_stage_ms_bucket{le="1.0",stage="trace"}' in text
    assert "stem_batch_questions_count" in text and "stem_queue_depth" in text and "stem_compiles" in text


# ----- every bad request is a 4xx JSON error, never a traceback ---------------------------------
BAD = [
    ("post", "/v1/ask", {"question": ""}, 422),
    ("post", "/v1/ask", {"question": "   "}, 422),
    ("post", "/v1/ask", {"question": "x" * 1001}, 422),
    ("post", "/v1/ask", {"question": 5}, 422),
    ("post", "/v1/ask", {"question": ["a"]}, 422),
    ("post", "/v1/ask", {}, 422),
    ("post", "/v1/ask", {"question": "who", "qid": "demo/test/1-hop/0"}, 422),
    ("post", "/v1/ask", {"question": "who", "colour": "red"}, 422),
    ("post", "/v1/ask", {"question": "who directed [The Saidor]", "top": 0}, 422),
    ("post", "/v1/ask", {"question": "who directed [The Saidor]", "method": "nope"}, 422),
    ("post", "/v1/ask", "not json", 422),
    ("post", "/v1/retrieve", {"questions": []}, 422),
    ("post", "/v1/retrieve", {"questions": ["q"] * 257}, 422),
    ("post", "/v1/retrieve", {"questions": "who"}, 422),
    ("post", "/v1/ask", {"question": "what films did [Nobody Here] star in"}, 400),
    ("post", "/v1/ask", {"question": "zzzz qqqq"}, 400),
    ("post", "/v1/retrieve", {"questions": ["who directed [The Saidor]", "what films did [Nobody Here] star in"]}, 400),
    ("post", "/v1/ask", {"qid": "no/such/question"}, 404),
    ("get", "/v1/ask", None, 405),
    ("get", "/v2/nothing", None, 404),
]


@pytest.mark.parametrize(("verb", "path", "body", "status"), BAD, ids=[f"{p}-{s}-{i}" for i, (_, p, _, s) in enumerate(BAD)])
def test_bad_requests_are_json_4xx(client, verb, path, body, status):
    if verb == "get":
        response = client.get(path)
    elif isinstance(body, str):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] and error["message"]
    assert "Traceback" not in response.text and 'File "' not in response.text


def test_unknown_entity_carries_the_stem_error_text(client):
    error = client.post("/v1/ask", json={"question": "what films did [Nobody Here] star in"}).json()["error"]
    assert error["type"] == "stem_error"
    assert "is not in the KG" in error["message"] and "how to fix" in error["message"]


def test_internal_error_is_json_500_without_traceback(engine):
    def boom(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    app = create_app(engine, max_batch=2, max_wait_ms=1, queue_size=4)
    original = engine.retrieve
    engine.retrieve = boom
    try:
        with TestClient(app, raise_server_exceptions=False) as c:
            response = c.post("/v1/ask", json={"qid": engine.dataset.questions[0].qid})
    finally:
        del engine.retrieve
    assert engine.retrieve == original
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "internal"
    assert "secret" not in response.text and "Traceback" not in response.text


# ----- overload ---------------------------------------------------------------------------------
def _gate(engine):
    """Make engine.retrieve wait for the returned event (restore with ``del engine.retrieve``)."""
    gate, entered = threading.Event(), threading.Event()
    retrieve = engine.retrieve

    def gated(*args, **kwargs):
        entered.set()
        assert gate.wait(60)
        return retrieve(*args, **kwargs)

    engine.retrieve = gated
    return gate, entered


def test_full_queue_is_503_with_retry_after(engine):
    app = create_app(engine, max_batch=1, max_wait_ms=0, queue_size=2)
    batcher = app.state.batcher
    questions = engine.dataset.questions
    gate, entered = _gate(engine)
    try:
        with TestClient(app) as c:
            first = batcher.submit([Job(None, "stem", question=questions[0])])
            assert entered.wait(60)  # the worker holds the first question; the queue is empty
            queued = batcher.submit([Job(None, "stem", question=q) for q in questions[1:3]])
            response = c.post("/v1/ask", json={"qid": questions[3].qid})
            assert response.status_code == 503
            assert int(response.headers["retry-after"]) >= 1
            assert response.json()["error"]["type"] == "overloaded"
            assert "stem_rejected_total 1.0" in c.get("/metrics").text
            assert c.get("/healthz").json()["queue_depth"] == 2
            gate.set()
            assert [f.result(60).question.qid for f in first + queued] == [q.qid for q in questions[:3]]
            assert c.post("/v1/ask", json={"qid": questions[3].qid}).status_code == 200
    finally:
        gate.set()
        del engine.retrieve


# ----- concurrency and shutdown on a real uvicorn server ----------------------------------------
class _Server:
    def __init__(self, app):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 60
        while not self.server.started:
            assert time.time() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(60)


def test_concurrent_clients_get_engine_ask_answers(engine, expected):
    by_qid, texts = expected
    sizes = []
    retrieve = engine.retrieve

    def counted(questions, **kwargs):
        sizes.append(len(questions))
        return retrieve(questions, **kwargs)

    engine.retrieve = counted
    server = _Server(create_app(engine, max_batch=8, max_wait_ms=20, queue_size=256))
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    qids = list(by_qid)

    def client(worker: int):
        try:
            order = np.random.default_rng(worker).permutation(len(qids))
            got = []
            with httpx.Client(base_url=server.url, timeout=60) as http:
                for i in order:
                    r = http.post("/v1/ask", json={"qid": qids[i], "top": 1000})
                    assert r.status_code == 200, r.text
                    got.append((qids[i], _key((a["entity"], a["score"]) for a in r.json()["answers"])))
                for text in texts:
                    r = http.post("/v1/ask", json={"question": text, "top": 1000})
                    got.append((text, _key((a["entity"], a["score"]) for a in r.json()["answers"])))
            results[worker] = got
        except BaseException as err:
            errors.append(err)

    try:
        threads = [threading.Thread(target=client, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        server.stop()
        del engine.retrieve
    assert not errors, errors[0]
    assert len(results) == 6
    for got in results.values():
        for key, answers in got:
            assert answers == (by_qid[key] if key in by_qid else texts[key]), key
    requests = 6 * (len(qids) + len(texts))
    assert sum(sizes) <= requests  # identical questions in one batch are traced once (see the batcher tests)
    assert max(sizes) > 1, f"concurrent requests were batched: {sizes}"
    assert not server.thread.is_alive()


def test_shutdown_finishes_admitted_requests(engine, expected):
    by_qid, _ = expected
    app = create_app(engine, max_batch=2, max_wait_ms=1, queue_size=64)
    gate, entered = _gate(engine)
    server = _Server(app)
    qids = list(by_qid)[:6]
    statuses: dict[str, tuple[int, list]] = {}

    def client(qid):
        r = httpx.post(server.url + "/v1/ask", json={"qid": qid, "top": 1000}, timeout=60)
        statuses[qid] = (r.status_code, _key((a["entity"], a["score"]) for a in r.json().get("answers", [])))

    threads = [threading.Thread(target=client, args=(qid,)) for qid in qids]
    try:
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while app.state.batcher.in_flight < len(qids):  # every request admitted, the first batch blocked
            assert time.time() < deadline, app.state.batcher.in_flight
            time.sleep(0.01)
        assert entered.wait(60)
        server.server.should_exit = True  # what SIGTERM / Ctrl-C does
        time.sleep(0.3)
        gate.set()
        for t in threads:
            t.join(60)
        server.thread.join(60)
    finally:
        gate.set()
        del engine.retrieve
    assert not server.thread.is_alive()
    assert statuses == {qid: (200, by_qid[qid]) for qid in qids}
    with pytest.raises(OverloadedError):  # closed: no new admissions
        app.state.batcher.submit([Job("q", "stem")])


# ----- the batcher alone ------------------------------------------------------------------------
class _FakeEngine:
    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None):
        self.calls: list[list[str]] = []
        self.delay = delay
        self.gate = gate

    def question(self, text, *, topic=None):
        if "unknown" in text:
            raise StemError(f"topic entity [{text}] is not in the KG")
        return Question("ask/" + text, text, ("e",), ()), {"mentions": [text]}

    def retrieve(self, questions, *, method="stem"):
        if self.gate is not None:
            assert self.gate.wait(30)
        time.sleep(self.delay)
        self.calls.append([q.text for q in questions])
        return [Answer(q, [(q.text.upper(), 1.0)], [], [], {"total": 1.0}, {}) for q in questions]


def test_lone_request_is_not_held_for_company():
    fake = _FakeEngine()
    batcher = Batcher(fake, max_batch=8, max_wait_ms=300, queue_size=8)
    began = time.perf_counter()
    (future,) = batcher.submit([Job("a", "stem")])
    answer = future.result(10)
    waited = time.perf_counter() - began
    batcher.close()
    assert answer.answers == [("A", 1.0)] and answer.topic_link == {"mentions": ["a"]}
    assert waited < 0.15, waited  # no recent arrivals: nobody to wait for (held the whole 0.3 s before)


def test_dense_arrivals_are_gathered_within_max_wait():
    gate = threading.Event()
    fake = _FakeEngine(gate=gate)
    batcher = Batcher(fake, max_batch=8, max_wait_ms=150, queue_size=16)
    first = batcher.submit([Job("a", "stem")])  # alone: goes at once, and blocks the engine at the gate
    deadline = time.time() + 30
    while batcher.depth:
        assert time.time() < deadline
        time.sleep(0.002)
    began = time.perf_counter()
    rest = [batcher.submit([Job(t, "stem")])[0] for t in "bcd"]  # a few ms apart: company is expected
    assert batcher.expects_company
    gate.set()
    answers = [f.result(10) for f in first + rest]
    waited = time.perf_counter() - began
    batcher.close()
    assert [a.answers[0][0] for a in answers] == ["A", "B", "C", "D"]
    assert fake.calls == [["a"], ["b", "c", "d"]]  # gathered into one batch ...
    assert 0.1 <= waited < 1.0, waited  # ... held for the wait (it did not fill to max_batch), not much longer


def test_waiting_stops_once_arrivals_are_sparse():
    fake = _FakeEngine()
    batcher = Batcher(fake, max_batch=8, max_wait_ms=50, queue_size=64)
    for f in batcher.submit([Job(t, "stem") for t in "abcdef"]):  # one request of six: a burst
        f.result(10)
    assert batcher.expects_company
    time.sleep(0.4)  # then a question after 0.4 s of silence: the mean gap jumps past the 50 ms wait
    (future,) = batcher.submit([Job("g", "stem")])
    assert not batcher.expects_company
    began = time.perf_counter()
    future.result(10)
    assert time.perf_counter() - began < 0.04
    batcher.close()


def test_batches_fill_to_max_batch_and_isolate_errors():
    fake = _FakeEngine(delay=0.05)
    batcher = Batcher(fake, max_batch=4, max_wait_ms=200, queue_size=16)
    futures = batcher.submit([Job(t, "stem") for t in ["a", "b", "a", "unknown x", "c", "d", "e"]])
    done = [f.exception(10) or f.result(10) for f in futures]
    batcher.close()
    assert isinstance(done[3], StemError)
    assert [d.answers[0][0] for i, d in enumerate(done) if i != 3] == ["A", "B", "A", "C", "D", "E"]
    assert fake.calls[0] == ["a", "b"]  # the first four jobs: a duplicate and an error left two to trace
    assert sorted(sum(fake.calls, [])) == ["a", "b", "c", "d", "e"]


def test_queue_bound_is_all_or_nothing_and_close_drains():
    gate = threading.Event()
    fake = _FakeEngine(gate=gate)
    batcher = Batcher(fake, max_batch=1, max_wait_ms=0, queue_size=3)
    batcher.submit([Job("first", "stem")])
    deadline = time.time() + 30
    while batcher.depth:  # the worker has taken "first" and waits at the gate
        assert time.time() < deadline
        time.sleep(0.005)
    with pytest.raises(OverloadedError):
        batcher.submit([Job(t, "stem") for t in "wxyz"])  # four do not fit three places: none is queued
    assert batcher.depth == 0
    futures = batcher.submit([Job(t, "stem") for t in "xyz"])
    with pytest.raises(OverloadedError):
        batcher.submit([Job("w", "stem")])
    gate.set()
    batcher.close()  # drains the three queued jobs
    assert [f.result(0).answers[0][0] for f in futures] == ["X", "Y", "Z"]


def test_bad_settings_are_stem_errors():
    with pytest.raises(StemError, match="max_batch"):
        Batcher(_FakeEngine(), max_batch=0)


def test_answer_topic_link_is_a_copy():
    answer = Answer(Question("q", "t", ("e",), ()), [], [], [], {}, {})
    assert dataclasses.replace(answer, topic_link={"a": 1}).topic_link == {"a": 1} and answer.topic_link is None


def test_explorer_page_is_self_contained(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    page = response.text
    assert '<svg id="graph"' in page and 'fetch("v1/ask"' in page
    assert "src=\"http" not in page and "href=\"http" not in page and "cdn" not in page.lower()  # no CDN


def test_questions_endpoint_lists_the_split(client, engine):
    body = client.get("/v1/questions", params={"limit": 2}).json()
    assert body["total"] == len(engine.dataset.questions)
    assert [q["qid"] for q in body["questions"]] == [q.qid for q in engine.dataset.questions[:2]]
    assert "[" in body["questions"][0]["question"]
    assert client.get("/v1/questions", params={"limit": 0}).status_code == 422


def test_bench_serve_load_against_a_real_server(engine, tmp_path):
    from stem_jax.cli.main import main
    from stem_jax.serve.bench import batch_delta, batch_histogram, checked_url

    with pytest.raises(StemError, match="this machine only"):
        checked_url("http://example.com:8000")
    server = _Server(create_app(engine, max_batch=4, max_wait_ms=5, queue_size=64))
    try:
        code = main(["bench", "serve", "--url", server.url, "--rates", "20,40", "--duration", "0.3",
                     "--questions", "6", "--label", "test", "--out", str(tmp_path)])
        metrics = httpx.get(server.url + "/metrics").text
    finally:
        server.stop()
    assert code == 0
    import json

    run = json.loads((tmp_path / "bench-serve-demo.json").read_text())["runs"]["test"]
    assert [r["offered_rps"] for r in run["rows"]] == [20.0, 40.0]
    for row in run["rows"]:
        assert row["ok"] == row["sent"] > 0 and not row["errors"]
        assert row["latency_ms"]["p50"] > 0 and row["batches"] >= 1
    assert (tmp_path / "bench-serve-demo.md").is_file() and (tmp_path / "bench-serve-demo.png").is_file()
    hist = batch_histogram(metrics)
    assert hist["count"] >= 1 and batch_delta({"buckets": {}, "sum": 0.0, "count": 0.0}, hist)["batches"] == hist["count"]


def test_bench_reads_batch_histograms():
    from stem_jax.serve.bench import batch_delta, batch_histogram

    before = batch_histogram('stem_batch_questions_bucket{le="1.0"} 1.0\nstem_batch_questions_bucket{le="2.0"} 1.0\n'
                             'stem_batch_questions_bucket{le="+Inf"} 1.0\nstem_batch_questions_sum 1.0\n'
                             'stem_batch_questions_count 1.0\nstem_batch_seconds_sum 0.01\n')
    after = batch_histogram('stem_batch_questions_bucket{le="1.0"} 3.0\nstem_batch_questions_bucket{le="2.0"} 4.0\n'
                            'stem_batch_questions_bucket{le="+Inf"} 5.0\nstem_batch_questions_sum 12.0\n'
                            'stem_batch_questions_count 5.0\nstem_batch_seconds_sum 0.41\n')
    delta = batch_delta(before, after)
    assert delta["batches"] == 4 and delta["mean_batch"] == pytest.approx(11 / 4)
    assert delta["engine_ms_per_batch"] == pytest.approx(100.0)
    assert delta["distribution"] == {"<=1": 2, "<=2": 1, "+Inf": 1}

"""The HTTP JSON API over one warmed :class:`~stem_jax.engine.Engine` (FastAPI on uvicorn).

Why FastAPI + uvicorn: the standard ASGI pair in Python — request models with limits (pydantic),
an OpenAPI schema at ``/openapi.json`` and ``/docs`` for free, and uvicorn's graceful shutdown
(stop accepting, let open requests finish, then run the app's lifespan exit, which drains the
batch queue). The engine runs on the batcher's one thread; the event loop only awaits futures.

Every error a client can see is JSON ``{"error": {"type", "message", ...}}``: 413 for a body over
:data:`MAX_BODY_BYTES` (refused before it is parsed), 422 for a request that is not JSON (malformed,
not UTF-8, nested too deep) or does not fit the models (empty or oversized question, wrong types, with
no coercion: ``"top": "3"`` and ``"top": true`` are refused, unknown fields; at most
:data:`MAX_ERRORS_LISTED` problems are listed, and how many there were), 400 for a question
the engine refuses (its :class:`StemError` text: unknown entity, no entity found), 404 for an unknown
split question id or route, 503 + ``Retry-After`` when the queue is full or the server is stopping,
500 ``internal error`` (the traceback goes to the server log only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import platform
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from stem_jax.errors import StemError
from stem_jax.serve.batcher import Batcher, Job, OverloadedError
from stem_jax.serve.metrics import ServeMetrics
from stem_jax.serve.warm import ServerWarmUp

log = logging.getLogger("stem_jax.serve")

MAX_QUESTION_CHARS = 1000
MAX_TOPIC_CHARS = 300
MAX_REQUEST_QUESTIONS = 256
# The largest valid request (256 questions of 1000 characters, topics, options) is ~330 KB; a body over
# this is refused unread, so that parsing and validating one request cannot stall the others (a 10 MB
# body of unknown keys would take seconds and answer a list of errors larger than itself).
MAX_BODY_BYTES = 1 << 19
MAX_ERRORS_LISTED = 20
METHOD_NAMES = ("stem", "safe", "scr")

QuestionText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUESTION_CHARS)]
TopicText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TOPIC_CHARS)]
Qid = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)]


class QuestionItem(BaseModel):
    """One question: free ``question`` text (topic in [brackets], or ``topic``, or the entity linker finds
    it), or ``qid``, the id of a question of the loaded split (it carries its own topic and gold path,
    so the oracle planner can plan it)."""

    model_config = ConfigDict(extra="forbid")
    question: QuestionText | None = None
    qid: Qid | None = None
    topic: TopicText | None = None

    @model_validator(mode="after")
    def _one_source(self) -> QuestionItem:
        if (self.question is None) == (self.qid is None):
            raise ValueError("give exactly one of 'question' (text) or 'qid' (a question id of the loaded split)")
        if self.qid is not None and self.topic is not None:
            raise ValueError("'topic' goes with 'question' text; a split question ('qid') has its own topic")
        return self


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str | None = Field(None, description="retrieval method (default: the server's --method)")
    top: int = Field(10, ge=1, le=1000, strict=True, description="answers and chains to return")
    evidence_limit: int = Field(200, ge=0, le=100_000, strict=True, description="evidence triples to return")


class AskRequest(QuestionItem, Options):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"question": "which actors appear in [The Rimloumjaith]"}, {"qid": "demo/test/1-hop/0"}]})


class RetrieveRequest(Options):
    questions: list[QuestionText | QuestionItem] = Field(..., min_length=1, max_length=MAX_REQUEST_QUESTIONS)


class APIError(Exception):
    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, **extra}}, status_code=status, headers=headers)


_PLAN = re.compile(r"^\{(?P<body>.*)\} -> (?P<answer>.+) \[(?P<strategy>\w+)\]$")
_PLACEHOLDER = re.compile(r"^\[ENT(\d+)\]$")
_STRATEGY_WORDS = {"Precision": "the best match at each step", "Breadth": "every good match at each step"}


def plan_in_words(plan: str) -> str:
    """A schema plan as a sentence: ``{(Kismet, directed_by, [ENT1])} -> [ENT1] [Precision]`` reads
    "start at Kismet; follow 'directed by' from Kismet to ?1; the answers are ?1 (the best match at each
    step)"; the plan text itself when it is not in that form."""
    found = _PLAN.match(plan.strip())
    if not found:
        return plan
    triples = [t.strip("() ").split(", ") for t in found["body"].split("); (")]
    if any(len(t) != 3 for t in triples):
        return plan

    def node(text: str) -> str:
        slot = _PLACEHOLDER.match(text.strip())
        return f"?{slot.group(1)}" if slot else text.strip()

    known = {n.strip() for t in triples for n in (t[0], t[2]) if not _PLACEHOLDER.match(n.strip())}
    start = next((n.strip() for t in triples for n in (t[0], t[2]) if n.strip() in known), None)
    steps = [f"start at {start}"] if start else []
    for head, relation, tail in triples:
        words = relation.strip().replace("_", " ")
        head, tail = head.strip(), tail.strip()
        if head in known or tail not in known:
            steps.append(f"follow '{words}' from {node(head)} to {node(tail)}")
        else:
            steps.append(f"follow '{words}' backwards from {node(tail)} to {node(head)}")
        known |= {head, tail}
    strategy = _STRATEGY_WORDS.get(found["strategy"], found["strategy"])
    return f"{'; '.join(steps)}; the answers are {node(found['answer'])} ({strategy})"


def chain_paths(evidence: Sequence[Sequence[str]], topics: Sequence[str], answers: Sequence[str],
                limit: int = 5) -> list[dict[str, Any]]:
    """For each of the first ``limit`` answers the evidence reaches, one shortest walk from a topic to it:
    ``{"answer", "nodes": [topic, ..., answer], "edges": [{"relation", "forward"}, ...]}`` (``forward``:
    the KG triple points along the walk). What the explorer draws first, topic left, answer right."""
    adjacency: dict[str, list[tuple[str, str, bool]]] = {}
    for head, relation, tail in sorted({tuple(t) for t in evidence}):
        adjacency.setdefault(head, []).append((tail, relation, True))
        if tail != head:
            adjacency.setdefault(tail, []).append((head, relation, False))
    parent: dict[str, tuple[str, str, bool] | None] = {t: None for t in topics if t in adjacency}
    queue = list(parent)
    for node in queue:  # breadth first: the first parent found lies on a shortest walk
        for neighbour, relation, forward in adjacency.get(node, []):
            if neighbour not in parent:
                parent[neighbour] = (node, relation, forward)
                queue.append(neighbour)
    out = []
    for answer in answers:
        if answer not in parent or parent[answer] is None:
            continue
        nodes, edges, node = [answer], [], answer
        while parent[node] is not None:
            previous, relation, forward = parent[node]
            nodes.append(previous)
            edges.append({"relation": relation, "forward": forward})
            node = previous
        out.append({"answer": answer, "nodes": nodes[::-1], "edges": edges[::-1]})
        if len(out) >= limit:
            break
    return out


def answer_json(answer: Any, *, top: int, evidence_limit: int, method: str,
                display: Any = None) -> dict[str, Any]:
    """An :class:`~stem_jax.engine.Answer` as plain JSON.

    Beside the answers: ``reason`` (why there is no answer, or why the answers do not follow the plan),
    ``topic_names`` (the topics as the evidence names them, through ``display``), ``plans_in_words``
    (:func:`plan_in_words`) and ``chain_paths`` (:func:`chain_paths`: the explorer's first picture)."""
    record = answer.record or {}
    plans = list(record.get("plans") or [])
    topic_names = [display(t) if display else t for t in answer.question.topic_entities]
    ranked = [name for name, _ in answer.answers[:top]]
    return {
        "qid": answer.question.qid,
        "question": answer.question.text,
        "topic_entities": list(answer.question.topic_entities),
        "topic_names": topic_names,
        "topic_link": answer.topic_link,
        "method": method,
        "answers": [{"entity": name, "score": float(score)} for name, score in answer.answers[:top]],
        "reason": getattr(answer, "reason", None),
        "confident": getattr(answer, "confident", None),
        "plans": plans,
        "plans_in_words": [plan_in_words(p) for p in plans],
        "evidence": [list(t) for t in answer.evidence[:evidence_limit]],
        "evidence_count": len(answer.evidence),
        "chains": list(answer.chains[:top]),
        "chain_paths": chain_paths(answer.evidence, topic_names, ranked),
        "stage_ms": {k: float(v) for k, v in answer.stage_ms.items()},
    }


class _LimitBody:
    """Pure ASGI middleware: a request body over ``limit`` bytes is answered 413 before anything parses it
    (by its Content-Length, else while it streams in); a body within it is passed on unchanged."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES):
        self.app, self.limit = app, limit

    async def _refuse(self, send: Any, size: str) -> None:
        body = JSONResponse({"error": {"type": "too_large", "message": f"the request body is {size} bytes, over the "
                                       f"limit of {self.limit}\n  how to fix: send at most {MAX_REQUEST_QUESTIONS} "
                                       f"questions of at most {MAX_QUESTION_CHARS} characters per request",
                                       "limit_bytes": self.limit}}, status_code=413)
        await send({"type": "http.response.start", "status": 413, "headers": body.raw_headers})
        await send({"type": "http.response.body", "body": body.body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send, declared.decode())
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(send, f"more than {size}")
                return
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class _CountRequests:
    """Pure ASGI middleware (cheaper than ``@app.middleware``): request counts by route and status, latency."""

    def __init__(self, app: Any, metrics: ServeMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = [500]

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            endpoint = getattr(scope.get("route"), "path", "other")
            self.metrics.requests.labels(endpoint=endpoint, status=str(status[0])).inc()
            if endpoint in ("/v1/ask", "/v1/retrieve"):
                self.metrics.latency.labels(endpoint=endpoint).observe(time.perf_counter() - began)


def engine_info(engine: Any, method: str) -> dict[str, Any]:
    import dataclasses

    import jax

    import stem_jax
    from stem_jax.config import as_dict

    spec = engine.planner_spec
    return {
        "dataset": engine.dataset.name,
        "split": getattr(engine.dataset_spec, "split", None),
        "questions_loaded": len(engine.dataset.questions),
        "kg": {"fingerprint": engine.index.fingerprint, "entities": len(engine.index.entities),
               "relations": len(getattr(engine.index, "relations", []) or [])},
        "method": method,
        "planner": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(spec).items()},
        "guidance": {k: (str(v) if isinstance(v, Path) else v)
                     for k, v in dataclasses.asdict(engine.guidance_spec).items()},
        "encoder": getattr(engine.encoder, "name", type(engine.encoder).__name__),
        "config": as_dict(engine.config),
        "versions": {"stem_jax": stem_jax.__version__, "jax": jax.__version__, "python": platform.python_version()},
    }


def create_app(engine: Any, *, method: str = "stem", max_batch: int = 32, max_wait_ms: float = 5.0,
               queue_size: int = 256, warm_up: ServerWarmUp | dict[str, Any] | None = None, explorer: bool = True,
               keep_prepared: int = 4096) -> FastAPI:
    """The app for ``engine`` (opened, and ideally warmed with ``engine.warm_up(max_batch)``, by the caller).

    ``warm_up``: a :class:`~stem_jax.serve.warm.ServerWarmUp` whose :meth:`~ServerWarmUp.before_serving` ran (the
    app starts its background part when it starts, stops it when it stops, and shows its state in ``/healthz``,
    ``/v1/info`` and ``/metrics``), or a plain dict of what a warm-up compiled (shown in ``/v1/info``).
    ``keep_prepared``: the engine keeps the prepared runs (plans, grounding, guidance) of this many
    recently answered questions (:attr:`Engine.keep_prepared`), so a repeated question is only traced."""
    if hasattr(engine, "keep_prepared"):
        engine.keep_prepared = int(keep_prepared)
    holder: dict[str, Any] = {}
    warm = warm_up if isinstance(warm_up, ServerWarmUp) else None
    metrics = ServeMetrics(lambda: holder["batcher"].depth if "batcher" in holder else 0,
                           lambda: holder["batcher"].in_flight if "batcher" in holder else 0,
                           warming=(lambda: float(warm.status()["state"] == "warming")) if warm else None)
    batcher = Batcher(engine, max_batch=max_batch, max_wait_ms=max_wait_ms, queue_size=queue_size,
                      on_batch=metrics.on_batch)
    holder["batcher"] = batcher
    by_qid = {q.qid: q for q in engine.dataset.questions}
    info = engine_info(engine, method)
    info["serve"] = {"max_batch": max_batch, "max_wait_ms": max_wait_ms, "queue_size": queue_size,
                     "keep_prepared": int(keep_prepared),
                     "max_question_chars": MAX_QUESTION_CHARS, "max_request_questions": MAX_REQUEST_QUESTIONS,
                     "warm_up": warm_up if warm is None else None}
    started = time.time()

    def warm_up_state() -> dict[str, Any] | None:
        return None if warm is None else {**warm.status(), **warm.summary()}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        if warm is not None:
            warm.start()  # staged: the larger batches' shapes compile while requests are answered
        yield
        loop = asyncio.get_running_loop()
        if warm is not None:  # ends after the shape it is compiling: a shutdown waits seconds, not the warm-up
            await loop.run_in_executor(None, warm.stop)
        # uvicorn calls this after open requests finished; drain whatever is still admitted
        await loop.run_in_executor(None, batcher.close)

    app = FastAPI(title="stem-jax", version=info["versions"]["stem_jax"], lifespan=lifespan,
                  description="STEM knowledge-graph retrieval: answers, evidence triples, chains, stage timings.")
    app.state.batcher = batcher
    app.state.metrics = metrics
    app.state.engine = engine

    app.add_middleware(_LimitBody)
    app.add_middleware(_CountRequests, metrics=metrics)  # outermost: counts the 413s too

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        details = [{"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
                   for e in errors[:MAX_ERRORS_LISTED]]
        message = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in details) or "invalid request"
        if len(errors) > len(details):
            message += f"; and {len(errors) - len(details)} more problems (the first {len(details)} are listed)"
        return _error(422, "invalid_request", message, details=details, problems=len(errors))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 400 and "parsing the body" in str(err.detail):
            # FastAPI's answer to a body json.loads raised on other than a syntax error (not UTF-8, nested
            # too deep): malformed JSON like any other, so the same 422 as a syntax error
            return _error(422, "invalid_request", "body: the request body is not valid JSON (malformed, not UTF-8, "
                          "or nested too deep)")
        return _error(err.status_code, "http", str(err.detail), headers=getattr(err, "headers", None))

    @app.exception_handler(APIError)
    async def api_error(_: Request, err: APIError) -> JSONResponse:
        return _error(err.status, err.kind, err.message, headers=err.headers)

    @app.exception_handler(Exception)
    async def internal(request: Request, err: Exception) -> JSONResponse:
        log.error("internal error on %s", request.url.path, exc_info=err)
        return _error(500, "internal", "internal error (see the server log)")

    def jobs_for(items: Sequence[str | QuestionItem], chosen: str) -> list[Job]:
        jobs = []
        for item in items:
            if isinstance(item, str):
                jobs.append(Job(item, chosen))
            elif item.qid is not None:
                if item.qid not in by_qid:
                    raise APIError(404, "unknown_qid", f"no question with qid {item.qid!r} in the loaded split "
                                   f"({engine.dataset.name})\n  how to fix: send 'question' text instead, or a qid "
                                   "listed by the dataset")
                jobs.append(Job(None, chosen, question=by_qid[item.qid]))
            else:
                jobs.append(Job(item.question, chosen, topic=item.topic))
        return jobs

    async def run(items: Sequence[str | QuestionItem], options: Options) -> list[dict[str, Any]]:
        chosen = options.method or method
        if chosen not in METHOD_NAMES:
            raise APIError(422, "invalid_request", f"method {chosen!r} is not one of {', '.join(METHOD_NAMES)}")
        if len(items) > queue_size:
            raise APIError(400, "too_many_questions", f"{len(items)} questions cannot fit the queue of "
                           f"{queue_size}\n  how to fix: send at most {queue_size} questions per request")
        try:
            futures = batcher.submit(jobs_for(items, chosen))
        except OverloadedError as err:
            metrics.rejected.inc()
            raise APIError(503, "overloaded", str(err), {"Retry-After": str(err.retry_after_s)}) from None
        out = []
        for future in futures:
            try:
                answer = await asyncio.wrap_future(future)
            except StemError as err:
                raise APIError(400, "stem_error", str(err)) from None
            except OverloadedError as err:
                raise APIError(503, "overloaded", str(err), {"Retry-After": str(err.retry_after_s)}) from None
            metrics.on_answer(answer.stage_ms)
            out.append(answer_json(answer, top=options.top, evidence_limit=options.evidence_limit, method=chosen,
                                   display=getattr(engine, "display", None)))
        return out

    # JSONResponse directly: the answers are plain JSON already, and FastAPI's generic re-encoding of a
    # returned dict (jsonable_encoder over every evidence triple) cost more than the engine call at load
    @app.post("/v1/ask", summary="Answer one question", response_class=JSONResponse)
    async def ask(body: AskRequest) -> JSONResponse:
        return JSONResponse((await run([QuestionItem(question=body.question, qid=body.qid, topic=body.topic)],
                                       body))[0])

    @app.post("/v1/retrieve", summary="Answer a list of questions", response_class=JSONResponse)
    async def retrieve(body: RetrieveRequest) -> JSONResponse:
        return JSONResponse({"results": await run(body.questions, body)})

    @app.get("/healthz", summary="Liveness, warm-up state and queue state")
    async def healthz() -> dict[str, Any]:
        """``ready`` is false while a staged warm-up compiles in the background (requests are answered meanwhile,
        and one may compile a shape); ``warm_up`` says how far it is (``state``: warming, ready, off, stopped,
        failed)."""
        state = warm.status() if warm is not None else None
        return {"status": "ok", "ready": state is None or state["state"] != "warming", "warm_up": state,
                "queue_depth": batcher.depth, "in_flight": batcher.in_flight,
                "uptime_s": round(time.time() - started, 3)}

    @app.get("/v1/info", summary="Dataset, KG fingerprint, config, method, planner, versions")
    async def get_info() -> dict[str, Any]:
        if warm is None:
            return info
        return {**info, "serve": {**info["serve"], "warm_up": warm_up_state()}}

    @app.get("/v1/questions", summary="Questions of the loaded split (ids for 'qid', bracketed text)")
    async def questions(limit: int = Query(20, ge=1, le=10_000)) -> dict[str, Any]:
        out = []
        for q in engine.dataset.questions[:limit]:
            text = q.text
            for topic in q.topic_entities[:1]:
                name = engine.display(topic)
                text = text.replace(name, f"[{name}]", 1) if name in text else text
            out.append({"qid": q.qid, "question": text, "topic_entities": [engine.display(t) for t in q.topic_entities]})
        return {"questions": out, "total": len(engine.dataset.questions)}

    @app.get("/metrics", summary="Prometheus metrics")
    async def get_metrics() -> Response:
        return Response(metrics.render(), media_type=ServeMetrics.CONTENT_TYPE)

    if explorer:
        page = Path(__file__).with_name("explorer.html")

        @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
        async def index() -> Response:
            if not page.is_file():
                return _error(404, "http", "the explorer page is not installed")
            return HTMLResponse(page.read_text(encoding="utf-8"))

    return app

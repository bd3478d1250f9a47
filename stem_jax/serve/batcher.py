"""Dynamic batching: one worker thread turns queued questions into one ``Engine.retrieve`` call per batch.

Requests put their questions on a bounded queue (all of a request's questions or none: a full queue
is :class:`OverloadedError`, which the app answers with 503 + ``Retry-After``). The worker takes the
oldest question, then waits until ``max_batch`` questions are queued or the oldest has waited
``max_wait_ms``, whichever comes first, and answers them with one ``retrieve`` call (one per method
when a batch mixes methods). A lone question is therefore delayed by at most ``max_wait_ms``.

It waits only when company is expected: when the recent gap between arriving questions (an
exponentially weighted mean) is shorter than the wait. At low load a question then goes to the
engine at once instead of paying the whole wait for nobody (the issue's target is a low-load p50
within 5 ms of ``stem-jax ask --warm``: a 5 ms wait alone would spend it); under load the questions
that arrive while a batch runs form the next batch anyway, and the wait still fills batches between.

Each question is turned into a :class:`Question` on its own (``Engine.question``), so an unknown
entity fails only its own request; identical questions in one batch are traced once. If the batch
call itself raises, its questions are retried one by one so that one bad question cannot fail the
others. :meth:`Batcher.close` stops admitting and (by default) answers everything already admitted.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from stem_jax.data.types import Question
from stem_jax.errors import StemError


class OverloadedError(Exception):
    """The bounded queue cannot take the request now (or the batcher is shutting down)."""

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclasses.dataclass
class Job:
    """One question of a request: free text (optionally with a topic entity name) or a split question."""

    text: str | None
    method: str
    topic: str | None = None
    question: Question | None = None
    future: Future = dataclasses.field(default_factory=Future)
    enqueued: float = dataclasses.field(default_factory=time.perf_counter)

    def key(self) -> tuple:
        if self.question is not None:
            return ("q", self.question.qid)
        return ("t", self.text, self.topic)


class Batcher:
    """Gathers :class:`Job` s into batches and answers them with ``engine.retrieve`` on one thread."""

    def __init__(self, engine: Any, *, max_batch: int = 32, max_wait_ms: float = 5.0, queue_size: int = 256,
                 on_batch: Callable[[int, float], None] | None = None):
        if max_batch < 1 or queue_size < 1 or max_wait_ms < 0:
            raise StemError(f"max_batch={max_batch}, queue_size={queue_size}, max_wait_ms={max_wait_ms}: "
                            "expected max_batch >= 1, queue_size >= 1, max_wait_ms >= 0\n"
                            "  how to fix: e.g. --max-batch 32 --max-wait-ms 5 --queue-size 256")
        self.engine = engine
        self.max_batch = int(max_batch)
        self.max_wait_s = float(max_wait_ms) / 1000.0
        self.queue_size = int(queue_size)
        self.on_batch = on_batch  # (questions in the batch, seconds the engine took) after every batch
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._busy = 0  # questions taken off the queue and not yet answered
        # mean seconds between arriving questions (EWMA); inf until two have arrived: the first waits for nobody
        self._gap = math.inf
        self._last_arrival: float | None = None
        self._worker = threading.Thread(target=self._run, name="stem-serve-batcher", daemon=True)
        self._worker.start()

    # ----- admission ---------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Questions waiting in the queue (not yet taken into a batch)."""
        return len(self._jobs)

    @property
    def in_flight(self) -> int:
        """Questions admitted and not yet answered (queued or in the running batch)."""
        with self._cond:
            return len(self._jobs) + self._busy

    def submit(self, jobs: Sequence[Job]) -> list[Future]:
        """Queue ``jobs`` (all or none) and return their futures; raises :class:`OverloadedError` if they do not fit."""
        jobs = list(jobs)
        with self._cond:
            if self._closing:
                raise OverloadedError("the server is shutting down", retry_after_s=5)
            if len(self._jobs) + len(jobs) > self.queue_size:
                raise OverloadedError(f"the request queue is full ({len(self._jobs)} of {self.queue_size} questions "
                                 f"queued, this request has {len(jobs)})")
            now = time.perf_counter()
            if jobs:
                self._note_arrivals(now, len(jobs))
            for job in jobs:
                job.enqueued = now
                self._jobs.append(job)
            self._cond.notify_all()
        return [job.future for job in jobs]

    GAP_WEIGHT = 0.3  # EWMA weight of the newest gap: a few sparse arrivals after a burst end the waiting

    def _note_arrivals(self, now: float, count: int) -> None:
        """Update the mean arrival gap with ``count`` questions arriving at ``now`` (one request)."""
        if self._last_arrival is not None:
            gaps = [now - self._last_arrival] + [0.0] * (count - 1)  # a request's questions arrive together
            for gap in gaps:
                self._gap = gap if math.isinf(self._gap) else (1 - self.GAP_WEIGHT) * self._gap + self.GAP_WEIGHT * gap
        elif count > 1:
            self._gap = 0.0
        self._last_arrival = now

    @property
    def expects_company(self) -> bool:
        """Whether another question is likely to arrive within ``max_wait_ms`` (the recent mean gap is shorter)."""
        return self._gap < self.max_wait_s

    def close(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop admitting; answer every admitted question first (``drain``) or fail them with :class:`OverloadedError`."""
        with self._cond:
            self._closing = True
            if not drain:
                while self._jobs:
                    job = self._jobs.popleft()
                    if not job.future.done():
                        job.future.set_exception(OverloadedError("the server shut down before this question ran", 5))
            self._cond.notify_all()
        self._worker.join(timeout)

    # ----- the worker --------------------------------------------------------------------------
    def _take(self) -> list[Job] | None:
        with self._cond:
            while not self._jobs and not self._closing:
                self._cond.wait()
            if not self._jobs:
                return None  # closing and drained
            deadline = self._jobs[0].enqueued + self.max_wait_s
            while len(self._jobs) < self.max_batch and not self._closing and self.expects_company:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch = [self._jobs.popleft() for _ in range(min(self.max_batch, len(self._jobs)))]
            self._busy = len(batch)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._answer(batch)
            except BaseException as err:  # never leave a future hanging, whatever went wrong
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(err)
            finally:
                with self._cond:
                    self._busy = 0

    def _answer(self, batch: list[Job]) -> None:
        by_method: dict[str, list[Job]] = {}
        for job in batch:
            if job.future.set_running_or_notify_cancel():
                by_method.setdefault(job.method, []).append(job)
        for method, jobs in by_method.items():
            self._answer_method(method, jobs)

    def _answer_method(self, method: str, jobs: list[Job]) -> None:
        unique: dict[tuple, tuple[Question, dict | None, list[Job]]] = {}
        for job in jobs:
            key = job.key()
            if key in unique:
                unique[key][2].append(job)
                continue
            try:
                if job.question is not None:
                    question, link = job.question, None
                else:
                    question, link = self.engine.question(job.text, topic=job.topic)
            except Exception as err:  # unknown entity, bad text: this request's own error
                job.future.set_exception(err)
                continue
            unique[key] = (question, link, [job])
        if not unique:
            return
        entries = list(unique.values())
        began = time.perf_counter()
        try:
            answers: list[Any] = self.engine.retrieve([q for q, _, _ in entries], method=method)
        except Exception:
            answers = []
            for question, _, _ in entries:  # isolate the question that failed
                try:
                    answers.append(self.engine.retrieve([question], method=method)[0])
                except Exception as err:
                    answers.append(err)
        if self.on_batch is not None:
            self.on_batch(len(entries), time.perf_counter() - began)
        for (_, link, owners), answer in zip(entries, answers, strict=True):
            for job in owners:
                if isinstance(answer, Exception):
                    job.future.set_exception(answer)
                else:
                    job.future.set_result(dataclasses.replace(answer, topic_link=link) if link else answer)

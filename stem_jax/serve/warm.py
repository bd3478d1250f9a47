"""A server's warm-up: compile what requests reach before serving (``full``), or only what a one-question request
reaches and the rest while serving (``staged``), or nothing (``none``).

:meth:`Engine.warm_up <stem_jax.engine.Engine.warm_up>` compiles the encoder and the tracer's shapes. What a request
also reaches on a natural-question KG (the path planner's scoring call, the answer scorer, the planner's and the
scorer's tables built on first use) compiles or fills on first use. :func:`warm_by_example` compiles the path
planner's bounded set of scoring shapes, embeds the answer scorer's relation texts, then answers ``1, 2, 4, ...
max_batch`` questions of the split once each, so that the first request finds every table built and (with JAX's
persistent compilation cache, which a second start reads) compiles nothing.

:class:`ServerWarmUp` stages it. ``staged``: before the socket opens, the encoder, the tracer shapes of a
one-question call (one topic entity), the path planner's batch-1 shapes and the answer scorer's table, and one question of the split
answered; then, on a background thread while requests are served, the tracer shapes of larger batches (one at a
time, without holding the engine's lock: a request never waits for the warm-up), the planner's larger shapes and
the example batches of 2 .. ``max_batch`` questions. A request that needs a shape not compiled yet compiles it
itself, and gets the answer a fully warmed engine gives. :meth:`ServerWarmUp.status` is what ``/healthz`` shows.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from stem_jax.answer.scorer import warm_answer_scorer
from stem_jax.errors import StemError
from stem_jax.plan.path_ranker import planner_parts, warm_path_planner

__all__ = ["WARM_UP_MODES", "ServerWarmUp", "batch_sizes", "planner_parts", "warm_answer_scorer", "warm_by_example",
           "warm_path_planner"]

WARM_UP_MODES = ("staged", "full", "none")


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to and including ``max_batch``."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def warm_by_example(engine: Any, max_batch: int, *, method: str = "stem", log: Callable[[str], None] = print,
                    sizes: Sequence[int] | None = None, scorer: bool = True, stop: threading.Event | None = None,
                    progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Compile the path planner's scoring shapes for batches of up to ``max_batch`` questions (when the engine plans
    with one), fill the answer scorer's relation table (:func:`warm_answer_scorer`; ``scorer=False`` skips it),
    then answer ``sizes`` (default ``1, 2, 4, ... max_batch``) questions of the loaded split, one call each;
    returns what ran and how long each part took. ``stop``: when set, no further example call starts;
    ``progress(done, total)`` is called after each example call."""
    info = warm_path_planner(getattr(engine, "planner", None), max_batch, log=log)
    if scorer:
        info.update(warm_answer_scorer(engine, method=method, log=log))
    questions = [q for q in getattr(engine.dataset, "questions", ()) if q.topic_entities]
    done: list[dict[str, Any]] = []
    sizes = batch_sizes(max_batch) if sizes is None else list(sizes)
    for size in sizes:
        if not questions or (stop is not None and stop.is_set()):
            break
        batch = [questions[i % len(questions)] for i in range(size)]
        began = time.perf_counter()
        engine.retrieve(batch, method=method)
        seconds = time.perf_counter() - began
        done.append({"questions": size, "seconds": round(seconds, 3)})
        log(f"  answered {size} question{'s' if size > 1 else ''} of the split in {seconds:.1f}s")
        if progress is not None:
            progress(len(done), len(sizes))
    info["example_batches"] = done
    return info


class ServerWarmUp:
    """The warm-up of a server over ``engine`` for batches of up to ``max_batch`` questions, in ``mode`` (one of
    :data:`WARM_UP_MODES`; see the module docstring).

    :meth:`before_serving` runs what must be compiled before the socket opens (blocking); :meth:`start` runs
    the rest on a daemon thread (``staged`` only); :meth:`stop` asks it to end after the step it is in and waits
    for it; :meth:`status` is thread-safe. ``log`` receives every progress line (from both threads)."""

    PROGRESS_EVERY_S = 20.0

    def __init__(self, engine: Any, max_batch: int, *, mode: str = "staged", method: str = "stem",
                 log: Callable[[str], None] = print):
        if mode not in WARM_UP_MODES:
            raise StemError(f"warm-up mode {mode!r} is not one of {', '.join(WARM_UP_MODES)}\n"
                            "  how to fix: --warm-up staged (serve after a one-question warm-up, compile the rest "
                            "while serving), full (compile everything first) or none")
        self.engine, self.max_batch, self.mode, self.method, self.log = engine, int(max_batch), mode, method, log
        self._info: dict[str, Any] = {"mode": mode}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._state = {"state": "off" if mode == "none" else "warming", "part": None, "done": 0, "total": 0}
        self._began = time.perf_counter()

    # ----- state ---------------------------------------------------------------------------------
    def _set(self, **changes: Any) -> None:
        with self._guard:
            self._state.update(changes)

    def status(self) -> dict[str, Any]:
        """``{"mode", "state", "part", "done", "total", "seconds"}``: ``state`` is ``warming`` (``part`` names what
        compiles, ``done`` of ``total`` of its steps), ``ready`` (every shape a ``max_batch`` request reaches is
        compiled), ``off`` (``none``: requests compile what they need), ``stopped`` (shut down while warming) or
        ``failed`` (``error`` says why; requests still compile what they need)."""
        with self._guard:
            return {"mode": self.mode, **self._state, "seconds": round(time.perf_counter() - self._began, 1)}

    def summary(self) -> dict[str, Any]:
        """What each stage compiled and how long it took (a copy: the background stage may still add to it)."""
        with self._guard:
            return copy.deepcopy(self._info)

    def _note(self, **parts: Any) -> None:
        with self._guard:
            self._info.update(parts)

    @property
    def ready(self) -> bool:
        return self.status()["state"] == "ready"

    # ----- the stages ------------------------------------------------------------------------------
    def before_serving(self) -> dict[str, Any]:
        """``full``: everything (:meth:`Engine.warm_up` and :func:`warm_by_example` for ``max_batch``); ``staged``:
        the same for one question; ``none``: nothing. Returns what ran (also in :meth:`summary`)."""
        if self.mode == "none":
            return self.summary()
        first = self.max_batch if self.mode == "full" else 1
        self._set(part="before serving")
        # staged: one question with one topic entity (a run per beam), what most requests are; one whose plans
        # anchor at several topics traces more runs, and compiles a shape if the background has not yet
        compiled = self.engine.warm_up(first, method=self.method, log=self.log,
                                       topics=None if self.mode == "full" else 1)
        compiled["by_example"] = warm_by_example(self.engine, first, method=self.method, log=self.log)
        self._note(before_serving=compiled, before_serving_s=round(time.perf_counter() - self._began, 3))
        if self.mode == "full" or self.max_batch == 1:
            self._set(state="ready", part=None)
        return self.summary()

    def start(self) -> None:
        """Start the background part (``staged``, once, when :meth:`before_serving` left something to do)."""
        if self.mode != "staged" or self._thread is not None or self.status()["state"] != "warming":
            return
        self._thread = threading.Thread(target=self._rest, name="stem-serve-warm-up", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 120.0) -> None:
        """Ask the background part to end after the step it is in (a shape compiling is not interrupted) and wait
        for it up to ``timeout`` seconds (it is a daemon thread: the process may exit anyway)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _rest(self) -> None:
        began = time.perf_counter()
        last = [began]
        engine = self.engine

        def progress(done: int, total: int) -> None:
            self._set(done=done, total=total)
            now = time.perf_counter()
            if now - last[0] >= self.PROGRESS_EVERY_S and done < total:
                last[0] = now
                self.log(f"  ... background warm-up: tracer {done}/{total} shapes ({now - began:.0f}s)")

        try:
            self.log(f"background warm-up for batches of up to {self.max_batch} questions (requests are served "
                     "meanwhile; one that needs a shape not compiled yet compiles it) ...")
            self._set(part="tracer")
            rest = engine.warm_up_rest(self.max_batch, after_questions=1, after_topics=1, method=self.method,
                                       stop=self._stop, progress=progress, log=self.log)
            if not self._stop.is_set():
                self._set(part="path planner and examples", done=0, total=len(batch_sizes(self.max_batch)) - 1)
                rest["by_example"] = warm_by_example(
                    engine, self.max_batch, method=self.method, log=self.log, sizes=batch_sizes(self.max_batch)[1:],
                    scorer=False, stop=self._stop, progress=lambda done, total: self._set(done=done, total=total))
            rest["seconds"] = round(time.perf_counter() - began, 3)
            self._note(background=rest)
            if self._stop.is_set():
                self._set(state="stopped", part=None)
                self.log(f"background warm-up stopped after {time.perf_counter() - began:.1f}s")
                return
            self._set(state="ready", part=None, done=0, total=0)
            self.log(f"background warm-up done in {rest['seconds']:.1f}s: ready for batches of up to "
                     f"{self.max_batch} questions without compiling")
        except Exception as err:  # the server keeps serving: requests compile what they need
            self._set(state="failed", part=None, error=f"{type(err).__name__}: {err}")
            self.log(f"background warm-up failed ({type(err).__name__}: {err}); requests compile what they need")

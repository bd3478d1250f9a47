"""Stages overlapped across chunks: a background thread runs the first part of each chunk ahead of the caller.

:func:`staged_ahead` runs ``stage(chunk)`` for the chunks in order on one background thread and hands
``(chunk, staged)`` to the caller in the same order, through a queue of at most ``depth`` finished chunks (so
at most ``depth + 1`` chunks are staged and not yet taken). While the caller ranks and writes chunk i, the
thread plans, encodes, anchors and traces chunk i+1; XLA and the text encoder release the GIL while they
compute, so the two take different cores.

Errors and interruptions behave as without the thread: an exception raised by ``stage`` is raised in the
caller when it reaches that chunk (the chunks before it are handed over first), and when the caller stops
early (an exception of its own, Ctrl-C, ``break``) the thread finishes the chunk it is on, stages nothing
more and is joined; what the caller already wrote stays written.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
S = TypeVar("S")

_DONE = object()
_POLL_SECONDS = 0.1  # how often a producer blocked on a full queue looks whether the caller has stopped


def staged_ahead(chunks: Iterable[T], stage: Callable[[T], S], *, depth: int = 1,
                 name: str = "stem-stage-ahead") -> Iterator[tuple[T, S]]:
    """``(chunk, stage(chunk))`` for each chunk in order, with ``stage`` run ahead on a background thread.

    ``depth`` (>= 1) bounds the staged chunks waiting for the caller. See the module docstring for errors."""
    if depth < 1:
        raise ValueError(f"depth={depth}: at least one staged chunk must fit the queue")
    handoff: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if stop.is_set():
                    return
                if not put((chunk, stage(chunk))):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            put(error)
            return
        put(_DONE)

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while True:  # a producer blocked on a full queue sees the stop at its next poll; empty it anyway
            try:
                handoff.get_nowait()
            except queue.Empty:
                break
        thread.join()


def stages_of(method: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
    """``(stage, finish)`` of a method that splits its retrieval in two (STEM), else None."""
    stage, finish = getattr(method, "stage", None), getattr(method, "finish", None)
    return (stage, finish) if callable(stage) and callable(finish) else None


def retrieve_overlapped(method: Any, chunks: Iterable[Any], *, depth: int = 1) -> Iterator[tuple[Any, list[Any]]]:
    """``(chunk, method.retrieve(chunk))`` per chunk, in order: with ``stage`` run ahead when the method has
    one (:func:`stages_of`), else one chunk after the other."""
    split = stages_of(method)
    if split is None:
        for chunk in chunks:
            yield chunk, method.retrieve(chunk)
        return
    stage, finish = split
    for chunk, staged in staged_ahead(chunks, stage, depth=depth):
        yield chunk, finish(staged)

"""Process plumbing shared by the build-lock race tests (tests/cache/test_embedding_cache_build_lock.py,
tests/cache/test_guidance_plan_build_lock.py): child processes kept in step with events, never sleeps.

A builder stops at a named point (its first manifest rename, or its k-th chunk) until the test sets ``go``,
and the test sets it once the second process has said that it waits for the lock (its stderr note) or has
ended (without the lock it never waits). The ``procs`` fixture (tests/conftest.py) kills any child a failed
test leaves paused."""

from __future__ import annotations

import multiprocessing
import os
import sys

TIMEOUT = 120.0  # an upper bound on any wait, never a timing a test depends on
WAIT_NOTE = "waiting for pid"


class Stderr:
    """stderr that sets ``waiting`` when the build lock's note goes through it."""

    def __init__(self, inner, waiting):
        self.inner, self.waiting = inner, waiting

    def write(self, text: str) -> int:
        if WAIT_NOTE in text:
            self.waiting.set()
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str):  # isatty, fileno, ... (a progress bar asks)
        return getattr(self.inner, name)


def instrument_child(*, waiting=None, paused=None, go=None, pause_at_manifest: bool = False) -> None:
    """In a child: report the lock's wait note through ``waiting``; with ``pause_at_manifest``, stop between
    writing the first manifest's temp file and renaming it (``paused`` set) until ``go`` is set."""
    if waiting is not None:
        sys.stderr = Stderr(sys.stderr, waiting)
    if pause_at_manifest:
        replace = os.replace

        def stopping_replace(src, dst, *args, **kwargs):
            if str(dst).endswith("manifest.json") and not paused.is_set():
                paused.set()
                go.wait(TIMEOUT)
            return replace(src, dst, *args, **kwargs)

        os.replace = stopping_replace


# What the children's test modules import, imported once by the fork server instead of by every child (JAX,
# Flax and TensorStore cost a child seconds). The server does not see the tests' sys.path (Python 3.11 drops
# it), so these are the library modules, not the test modules; one that does not import is skipped there.
CHILD_MODULES = ("numpy", "pytest", "jax", "flax.linen", "stem_jax.data.demo_kg", "stem_jax.encoder",
                 "stem_jax.gnn.cache", "stem_jax.kg.index", "stem_jax.plan.oracle", "stem_jax.plan.store")


def spawn_context():
    """Children forked from a fork server: a fresh process that imports :data:`CHILD_MODULES` and never runs
    JAX, so no child is a fork of a process that may hold JAX's threads, and none imports JAX again."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(CHILD_MODULES))  # read when the server starts: the first child of the process
    return ctx


def wait_until_waiting_or_done(proc, waiting) -> None:
    """Block until ``proc`` says it waits for the lock, or ends (it never waits without the lock)."""
    from multiprocessing.connection import wait

    while not waiting.is_set() and proc.is_alive():
        wait([proc.sentinel], timeout=0.05)  # wakes at once when proc ends; the event is checked between


def collect(results, count: int) -> dict[str, tuple[int, bytes]]:
    """``count`` (name, rows computed, content) results from the children, by name."""
    got = {}
    for _ in range(count):
        name, rows, data = results.get(timeout=TIMEOUT)
        got[name] = (rows, data)
    return got

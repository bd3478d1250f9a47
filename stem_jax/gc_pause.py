"""Pausing Python's cyclic garbage collector around work that builds many long-lived, acyclic objects."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic collections inside; the collector is left as it was found.

    For loading a dataset and its KG (millions of objects that all stay alive: each full collection on the way
    would walk every one of them again) and for an eval chunk's host work (tens of thousands of records
    settled before it ends); docs/performance.md has the figures. Reference counting frees as usual; cycles
    wait for the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

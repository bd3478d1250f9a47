"""Progress bars that stay readable in logs: frequent on a terminal, sparse otherwise.

:func:`labelled` prefixes every bar opened inside it (``with labelled("default engine"):`` turns
``eval stem`` into ``default engine: eval stem``), so that a command running one stage twice (the
demo's two engine settings) shows bars that can be told apart."""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator

from tqdm.auto import tqdm

_PREFIX: contextvars.ContextVar[str] = contextvars.ContextVar("stem_jax_progress_prefix", default="")


@contextlib.contextmanager
def labelled(prefix: str) -> Iterator[None]:
    """Bars opened in this block are described as ``"<prefix>: <desc>"``."""
    token = _PREFIX.set(prefix)
    try:
        yield
    finally:
        _PREFIX.reset(token)


def progress(total: int | None = None, desc: str = "", unit: str = "it", enabled: bool = True, **kwargs) -> tqdm:
    interactive = sys.stderr.isatty()
    prefix = _PREFIX.get()
    return tqdm(
        total=total,
        desc=f"{prefix}: {desc}" if prefix else desc,
        unit=unit,
        disable=not enabled,
        mininterval=0.2 if interactive else 10.0,
        dynamic_ncols=True,
        file=sys.stderr,
        **kwargs,
    )

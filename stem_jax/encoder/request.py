"""One request's shared text vectors: within :func:`request_scope` an encoder runs a text's forward once."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

# Texts encoded inside one :func:`request_scope`: (encoder name, dot dtype, text) -> vector. One request's stages
# (template classifier, path ranker, branch features, answer scorer) embed the same masked question; with the memo
# off (a benchmark of fresh questions) each would otherwise pay a forward for it.
_REQUEST: contextvars.ContextVar[dict[tuple[str, str, str], np.ndarray] | None] = contextvars.ContextVar(
    "stem_jax_encoder_request", default=None)


@contextlib.contextmanager
def request_scope() -> Iterator[None]:
    """Within the block, a text is encoded at most once per encoder, whatever the memo setting.

    What one request shares is kept until the block ends and then dropped, so a fresh question still pays one
    forward per distinct text; only small calls (the memo's) take part, as bulk builds never repeat a text.
    Nested scopes reuse the outer one."""
    if _REQUEST.get() is not None:
        yield
        return
    token = _REQUEST.set({})
    try:
        yield
    finally:
        _REQUEST.reset(token)


def request_texts() -> dict[tuple[str, str, str], np.ndarray] | None:
    """The texts of the innermost :func:`request_scope` (None outside one): what encoders share within it."""
    return _REQUEST.get()

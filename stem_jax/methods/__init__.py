"""Retrieval methods behind one interface (:mod:`stem_jax.methods.base`), built by name.

Each method lives in its own sub-package exposing ``build(context) -> RetrievalMethod``; adding a
method is a new folder plus one line in :data:`METHODS`.
"""

from __future__ import annotations

import importlib

from stem_jax.errors import StemError
from stem_jax.methods.base import MethodContext, Retrieval, RetrievalMethod

METHODS: dict[str, str] = {
    "stem": "stem_jax.methods.stem:build",
    "safe": "stem_jax.methods.safe:build",
    "scr": "stem_jax.methods.scr:build",
}


def build_method(name: str, context: MethodContext) -> RetrievalMethod:
    """Build the method registered as ``name`` over the shared ``context``."""
    if name not in METHODS:
        raise StemError(f"unknown method {name!r}\n  how to fix: choose one of {', '.join(METHODS)}")
    module_name, _, attr = METHODS[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise StemError(f"method {name!r} is not available in this installation ({module_name} is missing)") from None
        raise
    return getattr(module, attr)(context)


__all__ = ["METHODS", "MethodContext", "Retrieval", "RetrievalMethod", "build_method"]

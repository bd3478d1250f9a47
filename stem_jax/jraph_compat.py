"""The one place that adapts jraph 0.0.6.dev0 to current JAX.

jraph's ``zero_out_padding`` and ``get_fully_connected_graph`` call ``jax.tree_map`` and
``jax.tree_leaves``, which JAX removed. Rather than patching the global ``jax`` module (which
would hide the same mistake in our own code), jraph's utils module gets a view of ``jax`` that
also carries the two old names. Import :mod:`jraph` through here.
"""

from __future__ import annotations

import types

import jax
import jraph
import jraph._src.utils as _jraph_utils


class _JaxWithTreeAliases(types.ModuleType):
    """``jax`` plus the removed ``tree_map`` / ``tree_leaves`` aliases, for jraph only."""

    tree_map = staticmethod(jax.tree_util.tree_map)
    tree_leaves = staticmethod(jax.tree_util.tree_leaves)

    def __getattr__(self, name: str):
        return getattr(jax, name)


def install() -> None:
    """Give jraph's utils the aliases it needs; a no-op on JAX versions that still have them."""
    if hasattr(jax, "tree_map") and hasattr(jax, "tree_leaves"):
        return
    if not isinstance(_jraph_utils.jax, _JaxWithTreeAliases):
        _jraph_utils.jax = _JaxWithTreeAliases("jax")


install()

__all__ = ["jraph", "install"]

"""The entity linker under its earlier name: it lives in :mod:`stem_jax.data.linker`, below the KG, because the
file loaders link topic entities before any KG index exists. Import it from there."""

from stem_jax.data.linker import KINDS, STOP_WORDS, EntityLinker, Link, normalise

__all__ = ["KINDS", "STOP_WORDS", "EntityLinker", "Link", "normalise"]

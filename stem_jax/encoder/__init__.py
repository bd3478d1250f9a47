"""Text encoders (the paper's PEM) and the resumable TensorStore embedding cache.

``MiniLMEncoder`` is imported lazily so that ``import stem_jax.encoder`` does not pull in Flax.
"""

from typing import Any

from stem_jax.encoder.base import TextEncoder, get_encoder, minilm_model_dir
from stem_jax.encoder.cache import (
    CacheWarning,
    EmbeddingTable,
    encode_exact,
    keyed_cache_path,
    open_or_build,
    texts_fingerprint,
)
from stem_jax.encoder.hashing import HashingEncoder

__all__ = [
    "CacheWarning",
    "EmbeddingTable",
    "HashingEncoder",
    "MiniLMEncoder",
    "TextEncoder",
    "encode_exact",
    "get_encoder",
    "keyed_cache_path",
    "minilm_model_dir",
    "open_or_build",
    "texts_fingerprint",
]


def __getattr__(name: str) -> Any:
    if name == "MiniLMEncoder":
        from stem_jax.encoder.minilm import MiniLMEncoder

        return MiniLMEncoder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

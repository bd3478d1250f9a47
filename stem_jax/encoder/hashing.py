"""A deterministic feature-hashing encoder for unit tests (no weights, no jit)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+")


class HashingEncoder:
    """Hashes lowercased word unigrams and character trigrams into ``dim`` signed buckets.

    Stable across processes and platforms (CRC32, not Python's salted ``hash``); texts that
    share words or spellings get positive cosine similarity, which is all the tests need.
    """

    def __init__(self, dim: int = 384):
        self.dim = dim
        self.name = f"hashing-v1-dim{dim}"

    def _features(self, text: str) -> list[str]:
        low = text.lower()
        words = ["w:" + w for w in _WORD.findall(low)]
        # Two leading pad characters guarantee at least one trigram, so no row is all zeros.
        padded = "\x02\x02" + low + "\x03"
        return words + ["c:" + padded[i : i + 3] for i in range(len(padded) - 2)]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as float32 [len(texts), dim] with unit-norm rows."""
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                h = zlib.crc32(feature.encode("utf-8"))
                out[row, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # Signed hashing can cancel every feature of a row; keep such rows unit-norm anyway.
        zero = norms[:, 0] == 0
        out[zero, 0] = 1.0
        norms[zero] = 1.0
        return out / norms

"""WordPiece tokenisation and packing of short sequences into fixed-shape rows.

Knowledge-graph strings are short (entity names ~5 tokens, serialized triples ~10), so padding
each one to a length bucket wastes 30-50% of the compute. Instead several sequences share one
row of ``max_length`` tokens; the model keeps them apart with per-sequence attention masks,
restarted position ids and per-sequence mean pooling, which gives the same vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

log = logging.getLogger(__name__)


class TruncatingTokenizer:
    """Loads a Hugging Face ``tokenizer.json``; returns unpadded ids at most ``max_length`` long.

    Truncation keeps the leading tokens and the final [SEP], like sentence-transformers, and is
    counted in ``truncated`` (cumulative) and logged rather than happening silently.
    """

    def __init__(self, tokenizer_json: Path, max_length: int):
        if max_length < 2:
            raise ValueError(f"max_length={max_length} leaves no room for [CLS] [SEP]")
        self.max_length = max_length
        self._tok = Tokenizer.from_file(str(tokenizer_json))
        # The file pins padding/truncation to 128; we pack and truncate ourselves so that
        # every truncation is counted.
        self._tok.no_padding()
        self._tok.no_truncation()
        self.sep_id = self._tok.token_to_id("[SEP]")
        self.truncated = 0

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids ([CLS] ... [SEP]) for each text, at most ``max_length`` long."""
        ids = [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]
        cut = 0
        for i, row in enumerate(ids):
            if len(row) > self.max_length:
                ids[i] = row[: self.max_length - 1] + [self.sep_id]
                cut += 1
        if cut:
            self.truncated += cut
            log.warning("truncated %d of %d strings to %d tokens", cut, len(ids), self.max_length)
        return ids


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Best-fit-decreasing bin packing: indices of ``lengths`` grouped into rows of ``capacity``.

    Longest first, each into the fullest row that still has room; with short strings this
    leaves well under 5% of the tokens as padding.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]  # room left -> row numbers
    for i in order:
        need = lengths[i]
        room = next((r for r in range(need, capacity + 1) if by_room[r]), None)
        if room is None:
            rows.append([])
            row, room = len(rows) - 1, capacity
        else:
            row = by_room[room].pop()
        rows[row].append(i)
        by_room[room - need].append(row)
    return rows


def pack_batch(
    ids: Sequence[Sequence[int]], rows: Sequence[Sequence[int]], n_rows: int, capacity: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids, segment ids (1-based, 0 = padding) and position ids, each int32 [n_rows, capacity].

    ``rows[r]`` lists the sequences (indices into ``ids``) that share row ``r``.
    """
    tokens = np.zeros((n_rows, capacity), np.int32)
    segments = np.zeros((n_rows, capacity), np.int32)
    positions = np.zeros((n_rows, capacity), np.int32)
    for r, members in enumerate(rows):
        at = 0
        for slot, i in enumerate(members):
            seq = ids[i]
            tokens[r, at : at + len(seq)] = seq
            segments[r, at : at + len(seq)] = slot + 1
            positions[r, at : at + len(seq)] = np.arange(len(seq))
            at += len(seq)
    return tokens, segments, positions

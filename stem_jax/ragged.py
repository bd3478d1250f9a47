"""Ragged rows laid out as one padded table, the layout the array passes over runs and plans read.

The live cells of a padded ``[R, W]`` table, in row-major order, are the rows' entries one after another,
so a table is one concatenation and one masked store rather than a store per row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pad_ragged(rows: Sequence[Sequence], fill: int | float, dtype: np.dtype | type, *, width: int | None = None,
               tail: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """``(table [R, W, *tail], live bool [R, W])``: row r's entries in ``table[r, :len(rows[r])]``, ``fill`` after.

    ``width`` defaults to the longest row (0 for no rows or only empty ones); a row longer than ``width`` is an
    error, so a caller that truncates does so itself. Each entry is a scalar, or an array of shape ``tail``."""
    counts = np.fromiter(map(len, rows), np.int64, len(rows))
    longest = int(counts.max(initial=0))
    width = longest if width is None else int(width)
    if longest > width:
        raise ValueError(f"a row of {longest} entries does not fit width {width}")
    table = np.full((len(rows), width, *tail), fill, dtype)
    live = np.arange(width) < counts[:, None]
    if longest:
        table[live] = np.concatenate([np.asarray(row, dtype).reshape(-1, *tail) for row in rows if len(row)])
    return table, live

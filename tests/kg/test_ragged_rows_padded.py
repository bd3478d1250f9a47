"""pad_ragged lays ragged rows out exactly as filling a padded table row by row does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.ragged import pad_ragged


def _row_by_row(rows, fill, dtype, width, tail):
    table = np.full((len(rows), width, *tail), fill, dtype)
    live = np.zeros((len(rows), width), bool)
    for r, row in enumerate(rows):
        for c, entry in enumerate(row):
            table[r, c], live[r, c] = entry, True
    return table, live


@settings(max_examples=60)
@given(st.lists(st.integers(0, 5), max_size=6), st.sampled_from([(), (3,)]), st.integers(0, 2), st.integers(0, 10**6))
def test_pad_ragged_matches_filling_row_by_row(lengths, tail, extra, seed):
    rng = np.random.default_rng(seed)
    rows = [rng.integers(-5, 5, (n, *tail)) for n in lengths]
    width = max(lengths, default=0) + extra
    table, live = pad_ragged(rows, -1, np.int64, width=width, tail=tail)
    expected_table, expected_live = _row_by_row(rows, -1, np.int64, width, tail)
    np.testing.assert_array_equal(table, expected_table)
    np.testing.assert_array_equal(live, expected_live)
    default_table, _ = pad_ragged(rows, -1, np.int64, tail=tail)
    assert default_table.shape == (len(rows), max(lengths, default=0), *tail)


def test_pad_ragged_takes_python_tuples_and_refuses_a_row_wider_than_the_table():
    table, live = pad_ragged([[(1, 2)], [], [(3, 4), (5, 6)]], 0, np.int32, tail=(2,))
    assert table.tolist() == [[[1, 2], [0, 0]], [[0, 0], [0, 0]], [[3, 4], [5, 6]]]
    assert live.tolist() == [[True, False], [False, False], [True, True]]
    with pytest.raises(ValueError, match="does not fit width 1"):
        pad_ragged([[1, 2]], 0, np.int64, width=1)

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import gather_padded, gather_padded_reference


@st.composite
def csr_case(draw):
    n = draw(st.integers(1, 12))
    degrees = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    offsets = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
    values = np.asarray(draw(st.lists(st.integers(0, 1000), min_size=int(offsets[-1]), max_size=int(offsets[-1]))), np.int32)
    rows = np.asarray(draw(st.lists(st.integers(-1, n - 1), min_size=1, max_size=8)), np.int32)
    width = draw(st.sampled_from([1, 2, 4, 8]))
    skip = draw(st.integers(0, 10))
    return offsets, values, rows, width, skip


@settings(max_examples=60, deadline=None)
@given(csr_case())
def test_gather_padded_matches_reference(case):
    offsets, values, rows, width, skip = case
    if values.size == 0:
        values = np.zeros(1, np.int32)  # a KG always has a triple; keeps the gather index in range
        offsets = np.zeros_like(offsets)
    ids, mask, overflow = gather_padded(offsets, values, rows, width, skip)
    ref_ids, ref_mask, ref_overflow = gather_padded_reference(offsets, values, rows, width, skip)
    np.testing.assert_array_equal(np.asarray(ids), ref_ids)
    np.testing.assert_array_equal(np.asarray(mask), ref_mask)
    np.testing.assert_array_equal(np.asarray(overflow), ref_overflow)


def test_overflow_counts_what_did_not_fit():
    offsets = np.array([0, 5, 5], np.int64)
    values = np.arange(5, dtype=np.int32)
    ids, mask, overflow = gather_padded(offsets, values, np.array([0, 1, -1], np.int32), 2)
    assert np.asarray(ids).tolist() == [[0, 1], [-1, -1], [-1, -1]]
    assert np.asarray(overflow).tolist() == [3, 0, 0]

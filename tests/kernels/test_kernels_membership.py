"""Binary search in sorted id rows answers set membership, for rows of any width."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.membership import row_contains, row_contains_reference, sorted_rows


@pytest.mark.parametrize("width", [1, 3, 8, 13])
@pytest.mark.parametrize("seed", range(4))
def test_row_contains_matches_sets(width, seed):
    rng = np.random.default_rng(seed)
    rows = np.where(rng.random((5, width)) < 0.3, -1, rng.integers(0, 20, (5, width))).astype(np.int32)
    row = rng.integers(0, 5, 64).astype(np.int32)
    value = rng.integers(0, 22, 64).astype(np.int32)
    got = row_contains(sorted_rows(jnp.asarray(rows)), jnp.asarray(row), jnp.asarray(value))
    np.testing.assert_array_equal(np.asarray(got), row_contains_reference(rows, row, value))


def test_sorted_rows_pads_to_a_power_of_two_with_an_id_nothing_matches():
    out = np.asarray(sorted_rows(jnp.asarray([[4, -1, 2]], jnp.int32)))
    assert out.shape == (1, 4) and out[0, :2].tolist() == [2, 4] and (out[0, 2:] == np.iinfo(np.int32).max).all()
    assert not bool(row_contains(jnp.asarray(out), jnp.asarray([0]), jnp.asarray([-1]))[0])

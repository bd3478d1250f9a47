import dataclasses

import pytest

from stem_jax.config import StemConfig, apply_overrides, config_fields


def test_paper_defaults():
    c = StemConfig()
    assert (c.tracer.lam, c.tracer.tau, c.guidance.k_prime, c.tracer.theta) == (1.5, 0.5, 4, 0.6)
    assert (c.tracer.top_n, c.planner.beam, c.gnn.layers, c.gnn.d_gnn) == (50, 4, 6, 512)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.tracer.lam = 2.0


def test_overrides_are_typed_and_validated():
    c = apply_overrides(StemConfig(), {"tracer.lam": "1.2", "gnn.layers": "2", "encoder.name": "hashing"})
    assert c.tracer.lam == 1.2 and c.gnn.layers == 2 and c.encoder.name == "hashing"
    assert c.tracer.tau == 0.5  # untouched fields keep defaults
    with pytest.raises(ValueError, match="Did you mean --tracer.lam"):
        apply_overrides(StemConfig(), {"lam": "1"})
    with pytest.raises(ValueError, match="expected a value of type int"):
        apply_overrides(StemConfig(), {"gnn.layers": "two"})


def test_every_leaf_is_listed():
    names = {name for name, _, _ in config_fields()}
    assert {"tracer.lam", "tracer.theta", "guidance.k_prime", "planner.beam", "gnn.d_gnn", "seed"} <= names

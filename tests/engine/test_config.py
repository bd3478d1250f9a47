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


# ----- validation: one line per violation naming the flag and the allowed range -----

from triple_tables import rows  # noqa: E402

from stem_jax.config import _INT_MIN, validate  # noqa: E402
from stem_jax.errors import ConfigError, StemError  # noqa: E402

BAD_SETTINGS = rows("""
    engine.frontier        | 0       | >= 1
    tracer.top_n           | 0       | >= 1
    engine.window          | 0       | >= 1
    engine.batch_precision | 0       | >= 1
    engine.batch_breadth   | -5      | >= 1
    engine.chunk_questions | 0       | >= 1
    encoder.chunk_rows     | 0       | >= 1
    encoder.max_length     | 0       | >= 1
    engine.batch_precision | 1000000 | <= 16384 (a compiled batch
    tracer.theta           | nan     | [0, 1]
    tracer.theta           | 1.5     | [0, 1]
    tracer.lam             | -1      | > 0
    tracer.lam             | 0       | > 0
    tracer.lam             | inf     | finite
    planner.beam           | 0       | >= 1
    planner.path_max_hops  | 0       | >= 1
    planner.path_max_hops  | 5       | <= 4 (a topic's paths
    guidance.k_prime       | 0       | >= 1
    engine.answer_cut      | -0.1    | [0, 1]
    engine.beam_gap        | -0.5    | >= 0 or inf
    engine.beam_gap        | nan     | >= 0 or inf
    engine.rank            | best    | one of beam, max
    encoder.name           | bert    | one of minilm, hashing
    seed                   | -1      | >= 0
""")


@pytest.mark.parametrize(("name", "value", "allowed"), BAD_SETTINGS)
def test_out_of_range_setting_is_one_line_naming_flag_and_range(name, value, allowed):
    with pytest.raises(ConfigError) as info:
        apply_overrides(StemConfig(), {name: value})
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert line.startswith(f"--{name}=") and allowed in line
    assert isinstance(info.value, StemError) and isinstance(info.value, ValueError)


def test_every_violation_is_reported_at_once():
    overrides = {name: value for name, value, _ in BAD_SETTINGS}  # later duplicates win: still one per flag
    with pytest.raises(ConfigError) as info:
        apply_overrides(StemConfig(), overrides)
    assert len(info.value.problems) == len(overrides)
    assert str(info.value).count("\n") == len(overrides)


def test_defaults_and_edge_values_are_valid():
    assert validate(StemConfig()) == []
    edge = {"tracer.theta": "0", "tracer.tau": "0", "engine.batch_precision": "16384", "encoder.max_length": "512",
            "engine.frontier": "1", "tracer.breadth_cap": "0", "subgraph.hops": "0", "engine.max_frontier": "1",
            "engine.beam_gap": "inf"}
    assert validate(apply_overrides(StemConfig(), edge)) == []


def test_every_integer_option_has_a_lower_bound():
    ints = {name for name, value, _ in config_fields() if isinstance(value, int) and not isinstance(value, bool)}
    assert ints - set(_INT_MIN) == set(), "add the new option's smallest allowed value to config._INT_MIN"

"""The Python API checks its arguments by the CLI's rules (stem_jax/validation.py), sweep
values by the config's range checks, and `ask --top` only takes positive counts."""

from __future__ import annotations

import json
import math

import pytest

from stem_jax import Engine, StemConfig
from stem_jax.cli.main import build_parser
from stem_jax.config import apply_overrides
from stem_jax.errors import ConfigError, StemError
from stem_jax.methods.stem.sweep import GridPoint, make_grid, parse_values
from stem_jax.validation import dataset_spec_fields, parse_hops, parse_limit

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


@pytest.fixture(scope="module")
def config():
    return apply_overrides(StemConfig(), FAST)


@pytest.fixture(scope="module")
def engine(config, tmp_path_factory):
    return Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path_factory.mktemp("cache"),
                       hops="2", limit="3")


# ----- Engine.open: every bad argument is a StemError before any loading work -----

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"limit": 0}, r"limit: expected a positive whole number \(1 or more\), got 0"),
    ({"limit": -1}, r"limit: expected a positive whole number"),
    ({"limit": "x"}, r"limit: expected a positive whole number, got 'x'"),
    ({"limit": 2.5}, r"limit: expected a positive whole number"),
    ({"hops": (7,)}, r"hops=7: demo has no 7-hop questions"),
    ({"hops": "two"}, r"hops expects positive numbers"),
    ({"hops": 0}, r"hops expects positive numbers"),
    ({"hops": True}, r"hops expects positive numbers"),
    ({"planner": 123}, r"planner=123: expected a planner name"),
    ({"planner": "oracel"}, r"unknown planner 'oracel'"),
    ({"guidance": 5}, r"guidance=5: expected None, a train-gnn run folder or a GuidanceSpec"),
    ({"guidance": "gnn"}, r"guidance \"gnn\" needs a train-gnn run folder"),
    ({"guidance": "no/such/run"}, r"no such train-gnn run folder"),
    ({"data_dir": 5}, r"data_dir=5: expected a file or folder path"),
    ({"cache_dir": 5}, r"cache_dir=5: expected a folder path"),
    ({"config": {"tracer": {}}}, r"expected a StemConfig"),
    ({"colour": "red"}, r"unknown dataset argument colour='red'"),
    ({"split": 3}, r"split=3: expected a split name"),
])
def test_engine_open_refuses_bad_arguments(kwargs, message):
    with pytest.raises(StemError, match=message) as err:
        Engine.open("demo", **kwargs)
    assert "how to fix" in str(err.value)


def test_engine_open_refuses_an_unknown_dataset_and_bad_config():
    with pytest.raises(StemError, match="unknown dataset 'demoo'"):
        Engine.open("demoo")
    with pytest.raises(ConfigError, match=r"--tracer.theta=nan"):
        Engine.open("demo", config=StemConfig(tracer=StemConfig().tracer.__class__(theta=math.nan)))


def test_string_hops_and_limit_select_like_the_cli(engine):
    assert engine.dataset_spec.hops == (2,) and engine.dataset_spec.limit == 3
    assert {q.hops for q in engine.dataset.questions} == {2} and len(engine.dataset.questions) == 3
    assert parse_hops(2) == parse_hops("2") == parse_hops([2]) == (2,) and parse_hops("3,1,1") == (1, 3)
    assert parse_limit("5") == parse_limit(5) == 5 and parse_limit(None) is None
    spec = dataset_spec_fields("files", {"data_dir": "runs/demo-kg", "hops": 2})
    assert spec.data_dir.__class__.__name__.endswith("Path") and spec.hops == (2,)


@pytest.mark.parametrize("question", [None, 123, b"what films did [Film 0] star in", "", "   ", 4.5])
def test_ask_refuses_what_is_not_a_question(engine, question):
    with pytest.raises(StemError, match="question"):
        engine.ask(question)
    with pytest.raises(StemError, match="question"):
        engine.retrieve([question])


def test_retrieve_still_takes_questions(engine):
    answers = engine.retrieve(engine.dataset.questions[:2])
    assert [a.question.qid for a in answers] == [q.qid for q in engine.dataset.questions[:2]]


def test_files_kg_opens_from_a_str_path(config, tmp_path):
    """The documented `Engine.open("files", data_dir="runs/demo-kg")` takes a str path."""
    kg = tmp_path / "kg"
    kg.mkdir()
    (kg / "triples.tsv").write_text("Kismet\tdirected_by\tWilliam Dieterle\nKismet\tstarred_actors\tRonald Colman\n")
    (kg / "test.jsonl").write_text(json.dumps({"id": "q1", "question": "who directed Kismet",
                                               "topic_entities": ["Kismet"], "answers": ["William Dieterle"],
                                               "gold_path": ["directed_by"]}) + "\n")
    engine = Engine.open("files", config=config, data_dir=str(kg), cache_dir=str(tmp_path / "cache"), planner="oracle")
    assert [q.qid for q in engine.dataset.questions] == ["q1"]
    assert engine.ask(engine.dataset.questions[0]).best == "William Dieterle"


# ----- sweep values: the config's own range checks -----

@pytest.mark.parametrize(("axis", "text", "message"), [
    ("thetas", "nan,0.6", r"--theta nan: expected a number in \[0, 1\]"),
    ("thetas", "inf", r"--theta inf: expected a number in \[0, 1\]"),
    ("thetas", "1.5", r"--theta 1.5: expected a number in \[0, 1\]"),
    ("taus", "nan", r"--tau nan: expected a finite number >= 0"),
    ("taus", "inf", r"--tau inf: expected a finite number >= 0"),
    ("lams", "nan", r"--lambda nan: expected a finite number > 0"),
    ("lams", "inf", r"--lambda inf: expected a finite number > 0"),
    ("lams", "-inf", r"--lambda -inf: expected a finite number > 0"),
    ("lams", "0", r"--lambda 0.0: expected a finite number > 0"),
    ("k_primes", "0", r"--k-prime 0: expected an integer >= 1"),
])
def test_sweep_values_are_range_checked_like_the_config(axis, text, message):
    flag = {"thetas": "--theta", "taus": "--tau", "lams": "--lambda", "k_primes": "--k-prime"}[axis]
    values = parse_values(text, flag, integer=axis == "k_primes")
    with pytest.raises(ConfigError, match=message):
        make_grid(StemConfig(), **{axis: values})


def test_sweep_values_equal_at_six_digits_get_their_own_folders():
    points = make_grid(StemConfig(), thetas=parse_values("0.6,0.6000001", "--theta"))
    assert [p.label for p in points] == ["lam1.5-tau0.5-theta0.6-k4", "lam1.5-tau0.5-theta0.6000001-k4"]
    assert GridPoint(1.2, 0.5, 0.8, 2).label == "lam1.2-tau0.5-theta0.8-k2"  # names of earlier runs unchanged


# ----- ask --top -----

@pytest.mark.parametrize("top", ["-1", "0", "x"])
def test_ask_top_must_be_positive(top, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ask", "q", "--top", top])
    assert "positive whole number" in capsys.readouterr().err
    assert build_parser().parse_args(["ask", "q", "--top", "1"]).top == 1

"""Help pages and argument errors of `stem-jax`.

--help lists the command's own flags and leaves the engine settings to --help-all (only the sections
the command reads); every config field stays a flag; unknown flags, commands and choices get one short
error with the closest matches.
"""

import argparse
import re

import pytest

from stem_jax.cli.args import training_split_of
from stem_jax.cli.main import build_parser, main
from stem_jax.config import config_fields
from stem_jax.data.registry import DATASETS, DatasetSpec, load_dataset
from stem_jax.errors import DataError


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps at the terminal width; keep the text the same everywhere


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exit_:
        rc = exit_.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def commands() -> list[list[str]]:
    """Every subcommand (bench's included) as the argv prefix that names it."""
    found = []
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                found += [[name, inner] for a in nested for inner in a.choices] if nested else [[name]]
    return found


def test_ask_help_names_the_default_planner_and_the_way_to_the_engine_settings(capsys):
    rc, out, _ = run(["ask", "--help"], capsys)
    assert rc == 0
    assert "--scr.lr" not in out and "--safe." not in out and "--tracer.lam" not in out
    assert "(default: pattern)" in out and "Default planner: pattern" in " ".join(out.split())
    assert "--help-all" in out  # the one way to the rest
    assert "paper defaults" not in out and "--engine.preset=paper" in out.replace("\n", " ")
    assert "\n  --top" in out and "\n  --dataset" in out and "\n  --planner" in out


@pytest.mark.parametrize("argv", commands(), ids=" ".join)
def test_every_help_page_leaves_the_engine_settings_to_help_all(argv, capsys):
    rc, out, _ = run([*argv, "--help"], capsys)
    assert rc == 0, argv
    assert not re.search(r"^\s+--(tracer|engine|scr|safe)\.", out, re.M)  # no config flag is listed
    assert "paper defaults" not in out


def test_help_all_lists_the_sections_the_command_reads(capsys):
    rc, out, _ = run(["eval", "--help-all"], capsys)
    assert rc == 0 and "--tracer.theta" in out and "--engine.preset" in out and "--kb" in out
    assert "--scr.lr" not in out and "another --method before --help-all" in " ".join(out.split())  # STEM's sections by default
    assert "θ: Breadth-strategy threshold on T-Score (default 0.6)" in " ".join(out.split())  # config.py's comment
    _, scr, _ = run(["eval", "--method", "scr", "--help-all"], capsys)
    assert "--scr.lr" in scr and "--safe.k_ent" not in scr and "--tracer.theta" not in scr
    _, train_scr, _ = run(["train-scr", "--help-all"], capsys)
    assert "--scr.lr" in train_scr and "--tracer.theta" not in train_scr
    _, config, _ = run(["config", "--help-all"], capsys)
    assert all(f"--{name} " in config for name, _, _ in config_fields())


@pytest.mark.parametrize("argv", [c for c in commands() if c not in (["score"], ["bench", "serve"])], ids=" ".join)
def test_every_config_field_is_still_accepted(argv):
    overrides = [f"--{name}={default}" for name, default, _ in config_fields()]
    args = build_parser().parse_args([*argv, *(["q"] if argv == ["ask"] else []), *overrides])
    assert getattr(args, "cfg:scr.lr") == "0.001" and getattr(args, "cfg:tracer.theta") == "0.6"


@pytest.mark.parametrize("argv", [["eval", "--planer", "pattern"], ["ask", "q", "--planer=pattern"]])
def test_misspelt_flag_is_a_short_error_with_the_close_match(argv, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) <= 3, err  # one short error, not the usage page
    assert "did you mean --planner?" in err and "usage:" not in err


def test_misspelt_config_flag_and_bare_field_name_suggest_the_config_flag(capsys):
    _, _, err = run(["eval", "--tracer.thetta=0.5"], capsys)
    assert "did you mean --tracer.theta?" in err
    _, _, err = run(["eval", "--theta", "0.5"], capsys)
    assert "did you mean --tracer.theta?" in err


def test_unknown_command_and_choice_suggest_the_close_name(capsys):
    rc, _, err = run(["evl"], capsys)
    assert rc == 2 and "unknown command 'evl'; did you mean eval?" in err and len(err.splitlines()) <= 3
    _, _, err = run(["bench", "trac"], capsys)
    assert "did you mean trace?" in err
    _, _, err = run(["eval", "--planner", "oracl"], capsys)
    assert "did you mean oracle?" in err


@pytest.mark.parametrize(("name", "shown"), [("webqsp", "WebQSP"), ("CWQ", "CWQ")])
def test_webqsp_and_cwq_point_to_the_rog_loader(name, shown, capsys):
    rc, _, err = run(["eval", "--dataset", name], capsys)
    assert rc == 2 and f"{shown} comes in through --dataset rog --rog-path" in err and len(err.splitlines()) <= 3
    with pytest.raises(DataError, match="--dataset rog"):  # the Python API says the same
        load_dataset(DatasetSpec(name=name))


def test_dataset_help_names_every_dataset(capsys):
    _, out, _ = run(["index", "--help"], capsys)
    text = " ".join(out.split())
    for name in DATASETS:
        base, _, subset = name.partition("-") if name.startswith("wc2014-") else (name, "", "")
        assert base in text and (not subset or f"-{subset}" in text), name


def test_data_flag_help_is_dataset_neutral(capsys):
    _, out, _ = run(["eval", "--help"], capsys)
    text = " ".join(out.split())
    assert "files: your KG's folder" in text and "wc2014" in text and "N-hop/ folders" in text
    assert "folder holding metaqa/ and fb15k-237/" not in text  # no MetaQA-only wording


@pytest.mark.parametrize(("dataset", "split"), [("metaqa", "dev"), ("demo", "train"), ("wc2014", "train"),
                                                ("files", "train")])
@pytest.mark.parametrize("command", ["train-scr", "train-gnn"])
def test_training_commands_default_to_the_datasets_training_split(command, dataset, split, capsys):
    args = build_parser().parse_args([command, "--dataset", dataset])
    assert args.split is None and training_split_of(args) == split
    explicit = build_parser().parse_args([command, "--dataset", dataset, "--split", "dev"])
    assert training_split_of(explicit) == "dev"
    _, out, _ = run([command, "--help"], capsys)
    assert "default: train; dev for metaqa" in " ".join(out.split())


@pytest.mark.parametrize(("argv", "expected"), [
    (["calibrate"], ["--split NAME test, dev or train (default dev;", "(quick runs); default 150"]),
    (["bench", "stages"], ["(default 2)"]),
    (["eval"], ["(default test;", "(default 1,2,3)"]),
    (["train-planner"], ["split to train on (default: train; dev for metaqa"]),
])
def test_data_help_names_the_default_the_command_sets(argv, expected, capsys):
    _, out, _ = run([*argv, "--help"], capsys)  # calibrate and bench change the defaults with set_defaults
    text = " ".join(out.split())
    for snippet in expected:
        assert snippet in text, snippet

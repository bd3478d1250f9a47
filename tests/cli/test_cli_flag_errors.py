"""Flags a dataset would ignore, empty selections and bad numbers are one-line errors."""

import argparse

import pytest

from stem_jax.cli.args import add_dataset_flags, check_dataset_flags
from stem_jax.errors import StemError


def parse(*argv: str, planner: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    add_dataset_flags(parser)
    args = parser.parse_args(list(argv))
    args.planner = planner
    return args


@pytest.mark.parametrize(("argv", "message"), [
    (("--questions", "q.txt"), "--questions is only read with --dataset metaqa or files, not --dataset demo"),
    (("--kb", "kb.txt", "--dataset", "rog"), "--kb is only read with --dataset metaqa, not --dataset rog"),
    (("--qtypes", "t.txt", "--dataset", "fb15k-237"), "--qtypes is only read with --dataset metaqa"),
    (("--rog-path", "x.jsonl", "--dataset", "metaqa"), "--rog-path is only read with --dataset rog"),
    (("--qtypes", "t.txt", "--dataset", "metaqa"), "--qtypes describes the lines of --questions, which is missing"),
    (("--hops", "7"), "--hops 7: demo has no 7-hop questions"),
    (("--hops", "1,4", "--dataset", "metaqa"), "metaqa has no 4-hop questions"),
])
def test_ignored_or_empty_selections_are_errors(argv, message):
    with pytest.raises(StemError) as err:
        check_dataset_flags(parse(*argv))
    first, fix = str(err.value).split("\n")
    assert message in first and fix.startswith("  how to fix: ")


def test_oracle_needs_qtypes_for_own_questions():
    with pytest.raises(StemError, match="pass --qtypes FILE"):
        check_dataset_flags(parse("--dataset", "metaqa", "--questions", "q.txt", planner="oracle"))
    check_dataset_flags(parse("--dataset", "metaqa", "--questions", "q.txt", planner="pattern"))
    check_dataset_flags(parse("--dataset", "metaqa", "--questions", "q.txt", "--qtypes", "t.txt", planner="oracle"))
    check_dataset_flags(parse("--dataset", "metaqa", "--questions", "q.txt", "--hops", "5", planner="pattern"))


@pytest.mark.parametrize("limit", ["0", "-1", "x"])
def test_limit_must_be_positive(limit):
    with pytest.raises(argparse.ArgumentError, match="positive whole number"):
        parse("--limit", limit)
    assert parse("--limit", "3").limit == 3

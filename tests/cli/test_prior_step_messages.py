"""What a newcomer runs first: --version, and "needs a prior step" errors that name the file and give a
command to paste."""

import json
import re
import shlex

import pytest

from stem_jax.cli.main import build_parser, main

QUESTION = {"id": "q1", "question": "who directed Film A", "topic_entities": ["Film A"], "answers": ["Director A"],
            "gold_path": ["directed_by"]}


@pytest.fixture
def kg(tmp_path):
    folder = tmp_path / "my kg"  # a space: the pasted command must quote it
    folder.mkdir()
    (folder / "triples.tsv").write_text("Film A\tdirected_by\tDirector A\nFilm B\tdirected_by\tDirector B\n")
    (folder / "test.jsonl").write_text(json.dumps(QUESTION) + "\n")
    return folder


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and re.match(r"stem-jax \d+\.\d+\.\d+ \(jax ", capsys.readouterr().out)


@pytest.mark.parametrize("command, file", [("train-planner", "train.jsonl"), ("calibrate", "dev.jsonl")])
def test_a_missing_split_file_is_named(kg, tmp_path, capsys, command, file):
    argv = [command, "--dataset", "files", "--data-dir", str(kg), "--encoder.name=hashing",
            "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"no {file}" in err and str(kg) in err and f"how to fix: write {kg / file}" in err


def test_ask_before_training_gives_a_command_to_paste(kg, tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = ["ask", "who directed [Film A]", "--dataset", "files", "--data-dir", str(kg), "--encoder.name=hashing",
            "--cache-dir", str(cache)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    command = re.search(r"run `([^`]+)` first", err).group(1)
    words = shlex.split(command)
    assert words[:2] == ["stem-jax", "train-planner"] and str(kg) in words and "--encoder.name=hashing" in words
    args = build_parser().parse_args(words[1:])  # it parses: a command, not prose
    assert args.command == "train-planner" and str(args.data_dir) == str(kg) and str(args.cache_dir) == str(cache)


def test_ask_says_its_timing_includes_compiling(kg, tmp_path, capsys):
    argv = ["ask", "who directed [Film A]", "--dataset", "files", "--data-dir", str(kg), "--encoder.name=hashing",
            "--cache-dir", str(tmp_path / "cache"), "--planner", "oracle", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Director A" in out and "compiling included; --warm times a second call" in out

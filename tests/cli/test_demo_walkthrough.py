"""`stem-jax demo` ends with one answered question and its chain, and the next command; its bars differ."""

import json

from stem_jax.cli.commands import _demo_example
from stem_jax.data.types import Dataset, Question
from stem_jax.progress import labelled, progress


def test_the_example_shows_question_answer_gold_and_chain(tmp_path):
    question = Question("demo/test/2-hop/0", "what country is Kim from", ("Kim",), ("Beloria",), hops=2)
    dataset = Dataset("demo", [question], [])
    record = {"id": question.qid, "question": question.text, "prediction": ["Beloria"], "ground_truth": ["Beloria"],
              "evidence": [["Kim", "born_in", "Storke City"], ["Storke City", "located_in", "Beloria"],
                           ["Kim", "starred_in", "Film"]]}
    (tmp_path / "predictions.jsonl").write_text(json.dumps(record) + "\n")
    lines = _demo_example(dataset, tmp_path)
    assert lines[0].startswith("question: what country is Kim from")
    assert lines[1] == "answer:   Beloria" and lines[2] == "gold:     Beloria"
    assert lines[3] == "why:      Kim -born_in-> Storke City -located_in-> Beloria"
    assert _demo_example(dataset, tmp_path / "missing") == []


def test_labelled_bars_are_told_apart(capsys):
    with labelled("default engine"), progress(3, "eval stem") as bar:
        bar.update(3)
    assert "default engine: eval stem" in capsys.readouterr().err
    with progress(3, "eval stem") as bar:
        bar.update(3)
    assert "engine" not in capsys.readouterr().err

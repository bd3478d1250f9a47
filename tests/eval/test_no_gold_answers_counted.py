"""A question with a gold path but no gold answers is a counted skip in data-stats, bounds and eval output."""

import json

import pytest

from stem_jax.cli.main import main
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.eval.bound import data_bound
from stem_jax.kg.index import build_index

QUESTIONS = [
    {"id": "q1", "question": "who directed Film A", "topic_entities": ["Film A"], "answers": ["Director A"],
     "gold_path": ["directed_by"]},
    {"id": "q2", "question": "who directed Film B", "topic_entities": ["Film B"], "gold_path": ["directed_by"]},
    {"id": "q3", "question": "who directed Film B again", "topic_entities": ["Film B"], "answers": [],
     "gold_path": ["directed_by"]},
]


@pytest.fixture
def kg(tmp_path):
    folder = tmp_path / "kg"
    folder.mkdir()
    (folder / "triples.tsv").write_text("Film A\tdirected_by\tDirector A\nFilm B\tdirected_by\tDirector B\n")
    (folder / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return folder


def test_the_bound_counts_the_skip(kg):
    dataset = load_dataset(DatasetSpec(name="files", data_dir=kg))
    summary = data_bound(dataset.questions, build_index(dataset.triples))
    assert summary["overall"]["n"] == 1 and summary["overall"]["skipped"] == {"no gold answers": 2}
    only = data_bound(dataset.questions[1:], build_index(dataset.triples))  # nothing scorable: still reported
    assert only["overall"]["n"] == 0 and only["overall"]["skipped"] == {"no gold answers": 2}


def test_data_stats_and_eval_print_the_skip(kg, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STEM_CACHE_DIR", str(tmp_path / "cache"))
    cache = ["--encoder.name=hashing"]
    assert main(["data-stats", "--dataset", "files", "--data-dir", str(kg), "--no-progress", *cache]) == 0
    assert "not scored: no gold answers: 2" in capsys.readouterr().out
    assert main(["eval", "--dataset", "files", "--data-dir", str(kg), "--planner", "oracle", "--no-progress",
                 "--out", str(tmp_path / "run"), *cache]) == 0
    assert "not scored: no gold answers: 2 (q2, q3)" in capsys.readouterr().out

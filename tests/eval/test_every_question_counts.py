"""Metrics over every question of a split: questions the loader could not make answerable are misses."""

from __future__ import annotations

import json

import pytest

from stem_jax.cli.report import summary_table
from stem_jax.data.files import load_files
from stem_jax.eval.scoring import over_every_question, score_records


def test_dropped_questions_are_listed_and_counted_as_misses(tmp_path):
    (tmp_path / "triples.tsv").write_text("Kismet\tdirected_by\tWilliam Dieterle\n")
    lines = [{"id": "a", "question": "who directed Kismet", "answers": ["William Dieterle"]},
             {"id": "b", "question": "who directed it", "answers": ["Somebody"]},  # no topic the linker finds
             {"id": "c", "question": "who directed it, no answers"}]  # nothing to score either way
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = load_files(folder=tmp_path)
    assert [q.qid for q in data.questions] == ["a"]
    assert data.dropped == [("b", "no topic entity", None)]
    summary = score_records([{"id": "a", "hops": 1, "prediction": ["William Dieterle"],
                              "ground_truth": ["William Dieterle"], "overflow": 0}])
    every = over_every_question(summary, data.dropped)
    assert every["n"] == 2 and every["scored"] == 1 and every["dropped_ids"] == {"no topic entity": ["b"]}
    assert every["mean"]["hit"] == pytest.approx(0.5) and every["mean"]["f1"] == pytest.approx(0.5)
    # the dropped question has no hop count: it widens the overall row, not the 1-hop group
    assert every["groups"]["1-hop"]["n"] == 1 and every["groups"]["1-hop"]["mean"]["hit"] == 1.0
    summary["all_questions"] = every
    assert "Over every question of the split (2; not answerable, counted as misses: no topic entity: 1)" in \
        summary_table(summary)


def test_nothing_dropped_leaves_the_headline_unchanged():
    summary = score_records([{"id": "a", "hops": 1, "prediction": ["x"], "ground_truth": ["x"], "overflow": 0}])
    every = over_every_question(summary, [])
    assert every["mean"]["hit"] == summary["overall"]["mean"]["hit"] and every["dropped"] == {}
    summary["all_questions"] = every
    assert "Over every question" not in summary_table(summary)


def test_dropped_questions_widen_their_own_hop_group():
    summary = score_records([{"id": f"q{i}", "hops": h, "prediction": ["x"], "ground_truth": ["x"], "overflow": 0}
                             for i, h in enumerate([1, 1, 2])])
    every = over_every_question(summary, [("d1", "topic entity not in the KB", 2), ("d2", "topic entity not in the KB", 2)])
    assert (every["n"], every["groups"]["1-hop"]["n"], every["groups"]["2-hop"]["n"]) == (5, 2, 3)
    assert every["groups"]["1-hop"]["mean"]["hit"] == 1.0
    assert every["groups"]["2-hop"]["mean"]["hit"] == pytest.approx(1 / 3)
    assert every["dropped"] == {"topic entity not in the KB": 2}

"""Any loaded dataset written in RoG's format reads back with the same questions, gold paths and k-hop graphs."""

import json

from stem_jax.data.rog import load_rog
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.kg.subgraph import write_rog

TRIPLES = [("A", "r1", "B"), ("B", "r2", "C"), ("C", "r3", "D"), ("E", "r1", "A"), ("X", "r9", "Y")]


def _dataset() -> Dataset:
    questions = [
        Question(qid="q1", text="what is two steps from A", topic_entities=("A",), answers=("C",),
                 gold_path=(PathStep("r1"), PathStep("r2"))),
        Question(qid="q2", text="what points at A", topic_entities=("A",), answers=("E",),
                 gold_path=(PathStep("r1", forward=False),)),
        Question(qid="q3", text="nowhere", topic_entities=("Z",), answers=("A",)),
    ]
    return Dataset(name="tiny", questions=questions, triples=TRIPLES)


def test_written_rog_reads_back_with_gold_paths_and_two_hop_graphs(tmp_path):
    counts = write_rog(tmp_path / "test.jsonl", _dataset(), hops=2)
    assert counts == {"questions": 2, "left_out": 1, "triples": 6}
    loaded = load_rog(tmp_path / "test.jsonl", split="test")
    by_id = {q.qid: q for q in loaded.questions}
    assert by_id["q1"].gold_path == (PathStep("r1"), PathStep("r2"))
    assert by_id["q2"].gold_path == (PathStep("r1", forward=False),)
    assert set(by_id["q1"].graph) == {("A", "r1", "B"), ("B", "r2", "C"), ("E", "r1", "A")}
    assert by_id["q1"].answers == ("C",) and by_id["q1"].topic_entities == ("A",)
    assert set(loaded.triples) == {("A", "r1", "B"), ("B", "r2", "C"), ("E", "r1", "A")}


def test_a_gold_path_outside_the_question_graph_is_dropped_not_the_question(tmp_path):
    record = {"id": "q", "question": "q", "answer": ["B"], "q_entity": ["A"], "a_entity": ["B"],
              "graph": [["A", "r1", "B"]], "gold_path": ["r7"]}
    (tmp_path / "test.jsonl").write_text(json.dumps(record) + "\n")
    (question,) = load_rog(tmp_path / "test.jsonl", split="test").questions
    assert question.gold_path is None and question.answers == ("B",)

"""The `files` loader's `constraints` field (several topic entities) and RoG's empty gold paths."""

import json

import pytest
from triple_tables import CLUBS_AND_POSITIONS

from stem_jax.data.files import load_files, question_record
from stem_jax.data.types import PathStep
from stem_jax.errors import DataError
from stem_jax.plan.oracle import OraclePlanner

TRIPLES = CLUBS_AND_POSITIONS
CONJUNCTION = {"id": "c1", "question": "which forward plays for Club_X", "answers": ["Ana"],
               "constraints": [["Club_X", ["^plays_in_club"]], ["Forward", ["^plays_position"]]]}


def load(tmp_path, *records, strict=False):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return load_files(folder=tmp_path, split="test", strict=strict)


def test_constraints_become_topics_and_a_tree_the_oracle_plans(tmp_path):
    dataset = load(tmp_path, CONJUNCTION)
    (question,) = dataset.questions
    assert question.topic_entities == ("Club_X", "Forward")
    assert question.constraints == (("Club_X", (PathStep("plays_in_club", False),)),
                                    ("Forward", (PathStep("plays_position", False),)))
    assert question.gold_path == (PathStep("plays_in_club", False),)
    assert question.hops == 1
    (schema,) = OraclePlanner().plan(question)
    assert set(schema.constants()) == {"Club_X", "Forward"}
    assert len(schema.triples) == 2  # one branch per constraint, meeting at the answer


def test_constraint_entities_lead_given_topics_and_round_trip(tmp_path):
    record = {**CONJUNCTION, "topic_entities": ["Forward"]}
    (question,) = load(tmp_path, record).questions
    assert question.topic_entities == ("Club_X", "Forward")  # traced from the first constraint's entity
    written = question_record(question)
    assert written["constraints"] == CONJUNCTION["constraints"]
    (again,) = load(tmp_path / "again", written).questions
    assert again.constraints == question.constraints


def test_one_constraint_is_a_plain_gold_path(tmp_path):
    record = {**CONJUNCTION, "constraints": CONJUNCTION["constraints"][1:]}
    (question,) = load(tmp_path, record).questions
    assert question.constraints is None
    assert question.topic_entities == ("Forward",)
    assert question.gold_path == (PathStep("plays_position", False),)


@pytest.mark.parametrize("constraints, problem", [
    ([["Nobody", ["plays_in_club"]]], "unknown entity"),
    ([["Club_X", ["no_such_relation"]]], "unknown relation"),
    ([["Club_X", []]], "malformed path"),
    ([["Club_X"]], "not an .entity, path. pair"),
    ([["Club_X", ["^plays_in_club"]], ["Club_X", ["^plays_in_club"]]], "same entity"),
    ("Club_X", "non-empty list"),
])
def test_bad_constraints_are_counted_skips_naming_the_line(tmp_path, constraints, problem):
    dataset = load(tmp_path, {**CONJUNCTION, "constraints": constraints})
    assert dataset.questions == []
    assert dataset.skips.counts["malformed constraints"] == 1
    assert "test.jsonl:1" in dataset.skips.examples["malformed constraints"]
    with pytest.raises(DataError, match=problem):
        load(tmp_path, {**CONJUNCTION, "constraints": constraints}, strict=True)


def test_empty_gold_path_keeps_the_question_with_a_note(tmp_path):
    record = {"id": "self", "question": "what is Club_X", "topic_entities": ["Club_X"], "answers": ["Club_X"],
              "gold_path": []}
    dataset = load(tmp_path, record)
    (question,) = dataset.questions
    assert question.gold_path is None and question.hops is None
    assert dataset.skips.total == 0
    assert any("empty gold_path" in reason for reason in dataset.notes.counts)
    assert OraclePlanner().plan(question) == []  # a miss for the oracle, with its reason; other planners plan it


def test_data_stats_prints_the_evidence_bound(tmp_path, capsys):
    from stem_jax.cli.main import main

    load(tmp_path, CONJUNCTION)
    assert main(["data-stats", "--dataset", "files", "--data-dir", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Evidence bound" in out
    row = next(line for line in out.splitlines() if line.startswith("| all |"))
    assert [float(v) for v in row.strip("| ").split("|")[1:]] == [1, 100.0, 100.0, 100.0]  # the tree yields {Ana}


def test_data_stats_counts_value_conditions_the_kg_holds_no_values_for(tmp_path, capsys):
    from stem_jax.cli.main import main

    dated = {"id": "d1", "question": "which forward played for Club_X before 1990", "answers": ["Ana"],
             "topic_entities": ["Club_X"]}
    load(tmp_path, CONJUNCTION, dated)
    assert main(["data-stats", "--dataset", "files", "--data-dir", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 questions state a value condition (date 1, comparison 1)" in out
    assert "holds almost no literal values" in out

"""`data-stats` reports the evidence bound by kind of question and lists, per question, the best schema graph when
no graph yields exactly the gold answers."""

import json

from triple_tables import CLUBS_AND_POSITIONS

from stem_jax.cli.main import main

TRIPLES = CLUBS_AND_POSITIONS
QUESTIONS = [
    # two topics: the tree Club_X + Forward yields exactly {Ana}
    {"id": "tree", "question": "which forward plays for Club_X", "answers": ["Ana"],
     "topic_entities": ["Club_X", "Forward"]},
    # one topic, a condition the KG cannot state: the best graph yields {Ana, Ben}, F1 2/3
    {"id": "short", "question": "who is the older player of Club_X", "answers": ["Ana"],
     "topic_entities": ["Club_X"]},
    # no entity the linker can find: a miss, bound 0
    {"id": "lost", "question": "who plays for nobody", "answers": ["Ana"]},
]


def test_data_stats_bound_by_kind_and_per_question(tmp_path, capsys):
    (tmp_path / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QUESTIONS))
    out_dir = tmp_path / "report"
    assert main(["data-stats", "--dataset", "files", "--data-dir", str(tmp_path), "--no-progress",
                 "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [float(v) for v in line.strip("| ").split("|")[1:]]
            for line in out.splitlines() if line.startswith("| ") and line.count("|") == 6
            and line.split("|")[2].strip().isdigit()}
    assert rows["all"] == [3, 33.3, 55.6, 66.7]
    assert rows["several topic entities"] == [1, 100.0, 100.0, 100.0]
    assert rows["one topic entity"] == [1, 0.0, 66.7, 100.0]
    assert rows["no topic entity found (misses)"] == [1, 0.0, 0.0, 0.0]
    assert "2 of 3 questions have no schema graph that yields exactly their gold answers" in out
    report = json.loads(next(out_dir.glob("*.json")).read_text())
    by_qid = {r["qid"]: r for r in report["evidence_bound"]["questions"]}
    assert by_qid["tree"]["exact"] and by_qid["tree"]["graph"].startswith(("Club_X: ", "Forward: "))
    assert " + " in by_qid["tree"]["graph"]
    assert by_qid["short"] == {"qid": "short", "topics": 1, "exact": False, "best_f1": 0.6667,
                               "graph": "Club_X: ^plays_in_club"}
    assert by_qid["lost"]["best_f1"] == 0.0 and by_qid["lost"]["dropped"]

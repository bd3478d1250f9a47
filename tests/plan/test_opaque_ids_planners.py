"""Opaque entity ids with entity_names.tsv: the oracle and the pattern planner both work.

The failure pinned: if the oracle's schema graphs named the topic by its id (``Q1``) while the pipeline matched
display names, ``eval --planner oracle`` would score Hit 0 ("no schema node matches the topic entity"),
and ``train-planner`` would derive no template from any question (the plans named an entity the masked text
does not), leaving it nothing to train on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stem_jax.cli.main import main
from stem_jax.data.types import PathStep, Question
from stem_jax.plan.base import display_named_schema
from stem_jax.plan.oracle import OraclePlanner, schema_from_path

FILMS = [f"Film {i}" for i in range(24)]
PEOPLE = [f"Person {i}" for i in range(8)]


def write_opaque_kg(folder: Path) -> Path:
    """Wikidata-like ids (Q.., P..) with names files; questions name topics by id, the text by name."""
    folder.mkdir(parents=True, exist_ok=True)
    ids: dict[str, str] = {}

    def eid(name: str) -> str:
        return ids.setdefault(name, f"Q{len(ids) + 1}")

    rows = []
    for i, film in enumerate(FILMS):
        rows.append((eid(film), "P57", eid(PEOPLE[i % 8])))
        rows.append((eid(film), "P161", eid(PEOPLE[(i + 3) % 8])))
    (folder / "triples.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    (folder / "entity_names.tsv").write_text("".join(f"{i}\t{n}\n" for n, i in ids.items()))
    (folder / "relation_names.tsv").write_text("P57\tdirected_by\nP161\tstarred_actors\n")
    for split in ("train", "test"):
        with (folder / f"{split}.jsonl").open("w") as handle:
            for i, film in enumerate(FILMS):
                director, actor = eid(PEOPLE[i % 8]), eid(PEOPLE[(i + 3) % 8])
                for kind, text, answer, path in (("a", f"who directed {film}", director, "P57"),
                                                 ("b", f"which person acted in {film}", actor, "P161")):
                    handle.write(json.dumps({"id": f"{split}{i}{kind}", "question": text,
                                             "topic_entities": [eid(film)], "answers": [answer],
                                             "gold_path": [path]}) + "\n")
    return folder


@pytest.fixture(scope="module")
def kg(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("opaque")
    folder = write_opaque_kg(root / "okg")
    common = ["--dataset", "files", "--data-dir", str(folder), "--encoder.name=hashing",
              "--cache-dir", str(root / "cache"), "--no-progress",
              "--engine.batch_precision=32", "--engine.batch_breadth=8"]
    return root, common


def _overall(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())["overall"]


def test_oracle_plans_name_topics_as_the_question_does(kg):
    root, common = kg
    assert main(["eval", *common, "--planner", "oracle", "--out", str(root / "oracle")]) == 0
    overall = _overall(root / "oracle")
    assert overall["n"] == 48 and overall["mean"]["hit"] == pytest.approx(1.0)


def test_pattern_planner_trains_and_answers_on_opaque_ids(kg):
    root, common = kg
    planner = root / "planner"
    assert main(["train-planner", *common, "--split", "train", "--epochs", "30", "--out", str(planner)]) == 0
    report = json.loads((planner / "planner.json").read_text())["report"]
    assert report["templates"] == 2 and not report["skipped_train"], report["skipped_train"]
    assert main(["eval", *common, "--planner", "pattern", "--planner-path", str(planner),
                 "--out", str(root / "pattern")]) == 0
    assert _overall(root / "pattern")["mean"]["hit"] == pytest.approx(1.0)


def test_display_named_schema_keeps_ids_when_two_constants_share_a_name():
    names = {"Q1": "Kismet", "Q2": "Kismet", "Q3": "Person"}
    one = schema_from_path("Q1", (PathStep("directed_by", True),))
    assert display_named_schema(one, names).constants() == ["Kismet"]
    assert display_named_schema(one, None) is one
    from stem_jax.plan.oracle import schema_from_constraints

    two = schema_from_constraints([("Q1", (PathStep("r", True),)), ("Q2", (PathStep("s", True),))])
    assert display_named_schema(two, names) == two  # renaming would merge two question entities into one node
    question = Question("q", "who directed Kismet", ("Q1",), ("Q3",), gold_path=(PathStep("directed_by", True),))
    plan = OraclePlanner(names=names).plan
    assert plan(question)[0].constants() == ["Kismet"]
    assert OraclePlanner().plan(question)[0].constants() == ["Q1"]

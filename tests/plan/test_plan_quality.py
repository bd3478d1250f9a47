"""Planner quality metrics (schema P/R/F1 with placeholders, strategy accuracy) and the paraphrase file."""

import re
from pathlib import Path

import pytest

from stem_jax.data.types import Question
from stem_jax.errors import DataError
from stem_jax.eval.plan_quality import (
    PlanQuality,
    canonical_triples,
    load_qtype_questions,
    question_plan_quality,
)
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import METAQA_RELATION_TABLE, metaqa_gold_path, schema_from_path
from stem_jax.plan.schema import SchemaGraph, SchemaTriple

PARAPHRASES = Path(__file__).parents[2] / "experiments" / "data" / "metaqa_paraphrases.tsv"


def _q(answers=("a",), hops=2):
    return Question("q", "which films share a director with Kismet", ("Kismet",), answers, hops=hops)


def test_canonical_form_ignores_placeholder_names_and_triple_order():
    a = SchemaGraph((SchemaTriple("Kismet", "directed_by", "[ENT1]"), SchemaTriple("[ENT2]", "directed_by", "[ENT1]")),
                    "[ENT2]")
    b = SchemaGraph((SchemaTriple("[ENT9]", "directed_by", "[ENT4]"), SchemaTriple("kismet", "directed_by", "[ENT4]")),
                    "[ENT9]")
    assert canonical_triples(a, ["Kismet"]) == canonical_triples(b, ["Kismet"])
    triples, answer = canonical_triples(a, ["Kismet"])
    assert triples == {("<Q0>", "directed_by", "<v1>"), ("<v2>", "directed_by", "<v1>")} and answer == "<v2>"


def test_structural_vs_relation_scores():
    gold = [schema_from_path("Kismet", metaqa_gold_path("movie_to_director_to_movie"), "Precision")]
    right = schema_from_path("Kismet", metaqa_gold_path("movie_to_director_to_movie"), "Breadth")
    s = question_plan_quality(_q(), gold, [right], ["Kismet"])
    assert s["structural_f1"] == s["relation_f1"] == 1.0 and s["template_top1"] == 1.0
    assert s["strategy_correct"] == 0.0 and s["strategy_ans_eq_1_precision"] == 0.0
    # same relations, wrong direction of the second hop: relation-level 1, structural 1/2
    flipped = SchemaGraph((SchemaTriple("Kismet", "directed_by", "[ENT1]"), SchemaTriple("[ENT1]", "directed_by", "[ENT2]")),
                          "[ENT2]")
    s = question_plan_quality(_q(("a", "b")), gold, [flipped], ["Kismet"])
    assert s["relation_f1"] == 1.0 and s["structural_precision"] == 0.5 and s["structural_recall"] == 0.5
    assert s["template_top1"] == 0.0 and "strategy_ans_ge_2_breadth" in s
    # a 1-hop plan for a 2-hop question: P = 1, R = 1/2 at both levels
    one = schema_from_path("Kismet", metaqa_gold_path("movie_to_director"))
    s = question_plan_quality(_q(), gold, [one, right], ["Kismet"])
    assert s["structural_precision"] == 1.0 and s["structural_recall"] == 0.5
    assert s["best_of_beam_structural_f1"] == 1.0 and s["template_in_beam"] == 1.0 and s["template_top1"] == 0.0
    empty = question_plan_quality(_q(), gold, [], ["Kismet"])
    assert empty["structural_f1"] == 0.0 and "strategy_correct" not in empty
    assert question_plan_quality(_q(), [], [right], ["Kismet"]) is None


def test_accumulator_groups_by_hop():
    acc = PlanQuality()
    gold = [schema_from_path("Kismet", metaqa_gold_path("movie_to_director_to_movie"))]
    acc.add(_q(), gold, gold, ["Kismet"])
    acc.add(_q(hops=1), gold, [], ["Kismet"])
    acc.add(_q(), [], gold, ["Kismet"])
    summary = acc.summary()
    assert summary["2-hop"]["n"] == 1 and summary["1-hop"]["structural_f1"] == 0.0
    assert summary["all"]["n"] == 2 and summary["all"]["structural_f1"] == 0.5
    assert summary["skipped"] == {"no gold plan": 1}


def test_load_qtype_questions(tmp_path):
    index = build_index([("Kismet", "directed_by", "Dieterle"), ("Heat", "directed_by", "Dieterle"),
                         ("Kismet", "release_year", "1944")])
    path = tmp_path / "q.tsv"
    path.write_text("# comment\nmovie_to_director_to_movie\tWhat else did the maker of [Kismet] make?\n")
    [q] = load_qtype_questions(path, index)
    assert q.answers == ("Heat",) and q.hops == 2 and q.text == "What else did the maker of Kismet make?"
    path.write_text("movie_to_director\tWho made [Nope]?\n")
    with pytest.raises(DataError, match="not in the KB"):
        load_qtype_questions(path, index)
    path.write_text("movie_to_writer\tWho wrote [Kismet]?\n")
    with pytest.raises(DataError, match="reaches no answer"):
        load_qtype_questions(path, index)


def test_paraphrase_file_is_well_formed():
    lines = [line for line in PARAPHRASES.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    assert len(lines) >= 100
    qtypes = set()
    for line in lines:
        qtype, text = line.split("\t")
        metaqa_gold_path(qtype)  # every qtype composes from the relation table
        assert len(re.findall(r"\[[^\]]+\]", text)) == 1
        qtypes.add(qtype)
    assert {q for q in qtypes if q.count("_to_") == 1} == set(METAQA_RELATION_TABLE)
    assert len(qtypes) == 49


@pytest.mark.slow
def test_paraphrases_load_on_metaqa_and_differ_from_metaqa_wording(shared_data):
    from stem_jax.data.metaqa import find_kb, read_kb
    from stem_jax.data.types import SkipReport

    root = shared_data / "metaqa"
    index = build_index(read_kb(find_kb(root), SkipReport()))
    questions = load_qtype_questions(PARAPHRASES, index)
    assert len(questions) >= 100 and all(q.answers for q in questions)
    masked_metaqa = set()
    for hop in (1, 2, 3):
        for split in ("dev", "test"):
            for line in (root / f"{hop}-hop" / "vanilla" / f"qa_{split}.txt").read_text(encoding="utf-8").splitlines():
                masked_metaqa.add(re.sub(r"\[[^\]]+\]", "X", line.split("\t")[0]).lower().strip())
    for line in PARAPHRASES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            masked = re.sub(r"\[[^\]]+\]", "X", line.split("\t")[1]).lower().strip(" ?")
            assert masked not in masked_metaqa, line

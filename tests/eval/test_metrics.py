"""Tests for stem_jax.eval.metrics: RoG-compatible, strict and graph metrics, and aggregation.

Expected values are computed by hand (see the comments); the RoG cases pin the quirks of
RoG's ``evaluate_results.py`` that published numbers depend on.
"""

from __future__ import annotations

import json
import math

import pytest

from stem_jax.eval.metrics import (
    MetricAccumulator,
    answer_count_bucket,
    coverage_rate,
    format_markdown_table,
    normalize_entity,
    rog_eval_acc,
    rog_eval_f1,
    rog_eval_hit,
    rog_extract_topk,
    rog_match,
    rog_normalize,
    rog_prepare_prediction,
    rog_question_metrics,
    schema_prf,
    strict_metrics,
)

approx = pytest.approx

# ------------------------------------------------------------------------------------------
# RoG normalize / match
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  U.S.  of   A. ", "us of"),  # punctuation deleted, then the article "a" removed
        ("Jean-Paul Sartre", "jeanpaul sartre"),  # hyphen deleted, not turned into a space
        ("the-end", "theend"),  # punctuation goes first, so "the" is no longer a word
        ("There and Theatre", "there and theatre"),  # articles only as whole words
        ("An apple, a pear\tand\nthe plum", "apple pear and plum"),
        ("<pad> Obama", "pad obama"),  # RoG's <pad> removal is dead code
        ("<pad>Obama<pad>", "padobamapad"),
        ("Beyoncé – “Halo”", "beyoncé – “halo”"),  # non-ASCII punctuation survives
        ("", ""),
        ("The", ""),
    ],
)
def test_rog_normalize(text: str, expected: str) -> None:
    assert rog_normalize(text) == expected


def test_rog_match_is_unbounded_substring() -> None:
    assert rog_match("He was born in 1990.", "1")  # "1" inside "1990"
    assert rog_match("Parisian", "Paris")
    assert rog_match("the answer is Barack Obama", "OBAMA")
    assert not rog_match("Obama", "Barack Obama")  # answer inside prediction, not the reverse
    assert not rog_match("New-York", "New York")  # "newyork" does not contain "new york"
    # An answer that normalises to "" matches everything, even an empty prediction.
    assert rog_match("", "The")
    assert rog_match("anything", "?")


# ------------------------------------------------------------------------------------------
# RoG eval_acc / eval_hit / eval_f1
# ------------------------------------------------------------------------------------------


def test_rog_eval_acc_counts_duplicate_answers() -> None:
    pred = "Barack Obama and Joe Biden"
    # Obama (twice) and Biden match; Trump does not: 3 / 4 (a deduplicated count would give 2 / 3).
    assert rog_eval_acc(pred, ["Obama", "Biden", "Trump", "Obama"]) == approx(0.75)
    assert rog_eval_acc(pred, ["OBAMA", "the Biden"]) == approx(1.0)
    assert rog_eval_acc(pred, ["Trump"]) == 0.0
    with pytest.raises(ValueError, match="no gold answers"):
        rog_eval_acc(pred, [])


def test_rog_eval_hit() -> None:
    assert rog_eval_hit("Paris, France", ["London", "paris"]) == 1.0
    assert rog_eval_hit("Paris, France", ["London"]) == 0.0
    assert rog_eval_hit("Paris", []) == 0.0  # RoG returns 0 for no answers


def test_rog_rejects_single_string_answers() -> None:
    # A bare string would be iterated character by character.
    with pytest.raises(TypeError):
        rog_eval_hit("Paris", "Paris")
    with pytest.raises(TypeError):
        rog_eval_acc("Paris", "Paris")
    with pytest.raises(TypeError):
        rog_eval_f1("Paris", ["Paris"])


def test_rog_eval_f1_precision_can_exceed_one() -> None:
    # Both gold answers are substrings of the single prediction: matched = 2, len(pred) = 1.
    f1, precision, recall = rog_eval_f1(["Barack Obama"], ["Barack Obama", "Obama"])
    assert precision == approx(2.0)
    assert recall == approx(1.0)
    assert f1 == approx(4 / 3)  # 2 * 2 * 1 / (2 + 1)


def test_rog_eval_f1_regular_case() -> None:
    # One of two answers matched, three predictions: P = 1/3, R = 1/2, F1 = (1/3) / (5/6) = 0.4.
    f1, precision, recall = rog_eval_f1(["Paris", "London", "Rome"], ["Paris", "Berlin"])
    assert (f1, precision, recall) == (approx(0.4), approx(1 / 3), approx(0.5))


def test_rog_eval_f1_matches_across_element_boundaries() -> None:
    # "new york" is found in the space-joined string "new york": P = 1/2, R = 1, F1 = 2/3.
    f1, precision, recall = rog_eval_f1(["New", "York"], ["New York"])
    assert (f1, precision, recall) == (approx(2 / 3), approx(0.5), approx(1.0))


def test_rog_eval_f1_empty_cases() -> None:
    assert rog_eval_f1([], ["Paris"]) == (0.0, 0.0, 0.0)
    assert rog_eval_f1([], []) == (0.0, 0.0, 0.0)  # checked before the answers, as in RoG
    assert rog_eval_f1(["London"], ["Paris"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        rog_eval_f1(["Paris"], [])
    assert all(isinstance(x, float) for x in rog_eval_f1(["London"], ["Paris"]))


# ------------------------------------------------------------------------------------------
# RoG prediction preparation and per-question metrics
# ------------------------------------------------------------------------------------------


def test_rog_extract_topk() -> None:
    pred = ["b", "a", "b", "c", "a", "b"]  # counts b=3, a=2, c=1
    assert rog_extract_topk(pred) == ["b", "a", "c"]
    assert rog_extract_topk(pred, 2) == ["b", "a"]
    assert rog_extract_topk(pred, 10) == ["b", "a", "c"]
    assert rog_extract_topk(pred, 0) == []
    # Ties keep first-occurrence order.
    assert rog_extract_topk(["y", "x", "x", "y", "z"]) == ["y", "x", "z"]


def test_rog_prepare_prediction() -> None:
    # Strings split on newlines, empty lines kept, no dedup, top-k ignored.
    assert rog_prepare_prediction("A\n\nB\nA\n", topk=1) == ["A", "", "B", "A", ""]
    assert rog_prepare_prediction("") == [""]
    # Lists (and tuples) are deduplicated by frequency and cut.
    assert rog_prepare_prediction(("A", "B", "B"), topk=1) == ["B"]


def test_rog_question_metrics_string_prediction() -> None:
    # ["Paris", "", "London", ""]: 4 elements, 1 of 1 answers matched.
    # P = 1/4, R = 1, F1 = 0.5 / 1.25 = 0.4.
    m = rog_question_metrics("Paris\n\nLondon\n", ["Paris"])
    assert m == {
        "rog_acc": approx(1.0),
        "rog_hit": approx(1.0),
        "rog_f1": approx(0.4),
        "rog_precision": approx(0.25),
        "rog_recall": approx(1.0),
    }


def test_rog_question_metrics_list_prediction_topk() -> None:
    pred = ["Rome", "Paris", "Rome"]
    top1 = rog_question_metrics(pred, ["Paris"], topk=1)  # only "Rome" survives
    assert top1 == {"rog_acc": 0.0, "rog_hit": 0.0, "rog_f1": 0.0, "rog_precision": 0.0, "rog_recall": 0.0}
    full = rog_question_metrics(pred, ["Paris"])  # ["Rome", "Paris"]: P = 1/2, R = 1
    assert full["rog_f1"] == approx(2 / 3)
    assert full["rog_precision"] == approx(0.5)
    assert full["rog_hit"] == 1.0


def test_rog_question_metrics_empty_prediction() -> None:
    # "" is the one-element list [""], not an empty list.
    assert rog_question_metrics("", ["Paris"])["rog_f1"] == 0.0
    # ... and an answer normalising to "" matches it, scoring a perfect question.
    m = rog_question_metrics("", ["The"])
    assert m["rog_f1"] == approx(1.0) and m["rog_hit"] == 1.0 and m["rog_precision"] == approx(1.0)
    # An empty list gives F1 0, and acc/hit are computed on the empty joined string.
    m = rog_question_metrics([], ["Paris"])
    assert m == {"rog_acc": 0.0, "rog_hit": 0.0, "rog_f1": 0.0, "rog_precision": 0.0, "rog_recall": 0.0}
    with pytest.raises(ValueError):
        rog_question_metrics("Paris", [])


# ------------------------------------------------------------------------------------------
# Strict metrics
# ------------------------------------------------------------------------------------------


def test_normalize_entity_fallbacks() -> None:
    assert normalize_entity("The Eiffel Tower") == "eiffel tower"
    assert normalize_entity("A") == "a"  # article-only name survives
    assert normalize_entity("A.") == "a"
    assert normalize_entity("The") == "the"
    assert normalize_entity("?") == "?"
    assert normalize_entity("  ") == ""


def test_strict_metrics_dedup_and_normalisation() -> None:
    preds = ["The Eiffel Tower", "eiffel tower!", "Louvre", "Notre-Dame"]
    gold = ["Eiffel Tower", "Louvre Museum", "eiffel  tower"]
    # P = {eiffel tower, louvre, notredame}, G = {eiffel tower, louvre museum}: 1 correct.
    m = strict_metrics(preds, gold)
    assert m == {
        "hit_at_1": 1.0,
        "hit": 1.0,
        "precision": approx(1 / 3),
        "recall": approx(1 / 2),
        "f1": approx(0.4),
    }


def test_strict_metrics_no_substring_match() -> None:
    m = strict_metrics(["1990", "Parisian"], ["1", "Paris"])
    assert m == {"hit_at_1": 0.0, "hit": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_strict_metrics_rank_matters_for_hit_at_1() -> None:
    m = strict_metrics(["Rome", "Paris"], ["Paris"])
    assert m["hit_at_1"] == 0.0 and m["hit"] == 1.0
    assert m["precision"] == approx(0.5) and m["recall"] == approx(1.0) and m["f1"] == approx(2 / 3)
    m = strict_metrics(["", "Paris", "Rome"], ["Paris"])  # empty names are dropped, not ranked
    assert m["hit_at_1"] == 1.0


def test_strict_metrics_article_answers_stay_distinct() -> None:
    assert strict_metrics(["The"], ["A"])["hit"] == 0.0
    assert strict_metrics(["a"], ["A"])["hit"] == 1.0


def test_strict_metrics_empty_cases() -> None:
    zeros = {"hit_at_1": 0.0, "hit": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert strict_metrics([], ["Paris"]) == zeros
    assert strict_metrics(["", "  "], ["Paris"]) == zeros
    with pytest.raises(ValueError, match="no gold answers"):
        strict_metrics(["Paris"], [])
    with pytest.raises(ValueError):
        strict_metrics(["Paris"], ["", " "])
    with pytest.raises(TypeError):
        strict_metrics("Paris", ["Paris"])


# ------------------------------------------------------------------------------------------
# Coverage rate and schema P/R/F1
# ------------------------------------------------------------------------------------------

GOLD_PATH = [("a", "r1", "b"), ("b", "r2", "c"), ("b", "r2", "c")]  # a set of 2 triples


def test_coverage_rate_exact_and_undirected() -> None:
    evidence = [("a", "r1", "b"), ("c", "r2", "b"), ("x", "r", "y")]
    assert coverage_rate(GOLD_PATH, evidence) == approx(0.5)  # (c, r2, b) is reversed
    assert coverage_rate(GOLD_PATH, evidence, undirected=True) == approx(1.0)
    assert coverage_rate(GOLD_PATH, []) == 0.0
    assert coverage_rate([], evidence) == 0.0  # zero denominator guarded
    # The relation must still agree when direction is ignored.
    assert coverage_rate([("a", "r1", "b")], [("b", "r2", "a")], undirected=True) == 0.0
    # Generators and lists work as inputs.
    assert coverage_rate(iter([["a", "r1", "b"]]), [("a", "r1", "b")]) == 1.0
    with pytest.raises(ValueError):
        coverage_rate([("a", "r1")], [])


def test_schema_prf_exact() -> None:
    gold = [("m", "directed_by", "d"), ("d", "born_in", "c")]
    schema = [("m", "directed_by", "d"), ("d", "nationality", "c"), ("x", "y", "z")]
    # 1 common triple: P = 1/3, R = 1/2, F1 = 0.4.
    assert schema_prf(gold, schema) == {"precision": approx(1 / 3), "recall": approx(0.5), "f1": approx(0.4)}
    assert schema_prf([("a", "r", "b")], [("b", "r", "a")])["f1"] == 0.0
    assert schema_prf([("a", "r", "b")], [("b", "r", "a")], undirected=True)["f1"] == approx(1.0)


def test_schema_prf_relation_only_with_placeholders() -> None:
    gold = [("Inception", "directed_by", "Nolan"), ("Nolan", "born_in", "London")]
    schema = [
        ("[ENT1]", "directed_by", "[ENT2]"),
        ("[ENT3]", "born_in", "[ENT2]"),  # reversed direction still counts
        ("[ENT2]", "spouse", "[ENT4]"),
    ]
    assert schema_prf(gold, schema) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    # Relation multisets {directed_by, born_in} vs {directed_by, born_in, spouse}:
    # common 2, P = 2/3, R = 1, F1 = (4/3) / (5/3) = 0.8.
    m = schema_prf(gold, schema, relation_only=True)
    assert m == {"precision": approx(2 / 3), "recall": approx(1.0), "f1": approx(0.8)}


def test_schema_prf_relation_multiset() -> None:
    gold = [("a", "r", "b"), ("b", "r", "c")]  # relation r used twice
    # One r in the schema recalls only one of the two: P = 1, R = 1/2, F1 = 2/3.
    m = schema_prf(gold, [("[E1]", "r", "[E2]")], relation_only=True)
    assert m == {"precision": approx(1.0), "recall": approx(0.5), "f1": approx(2 / 3)}
    # Duplicate triples collapse before counting relations.
    m = schema_prf(gold, [("[E1]", "r", "[E2]"), ("[E1]", "r", "[E2]")], relation_only=True)
    assert m["recall"] == approx(0.5)
    m = schema_prf(gold, [("[E1]", "r", "[E2]"), ("[E2]", "r", "[E3]")], relation_only=True)
    assert m == {"precision": approx(1.0), "recall": approx(1.0), "f1": approx(1.0)}


def test_schema_prf_zero_denominators() -> None:
    zeros = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert schema_prf([("a", "r", "b")], []) == zeros
    assert schema_prf([], [("a", "r", "b")]) == zeros
    assert schema_prf([], []) == zeros
    assert schema_prf([], [], relation_only=True) == zeros


# ------------------------------------------------------------------------------------------
# Aggregation
# ------------------------------------------------------------------------------------------


def test_answer_count_bucket() -> None:
    assert [answer_count_bucket(n) for n in (1, 2, 4, 5, 9, 10, 250)] == [
        "1",
        "2-4",
        "2-4",
        "5-9",
        "5-9",
        ">=10",
        ">=10",
    ]
    with pytest.raises(ValueError):
        answer_count_bucket(0)


def test_accumulator_groups_means_and_counts() -> None:
    acc = MetricAccumulator(group_name="hop")
    acc.add({"hit": 1, "f1": 0.5}, group=2)
    acc.add({"hit": 0.0, "f1": 0.25}, group=10)
    acc.add({"hit": True, "f1": 1.0, "coverage": 0.5}, group=10)
    acc.add({"hit": 0.0, "f1": 0.0}, group=1)
    acc.add({"hit": 1.0, "f1": 0.75})  # ungrouped: overall only
    acc.skip("no gold answers", group=10)
    acc.skip("no gold answers")

    summary = acc.summary()
    assert json.loads(json.dumps(summary)) == summary  # JSON-serialisable, no tuples
    assert summary["group_name"] == "hop"
    # Numeric groups sort numerically, not as strings ("1", "10", "2").
    assert list(summary["groups"]) == ["1", "2", "10"]

    overall = summary["overall"]
    assert overall["n"] == 5
    assert overall["mean"]["hit"] == approx(3 / 5)
    assert overall["mean"]["f1"] == approx((0.5 + 0.25 + 1.0 + 0.0 + 0.75) / 5)
    assert overall["mean"]["coverage"] == approx(0.5)  # averaged over the 1 question reporting it
    assert overall["count"] == {"hit": 5, "f1": 5, "coverage": 1}
    assert overall["skipped"] == {"no gold answers": 2}

    g10 = summary["groups"]["10"]
    assert g10["n"] == 2
    assert g10["mean"] == {"hit": approx(0.5), "f1": approx(0.625), "coverage": approx(0.5)}
    assert g10["skipped"] == {"no gold answers": 1}
    assert summary["groups"]["2"]["mean"] == {"hit": 1.0, "f1": 0.5}
    assert summary["groups"]["1"]["skipped"] == {}


def test_accumulator_mixed_group_keys_and_empty() -> None:
    empty = MetricAccumulator().summary()
    assert empty["overall"] == {"n": 0, "mean": {}, "count": {}, "skipped": {}}
    assert empty["groups"] == {}
    acc = MetricAccumulator()
    for g in ("5-9", 3, "1", 1, ">=10", 2.5):
        acc.add({"x": 1.0}, group=g)
    groups = acc.summary()["groups"]
    # str(group) is the key: 1 and "1" are one group; numeric names first, then the others.
    assert list(groups) == ["1", "2.5", "3", "5-9", ">=10"]
    assert groups["1"]["n"] == 2


def test_accumulator_rejects_bad_values() -> None:
    acc = MetricAccumulator()
    with pytest.raises(TypeError):
        acc.add({"hit": "1"})
    with pytest.raises(ValueError):
        acc.add({"f1": math.nan})
    with pytest.raises(ValueError):
        acc.add({"f1": math.inf})
    assert acc.summary()["overall"]["n"] == 0  # rejected dicts leave no trace


def test_format_markdown_table() -> None:
    acc = MetricAccumulator(group_name="hop")
    acc.add({"hit": 1.0, "f1": 0.5}, group=1)
    acc.add({"hit": 0.0}, group=2)
    acc.skip("no gold answers", group=2)
    table = format_markdown_table(acc.summary())
    assert table == (
        "| hop | n | hit | f1 | skipped |\n"
        "|---|---|---|---|---|\n"
        "| 1 | 1 | 100.00 | 50.00 | 0 |\n"
        "| 2 | 1 | 0.00 | - | 1 |\n"
        "| all | 2 | 50.00 | 50.00 | 1 |\n"
    )
    plain = format_markdown_table(acc.summary(), ["f1"], scale=1.0, digits=3)
    assert plain.splitlines()[0] == "| hop | n | f1 | skipped |"
    assert plain.splitlines()[-1] == "| all | 2 | 0.500 | 1 |"


def test_format_markdown_table_without_skips_or_groups() -> None:
    acc = MetricAccumulator()
    acc.add(strict_metrics(["Paris"], ["Paris", "Lyon"]))
    lines = format_markdown_table(acc.summary()).splitlines()
    assert lines[0] == "| group | n | hit_at_1 | hit | precision | recall | f1 |"
    assert lines[2] == "| all | 1 | 100.00 | 100.00 | 100.00 | 50.00 | 66.67 |"
    assert len(lines) == 3

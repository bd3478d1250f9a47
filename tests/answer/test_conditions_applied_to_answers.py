"""Value conditions applied where the KG holds the values: the wording read, literal names read as values, the
answers narrowed by the relation the question names, and nothing changed where the KG cannot tell."""

import json

import pytest

from stem_jax.answer.values import ValueCondition, ValueIndex, read_condition, read_value
from stem_jax.kg.index import build_index


@pytest.mark.parametrize(("question", "expected"), [
    ("which films starring [Ann] were released after 1990", ("date", ">", 1990.0)),
    ("Which teams in the American League West were founded prior to 1966?", ("date", "<", 1966.0)),
    ("who won the league in 2008", ("date", "=", 2008.0)),
    ("Of the main trading partners of China, and the country calling code is higher than 977?",
     ("number", ">", 977.0)),
    ("which cities have a population of at least 10,000", ("number", ">=", 10000.0)),
    ("What is the earliest film of Ann", ("date", "min", None)),
    ("which of her films has the largest budget", ("number", "max", None)),
])
def test_the_condition_a_question_states_is_read(question, expected):
    condition = read_condition(question)
    assert (condition.kind, condition.op, condition.value) == expected


def test_a_year_inside_a_topic_name_is_no_condition():
    assert read_condition("who starred in Summer of 1942", ["Summer of 1942"]) is None
    assert read_condition("who directed Heat") is None


@pytest.mark.parametrize(("name", "expected"), [
    ("1994", ("date", 1994.0)), ("12,500", ("number", 12500.0)), ("3.5", ("number", 3.5)),
    ("977", ("number", 977.0)), ("Heat", None), ("1994 FIFA World Cup", None)])
def test_literal_names_are_read_as_values(name, expected):
    assert read_value(name) == expected


def test_dates_order_by_year_month_and_day():
    assert read_value("1994-06-30")[1] < read_value("1994-07-01")[1] < read_value("1995")[1]
    assert read_value("March 3, 1994")[1] == pytest.approx(read_value("1994-03-03")[1])


TRIPLES = [("Old Film", "release_year", "1980"), ("New Film", "release_year", "1999"),
           ("Newer Film", "release_year", "2005"), ("Old Film", "budget", "100"), ("New Film", "budget", "900"),
           ("Undated Film", "genre", "Drama")]


def values_and_ids():
    index = build_index(TRIPLES)
    values = ValueIndex.build(index.entities, index.relations, index.triples)
    return values, index.entity_ids


def answers(ids, *names):
    return [(ids[n], 1.0 - i / 10) for i, n in enumerate(names)]


def test_a_comparison_drops_the_answers_whose_values_fail_and_keeps_those_without_one_behind():
    values, ids = values_and_ids()
    question = "which films were released after 1990"
    ranked = answers(ids, "Old Film", "Undated Film", "New Film", "Newer Film")
    kept, note = values.apply(read_condition(question), question, ranked)
    assert [a for a, _ in kept] == [ids["New Film"], ids["Newer Film"], ids["Undated Film"]]
    assert note == {"words": "after 1990", "relation": "release_year", "applied": True, "dropped": 1}


def test_a_superlative_keeps_the_extreme_value_first():
    values, ids = values_and_ids()
    question = "which of these films was released earliest"
    kept, _ = values.apply(read_condition(question), question, answers(ids, "New Film", "Old Film", "Newer Film"))
    assert [a for a, _ in kept] == [ids["Old Film"]]
    question = "which film has the largest budget"
    kept, _ = values.apply(read_condition(question), question, answers(ids, "Old Film", "New Film"))
    assert [a for a, _ in kept] == [ids["New Film"]]


def test_nothing_changes_when_the_question_names_no_valued_relation_or_no_answer_meets_the_condition():
    values, ids = values_and_ids()
    ranked = answers(ids, "Old Film", "New Film")
    question = "which films won an award after 1990"  # no literal relation reads like "won an award"
    assert values.apply(read_condition(question), question, ranked) == (ranked, None)
    question = "which films were released after 2020"
    kept, note = values.apply(read_condition(question), question, ranked)
    assert kept == ranked and note["applied"] is False


def test_a_kg_without_literal_values_has_no_value_index():
    index = build_index([("a", "r", "b"), ("b", "r", "c")])
    assert ValueIndex.build(index.entities, index.relations, index.triples) is None


def test_a_condition_holds_as_its_operator_says():
    after = ValueCondition("date", ">", 1990.0, "after 1990")
    same_year = ValueCondition("date", "=", 1994.0, "in 1994")
    assert after.holds(1990.5) and not after.holds(1990.0)
    assert same_year.holds(read_value("1994-11-02")[1]) and not same_year.holds(1995.0)


def test_the_engine_applies_the_condition_and_off_returns_every_film(tmp_path):
    from stem_jax.config import EncoderConfig, EngineConfig, StemConfig
    from stem_jax.engine import Engine
    from stem_jax.plan.factory import PlannerSpec

    triples = TRIPLES + [(f, "starring", "Ann Actor") for f in ("Old Film", "New Film", "Newer Film", "Undated Film")]
    (tmp_path / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in triples))
    (tmp_path / "train.jsonl").write_text(json.dumps(
        {"id": "q1", "question": "which films starring Ann Actor were released after 1990",
         "topic_entities": ["Ann Actor"], "answers": ["New Film", "Newer Film"]}) + "\n")
    plans = tmp_path / "plans.jsonl"
    plans.write_text(json.dumps({"id": "q1", "paths": [["^starring"]]}) + "\n")
    found, notes = {}, {}
    for setting in ("auto", "off"):
        config = StemConfig(encoder=EncoderConfig(name="hashing"), engine=EngineConfig(value_conditions=setting))
        engine = Engine.open("files", config=config, planner=PlannerSpec(plans_file=plans), data_dir=tmp_path,
                             split="train", cache_dir=tmp_path / "cache")
        [answer] = engine.retrieve(engine.dataset.questions)
        found[setting] = {a for a, _ in answer.answers}
        notes[setting] = answer.record.get("value_condition")
    assert found["auto"] == {"New Film", "Newer Film", "Undated Film"}
    assert notes == {"auto": {"words": "after 1990", "relation": "release_year", "applied": True, "dropped": 1},
                     "off": None}
    assert found["off"] == {"Old Film", "New Film", "Newer Film", "Undated Film"}

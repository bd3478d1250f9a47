"""A question is answered as asked: its own id, its own topic, one entity per name, or a one-line error."""

import dataclasses
import json

import pytest
from triple_tables import rows

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.registry import load_dataset
from stem_jax.engine import Engine
from stem_jax.errors import StemError

CONFIG = StemConfig(encoder=EncoderConfig(name="hashing"))
TRIPLES = rows("""
    Film A | directed_by | Director A
    Film A | written_by  | Writer A
    Film B | directed_by | Director B
    Film B | written_by  | Writer B
    Q1     | directed_by | Director K1
    Q2     | directed_by | Director K2
""")
QUESTIONS = [
    {"id": "q1", "question": "who directed Film A", "topic_entities": ["Film A"], "answers": ["Director A"],
     "gold_path": ["directed_by"]},
    {"id": "q2", "question": "who wrote Film B", "topic_entities": ["Film B"], "answers": ["Writer B"],
     "gold_path": ["written_by"]},
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return Engine.open("demo", config=CONFIG, planner="oracle", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def films(tmp_path_factory):
    folder = tmp_path_factory.mktemp("films")
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (folder / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return Engine.open("files", config=CONFIG, planner="oracle", data_dir=folder,
                       cache_dir=tmp_path_factory.mktemp("cache"))


# ----- one id, one question ---------------------------------------------------------------------
def test_two_questions_with_one_id_are_refused(demo):
    q0, q1 = demo.dataset.questions[:2]
    with pytest.raises(StemError, match=r"questions 0 and 1 of this call share the id .* differ in text"):
        demo.retrieve([q0, dataclasses.replace(q1, qid=q0.qid)])


def test_the_same_question_twice_is_answered_twice(demo):
    q0, q1 = demo.dataset.questions[:2]
    first, again, other = demo.retrieve([q0, q0, q1])
    assert first.answers == again.answers and first.answers != other.answers


def test_evaluate_refuses_a_shared_id_before_any_work(demo, tmp_path):
    q0, q1 = demo.dataset.questions[:2]
    out = tmp_path / "run"
    with pytest.raises(StemError, match="share the id"):
        demo.evaluate(out, questions=[q0, dataclasses.replace(q1, qid=q0.qid)])
    assert not (out / "predictions.jsonl").exists()
    with pytest.raises(StemError, match="a repeat"):
        demo.evaluate(out, questions=[q0, q0])


# ----- an explicit topic is kept ------------------------------------------------------------------
def test_an_explicit_topic_is_not_replaced_by_the_split_question(films):
    question, link = films.question("who directed Film A", topic="Film B")
    assert question.topic_entities == ("Film B",) and link["match"] == ["exact"]
    answer = films.retrieve([question])[0]
    assert "Director A" not in [name for name, _ in answer.answers]
    assert answer.answers == [] and "about Film A, not Film B" in answer.reason


def test_the_same_topic_still_finds_the_split_question(films):
    question, _ = films.question("Who directed [Film A]?")
    answer = films.retrieve([question])[0]
    assert [name for name, _ in answer.answers] == ["Director A"] and answer.reason is None


# ----- a name that several entities carry --------------------------------------------------------
@pytest.fixture(scope="module")
def twins(tmp_path_factory, monkeypatch_module):
    folder = tmp_path_factory.mktemp("twins")
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (folder / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))

    def with_twin_names(spec):  # the files loader refuses such names; another dataset may carry them
        data = load_dataset(spec)
        return dataclasses.replace(data, entity_names={"Q1": "Kismet", "Q2": "Kismet"})

    monkeypatch_module.setattr("stem_jax.engine.load_dataset", with_twin_names)
    return Engine.open("files", config=CONFIG, planner="oracle", data_dir=folder,
                       cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.parametrize("ask", [
    lambda e: e.question("who directed [Kismet]"),
    lambda e: e.question("who directed [kismet]"),
    lambda e: e.question("who directed it", topic="Kismet"),
    lambda e: e.question("who directed Kismet"),
])
def test_a_shared_name_is_an_error_naming_the_entities(twins, ask):
    with pytest.raises(StemError, match=r"names 2 KG entities \(Q1, Q2\).*\n  how to fix: name it by its KG id"):
        ask(twins)


def test_an_id_picks_one_of_the_twins(twins):
    question, link = twins.question("who directed [Q2]")
    assert question.topic_entities == ("Q2",) and link["match"] == ["id"] and question.text == "who directed Kismet"
    question, _ = twins.question("who directed it", topic="Q1")
    assert question.topic_entities == ("Q1",)

"""An answer says whether it is confident: the plans that reach it hold enough of the planner's probability."""

import dataclasses
import json

import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.engine import Engine
from stem_jax.plan.factory import PlannerSpec

TRIPLES = [("Film A", "directed_by", "Director A"), ("Film A", "written_by", "Writer A"),
           ("m.0cvt1", "film", "Film A"), ("m.0cvt1", "award", "Best Film")]
QUESTIONS = [{"id": "q1", "question": "who directed Film A", "topic_entities": ["Film A"], "answers": ["Director A"],
              "gold_path": ["directed_by"]},
             {"id": "q2", "question": "what did Film A win", "topic_entities": ["Film A"], "answers": ["Best Film"],
              "gold_path": ["^film", "award"]},
             {"id": "q3", "question": "what did Film A win, stopping halfway", "topic_entities": ["Film A"],
              "answers": ["Best Film"], "gold_path": ["^film"]}]


@pytest.fixture(scope="module")
def films(tmp_path_factory):
    folder = tmp_path_factory.mktemp("films")
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (folder / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return Engine.open("files", config=StemConfig(encoder=EncoderConfig(name="hashing")), planner="oracle",
                       data_dir=folder, cache_dir=tmp_path_factory.mktemp("cache"))


def test_a_plan_holding_all_the_probability_is_confident(films):
    answer = films.ask("who directed Film A")
    assert answer.best == "Director A" and answer.confident is True and answer.reason is None


def test_plans_that_disagree_are_not_confident_and_say_so(films, tmp_path):
    plans = tmp_path / "plans.jsonl"
    plans.write_text(json.dumps({"id": "q1", "paths": [["directed_by"], ["written_by"]], "scores": [0.6, 0.4]}) + "\n")
    config = dataclasses.replace(films.config, engine=dataclasses.replace(films.config.engine, confident_at=0.7))
    engine = Engine.open("files", config=config, planner=PlannerSpec(name="file", plans_file=plans),
                         data_dir=films.dataset.folder, cache_dir=tmp_path / "cache")
    (answer,) = engine.retrieve([films.dataset.questions[0]])
    assert answer.answers[0][0] == "Director A" and answer.answers[0][1] == pytest.approx(0.6, abs=1e-3)
    assert answer.confident is False and answer.reason.startswith("not confident")


def test_a_mediator_node_is_walked_through_never_returned(films):
    through = films.ask("what did Film A win")
    assert through.best == "Best Film"
    halfway = films.ask("what did Film A win, stopping halfway")
    assert all(not name.startswith("m.") for name, _ in halfway.answers)

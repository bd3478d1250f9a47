"""The branch planner: a chain from the first topic gets the second topic's branch that meets its answers, the tree
traces to the intersection (only the film tied to both topics), and a branch that fits nothing is dropped."""

import json

import numpy as np
import pytest

from stem_jax.data.types import PathStep, Question
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.branch_planner import FEATURES, BranchModel, BranchPlanner, _fit, load_branch_planner
from stem_jax.plan.oracle import schema_from_path
from stem_jax.plan.relation_paths import PathCatalog

TRIPLES = [("Fury", "film.film.starring", "Logan Lerman"), ("Perks", "film.film.starring", "Logan Lerman"),
           ("Yuma", "film.film.starring", "Logan Lerman"), ("Fury", "film.film.other_crew", "m.0crew"),
           ("m.0crew", "film.crew_gig.crew_member", "Candice White"), ("Elsewhere", "film.film.other_crew", "m.0c2"),
           ("m.0c2", "film.crew_gig.crew_member", "Candice White")]
QUESTION = Question("q1", "On what movie featuring Logan Lerman was Candice White a crew member?",
                    ("Logan Lerman", "Candice White"), ("Fury",))
MAIN = (PathStep("film.film.starring", False),)


class Chain:
    name = "chain"

    def plan_batch(self, questions):
        return [[ScoredSchema(schema_from_path(q.topic_entities[0], MAIN, "Breadth"), 0.9)] for q in questions]


def planner(threshold):
    index = build_index(TRIPLES)
    catalog = PathCatalog(index, mediators=np.asarray([e.startswith("m.") for e in index.entities]))
    weights = tuple(0.0 for _ in FEATURES[:-1]) + (1.0,)  # every branch scores sigmoid(1) = 0.73
    return BranchPlanner(Chain(), BranchModel(weights, threshold), index, catalog,
                         lambda texts: np.ones((len(texts), 4), np.float32))


def test_the_second_topics_branch_is_attached_and_meets_the_answer():
    [[entry]] = planner(0.5).plan_batch([QUESTION])
    schema = entry.schema
    assert set(schema.constants()) == {"Logan Lerman", "Candice White"}
    assert entry.score == pytest.approx(0.9)
    relations = {t.relation for t in schema.triples}
    assert relations == {"film.film.starring", "film.film.other_crew", "film.crew_gig.crew_member"}


def test_a_branch_below_the_threshold_is_dropped_and_the_chain_stays():
    chosen = planner(0.9)
    [[entry]] = chosen.plan_batch([QUESTION])
    assert entry.schema.constants() == ["Logan Lerman"]
    assert chosen.stats["branches dropped, none fits (topic entity)"] == 1


def test_a_one_topic_question_is_planned_as_before():
    one = Question("q2", "what films star Logan Lerman", ("Logan Lerman",), ("Fury",))
    [[entry]] = planner(0.1).plan_batch([one])
    assert entry.schema == schema_from_path("Logan Lerman", MAIN, "Breadth")


def test_a_stored_model_round_trips_and_a_folder_without_one_keeps_the_base(tmp_path):
    model = BranchModel((0.5, -1.0, 2.0, 0.1, 0.0, 0.3, 0.0, 0.4, -0.6, 0.2, -0.2), 0.6, 0.7, {"note": 1})
    model.save(tmp_path / "branches")
    assert BranchModel.load(tmp_path / "branches") == model
    base = Chain()
    assert load_branch_planner(base, tmp_path / "elsewhere", None, None, None, None) is base


@pytest.mark.parametrize("seed", range(3))
def test_the_fitted_model_reads_raw_features_as_the_standardised_fit_does(seed):
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.normal(3, 2, (200, 3)), np.ones((200, 1))], axis=1)
    labels = (rows[:, 0] + rng.normal(0, 0.5, 200) > 3).astype(float)
    weights = _fit(rows, labels)
    p = 0.5 * (1 + np.tanh(0.5 * rows @ weights))
    assert np.mean((p > 0.5) == (labels > 0)) > 0.8  # it learned the rule, on the raw scale


def test_the_engine_traces_the_branch_tree_to_the_film_tied_to_both_topics(tmp_path):
    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.engine import Engine
    from stem_jax.plan.factory import PlannerSpec

    (tmp_path / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (tmp_path / "train.jsonl").write_text(json.dumps(
        {"id": "q1", "question": QUESTION.text, "topic_entities": list(QUESTION.topic_entities),
         "answers": ["Fury"]}) + "\n")
    [[entry]] = planner(0.5).plan_batch([QUESTION])
    plans = tmp_path / "plans.jsonl"
    plans.write_text(json.dumps({"id": "q1", "schemas": [{"triples": [[t.head, t.relation, t.tail]
                                                                      for t in entry.schema.triples],
                                                          "answer": entry.schema.answer}]}) + "\n")
    chain = tmp_path / "chain.jsonl"
    chain.write_text(json.dumps({"id": "q1", "paths": [["^film.film.starring"]]}) + "\n")
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    answers = {}
    for name, path in (("tree", plans), ("chain", chain)):
        engine = Engine.open("files", config=config, planner=PlannerSpec(plans_file=path), data_dir=tmp_path,
                             split="train", cache_dir=tmp_path / "cache")
        [found] = engine.retrieve(engine.dataset.questions)
        answers[name] = [a for a, _ in found.answers]
    assert answers["tree"] == ["Fury"]
    assert set(answers["chain"]) >= {"Fury", "Perks", "Yuma"}

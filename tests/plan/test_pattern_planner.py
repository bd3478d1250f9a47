"""The learned `pattern` planner: templates, masking, training on the demo KG, persistence."""

import numpy as np
import pytest

from stem_jax.data.demo_kg import load_demo
from stem_jax.data.splits import hash_split
from stem_jax.data.types import PathStep, Question
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import OraclePlanner, schema_from_path
from stem_jax.plan.pattern import (
    PatternPlanner,
    TrainConfig,
    build_training_set,
    train_pattern_planner,
)
from stem_jax.plan.question_text import mask_topics, unique_texts, word_dropout
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.plan.templates import Template, template_of


def test_template_abstracts_the_topic_and_renumbers_placeholders():
    schema = SchemaGraph((SchemaTriple("Kismet", "directed_by", "[ENT7]"), SchemaTriple("[ENT3]", "directed_by", "[ENT7]")),
                         answer="[ENT3]", strategy="Breadth")
    template = template_of(schema, ["Kismet"])
    assert template == Template((("{0}", "directed_by", "[ENT1]"), ("[ENT2]", "directed_by", "[ENT1]")), "[ENT2]")
    assert template.slots == 1
    again = template.instantiate(["Heat"], "Precision")
    assert again.describe() == "{(Heat, directed_by, [ENT1]); ([ENT2], directed_by, [ENT1])} -> [ENT2] [Precision]"
    assert template.instantiate([], "Precision") is None  # not enough question entities
    assert template_of(schema, ["kismet"]) == template  # case-insensitive topic match
    assert template_of(schema, ["Heat"]) is None  # names an entity the question does not


def test_template_json_round_trip():
    template = Template((("{0}", "starred_actors", "[ENT1]"),), "[ENT1]")
    assert Template.from_json(template.to_json()) == template


def test_mask_topics_longest_first_and_case_insensitive():
    text, found = mask_topics("who starred in the matrix reloaded and The Matrix", ["The Matrix", "The Matrix Reloaded"])
    assert text == "who starred in X and X" and found
    text, found = mask_topics("who directed it", ["Kismet"])
    assert text == "who directed it" and not found


def test_hash_split_is_deterministic_and_disjoint():
    questions = [Question(f"q{i}", "t", ("a",), ("b",)) for i in range(500)]
    train, val = hash_split(questions, 0.2)
    train2, val2 = hash_split(list(reversed(questions)), 0.2)
    assert {q.qid for q in val} == {q.qid for q in val2}
    assert not {q.qid for q in train} & {q.qid for q in val}
    assert 60 < len(val) < 140


def test_training_set_targets_and_unseen_templates():
    demo = load_demo(split="train")
    train = build_training_set(demo.questions[:50])
    assert train.targets.shape == (len(train.texts), len(train.templates))
    np.testing.assert_allclose(train.targets.sum(axis=1), 1.0)
    assert all("[" not in t for t in train.texts)
    assert all(q.topic_entities[0] not in t for q, t in zip(train.questions, train.texts, strict=True))
    # a question whose gold template is outside a fixed vocabulary keeps an all-zero row
    odd = Question("odd", "who wrote X", ("Kismet",), ("a",), gold_path=(PathStep("written_by", True),))
    fixed = build_training_set([odd], templates=[Template((("{0}", "directed_by", "[ENT1]"),), "[ENT1]")])
    assert fixed.targets.shape == (1, 1) and fixed.targets.sum() == 0


@pytest.fixture(scope="module")
def demo_planner():
    train, val = hash_split(load_demo(split="train").questions)
    planner = train_pattern_planner(train, val, HashingEncoder(), config=TrainConfig(epochs=100, hidden=128),
                                    log=lambda _: None)
    return planner


def test_head_learns_demo_templates(demo_planner):
    report = demo_planner.report
    # 18 templates (chance ~0.06); the hashing test encoder is cruder than MiniLM
    assert report["mlp"]["template"]["top1"] >= 0.9
    assert report["mlp"]["template"]["top4"] >= 0.9
    assert report["knn"]["template"]["top1"] >= 0.9
    # the strategy head beats "always Breadth" (it learns per-type answer multiplicity)
    assert report["mlp"]["strategy"]["accuracy"] > report["strategy_baselines"]["always_breadth"]


def test_beam_is_distinct_templates_instantiated_with_the_topic(demo_planner):
    test = load_demo(split="test").questions[:40]
    for question, beam in zip(test, demo_planner.plan_batch(test), strict=True):
        assert 1 <= len(beam) <= 4
        keys = {template_of(e.schema, list(question.topic_entities)).key for e in beam}
        assert len(keys) == len(beam)
        assert all(question.topic_entities[0] in e.schema.constants() for e in beam)
        assert [e.score for e in beam] == sorted((e.score for e in beam), reverse=True)


def test_plans_do_not_depend_on_the_entity(demo_planner):
    """The topic is masked: the same wording about two entities gets the same templates and scores."""
    a = Question("a", "who directed The Rimloumjaith", ("The Rimloumjaith",), ("x",))
    b = Question("b", "who directed Some Other Film", ("Some Other Film",), ("y", "z"))
    beam_a, beam_b = demo_planner.plan_batch([a, b])
    assert [e.score for e in beam_a] == [e.score for e in beam_b]
    assert [template_of(e.schema, ["The Rimloumjaith"]) for e in beam_a] == \
        [template_of(e.schema, ["Some Other Film"]) for e in beam_b]


def test_min_prob_and_beam_width(demo_planner):
    q = load_demo(split="test").questions[0]
    demo_planner.beam, demo_planner.min_prob = 2, 0.0
    assert len(demo_planner.plan(q)) == 2
    demo_planner.beam, demo_planner.min_prob = 4, 1.01
    assert len(demo_planner.plan(q)) == 1  # the top beam is always kept
    demo_planner.beam, demo_planner.min_prob = 4, 0.0


def test_save_load_round_trip(demo_planner, tmp_path):
    demo_planner.save(tmp_path / "p")
    loaded = PatternPlanner.load(tmp_path / "p", encoder=HashingEncoder())
    x = np.random.default_rng(0).normal(size=(5, 384)).astype(np.float32)
    for method in ("mlp", "knn"):
        a = demo_planner.score_embeddings(x, method)
        b = loaded.score_embeddings(x, method)
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-6)
    assert loaded.templates == demo_planner.templates
    assert loaded.report["templates"] == len(loaded.templates)


def test_load_refuses_another_encoder(demo_planner, tmp_path):
    from stem_jax.errors import StemError

    demo_planner.save(tmp_path / "p")
    loaded = PatternPlanner.load(tmp_path / "p", encoder=HashingEncoder(dim=64))
    with pytest.raises(StemError, match="trained on"):
        loaded.plan(load_demo(split="test").questions[0])
    with pytest.raises(StemError, match="train-planner"):
        PatternPlanner.load(tmp_path / "missing")


def test_oracle_templates_cover_each_demo_path():
    demo = load_demo(split="train")
    keys = {template_of(OraclePlanner().plan(q)[0], list(q.topic_entities)).key for q in demo.questions}
    paths = {q.gold_path for q in demo.questions}
    assert len(keys) == len(paths)
    assert template_of(schema_from_path("T", (PathStep("r", True),)), ["T"]).key == "({0}, r, [ENT1]) -> [ENT1]"


def test_unique_texts_and_word_dropout():
    distinct, inverse = unique_texts(["a", "b", "a", "c", "b"])
    assert distinct == ["a", "b", "c"] and inverse.tolist() == [0, 1, 0, 2, 1]
    rng = np.random.default_rng(0)
    variants = {word_dropout("which films did X direct in the end", rng, 0.5) for _ in range(50)}
    assert all("X" in v and len(v.split()) >= 3 for v in variants) and len(variants) > 5
    assert word_dropout("who X", rng, 1.0) == "who X"  # too short to drop anything


def test_training_uses_distinct_wordings(demo_planner):
    report = demo_planner.report
    assert report["distinct_wordings"] < report["train_questions"] / 10  # templated demo wording
    assert len(demo_planner.bank) == report["distinct_wordings"]
    assert report["augmented_wordings"] > report["distinct_wordings"]


def test_type_filter_demotes_templates_the_topic_cannot_start():
    demo = load_demo(split="test")
    index = build_index(demo.triples)
    film = next(q for q in demo.questions if q.gold_path[0].relation == "directed_by" and q.gold_path[0].forward)
    templates = (Template((("[ENT1]", "directed_by", "{0}"),), "[ENT1]"),  # films directed by a film: impossible
                 Template((("{0}", "directed_by", "[ENT1]"),), "[ENT1]"))
    planner = PatternPlanner(templates=templates, params={}, config=TrainConfig(), bank=np.zeros((1, 4), np.float16),
                             bank_targets=np.zeros((1, 2), np.float32), bank_breadth=np.zeros(1, np.float32),
                             prior_breadth=np.zeros(2, np.float32), encoder_name="x", index=index)
    assert planner.admissible(film).tolist() == [False, True]
    probs = np.asarray([[0.9, 0.1]], np.float32)
    beam = planner.beams_from_scores([film], probs, np.zeros_like(probs))[0]
    assert [template_of(e.schema, list(film.topic_entities)) for e in beam] == [templates[1], templates[0]]
    assert beam[0].score > 0.99
    planner.type_filter = False
    beam = planner.beams_from_scores([film], probs, np.zeros_like(probs))[0]
    assert template_of(beam[0].schema, list(film.topic_entities)) == templates[0]

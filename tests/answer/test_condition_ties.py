"""Ties to a question's other entities: the vectorised tie list matches a plain reference, and the scorer's
condition features tell apart the candidate that meets a second topic's condition from its siblings."""

import numpy as np
import pytest

from stem_jax.answer.features import CONSTRAINT_FEATURES, MENTION_FEATURES, NUMERIC, NUMERIC_V1
from stem_jax.answer.ties import TieTable, tied_nodes, tied_nodes_reference
from stem_jax.kg.index import build_index


@pytest.mark.parametrize("seed", range(8))
def test_tied_nodes_match_a_plain_reference_on_random_kgs(seed):
    rng = np.random.default_rng(seed)
    triples = [(f"e{rng.integers(15)}", f"r{rng.integers(4)}", f"e{rng.integers(15)}") for _ in range(40)]
    index = build_index(triples)
    mediators = rng.random(index.num_entities) < 0.4
    cap = int(rng.integers(2, 10))
    plain = index.triples.tolist()
    for entity in range(index.num_entities):
        nodes, relations = tied_nodes(index, entity, mediators, mediator_degree=cap)
        got = set(zip(nodes.tolist(), relations.tolist(), strict=True))
        assert len(got) == len(nodes)  # each (node, relation) once
        assert got == tied_nodes_reference(plain, entity, set(np.flatnonzero(mediators).tolist()), cap)


def test_a_film_is_tied_to_its_crew_member_through_a_mediator_and_not_its_sibling():
    triples = [("Fury", "film.film.starring", "Logan Lerman"), ("Perks", "film.film.starring", "Logan Lerman"),
               ("Fury", "film.film.other_crew", "m.0crew"), ("m.0crew", "film.crew_gig.crew_member", "Candice White")]
    index = build_index(triples)
    mediators = np.asarray([e.startswith("m.") for e in index.entities])
    ties = TieTable(index, mediators).of(index.entity_ids["Candice White"])
    assert index.entity_ids["Fury"] in ties
    assert index.entity_ids["Perks"] not in ties
    assert ties[index.entity_ids["Fury"]] == (index.relation_ids["film.crew_gig.crew_member"],)


def test_condition_features_come_after_the_older_ones_so_stored_scorers_read_the_same_columns():
    assert NUMERIC[:len(NUMERIC_V1)] == NUMERIC_V1
    start = NUMERIC.index(CONSTRAINT_FEATURES[0])
    assert NUMERIC[start:start + len(CONSTRAINT_FEATURES) + len(MENTION_FEATURES)] == CONSTRAINT_FEATURES + MENTION_FEATURES
    assert NUMERIC[-1] == "type_cos"  # added last: the condition features keep their columns


def test_extra_mentions_leave_out_the_topics_and_what_their_names_cover():
    from stem_jax.answer.features import CandidateFeaturizer, TypeVocabulary
    from stem_jax.data.types import Question

    triples = [("Crazy Crab", "sports.mascot.team", "San Francisco Giants"),
               ("San Francisco Giants", "sports.team.championships", "World Series"),
               ("San Francisco", "location.location.contains", "m.0x"), ("m.0x", "rel", "World Series")]
    index = build_index(triples)
    featurizer = CandidateFeaturizer(index, None, TypeVocabulary.of(index), lambda texts: np.ones((len(texts), 4)))
    question = Question("q", "Which World Series did the San Francisco Giants, whose mascot is Crazy Crab, win?",
                        ("Crazy Crab", "San Francisco Giants"), ("x",))
    assert featurizer.mentioned(question) == (index.entity_ids["World Series"],)
    assert not CandidateFeaturizer(index, None, TypeVocabulary.of(index), lambda t: np.ones((len(t), 4)),
                                   features=NUMERIC_V1 + CONSTRAINT_FEATURES).read_mentions


def _two_topic_kg(folder, n=48):
    """Each actor stars in three films; one of them (a different position each time) had the question's second
    topic, a crew member, through a crew mediator. The main path from the actor binds all three films alike."""
    import json

    triples, questions = [], []
    for i in range(n):
        actor, crew = f"Actor {i}", f"Crew {i}"
        films = [f"Film {i} {c}" for c in "abc"]
        gold = films[(i * 7) % 3]
        triples += [(film, "film.film.starring", actor) for film in films]
        triples += [(gold, "film.film.other_crew", f"m.0c{i}"), (f"m.0c{i}", "film.crew_gig.crew_member", crew)]
        triples += [(films[(i + 1) % 3], "film.film.genre", "Drama")]
        questions.append({"id": f"q{i}", "question": f"what film featuring {actor} had {crew} in its crew",
                          "topic_entities": [actor, crew], "answers": [gold], "gold_path": ["^film.film.starring"]})
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in triples))
    (folder / "train.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))


def test_the_scorer_learns_that_the_answer_meets_the_second_topics_condition(tmp_path):
    from stem_jax.answer.scorer import ScorerTraining
    from stem_jax.answer.training import train_kg_scorer
    from stem_jax.config import EncoderConfig, StemConfig, apply_overrides
    from stem_jax.engine import Engine

    _two_topic_kg(tmp_path)
    config = apply_overrides(StemConfig(encoder=EncoderConfig(name="hashing")), {"engine.answer_scorer": "off"})
    engine = Engine.open("files", config=config, planner="oracle", data_dir=tmp_path, split="train",
                         cache_dir=tmp_path / "cache")
    questions = engine.dataset.questions
    scorer = train_kg_scorer(engine.method("stem"), questions[:32], questions[32:], config=ScorerTraining(steps=200),
                             log=lambda _: None)
    assert scorer.report["held_out_tracer"]["hit_at_1"] < 0.7
    assert set(CONSTRAINT_FEATURES) <= set(scorer.features)
    assert scorer.report["condition_features"]["chosen"] != "without"
    assert scorer.report["held_out_scorer"]["hit_at_1"] == 1.0
    assert scorer.report["held_out_scorer"]["f1"] == 1.0


def _random_candidates(rng, q=24, m=5, with_conditions=False):
    from stem_jax.answer.features import Candidates

    numeric = rng.standard_normal((q, m, len(NUMERIC))).astype(np.float32)
    numeric[..., NUMERIC.index("constraints")] = float(with_conditions)
    return Candidates(entities=[np.arange(m)] * q, base=[np.linspace(1, 0.1, m)] * q, numeric=numeric,
                      qword=np.zeros(q, np.int32), types=np.zeros((q, m, 3), np.float32),
                      question=rng.standard_normal((q, 8)).astype(np.float32), mask=np.ones((q, m), bool))


def test_questions_without_other_topics_train_the_scorer_on_the_given_features_only():
    from stem_jax.answer.features import TypeVocabulary
    from stem_jax.answer.scorer import ScorerTraining, constrained_share, train_answer_scorer

    rng = np.random.default_rng(0)
    plain = _random_candidates(rng)
    assert constrained_share(plain) == 0.0
    gold = [{int(rng.integers(5))} for _ in range(24)]
    scorer = train_answer_scorer(plain, gold, plain, gold, TypeVocabulary(["a", "b", "c"]), encoder_name="x",
                                 config=ScorerTraining(steps=5), features=NUMERIC_V1, log=lambda _: None)
    assert scorer.features == NUMERIC_V1 and "condition_features" not in scorer.report
    assert constrained_share(_random_candidates(rng, with_conditions=True)) == 1.0

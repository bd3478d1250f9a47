"""The KG-constrained path planner learns which of a topic's own relation paths a wording asks for."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.config import EncoderConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.encoder import get_encoder
from stem_jax.kg.index import build_index
from stem_jax.plan.path_ranker import PathRanker, PathRankerConfig, path_targets, train_path_ranker
from stem_jax.plan.relation_paths import path_key
from stem_jax.plan.schema_paths import chain_path

WORDINGS = {
    ("directed_by",): ["who directed {}", "who was the director of {}", "{} was directed by whom"],
    ("written_by",): ["who wrote {}", "who was the writer of {}", "{} was written by whom"],
    ("starred_actors", "born_in"): ["where were the actors of {} born", "birthplace of the stars of {}"],
}


def _kg(n_films: int = 24):
    triples = []
    for i in range(n_films):
        film = f"Film {i}"
        triples += [(film, "directed_by", f"Director {i % 7}"), (film, "written_by", f"Writer {i % 5}"),
                    (film, "starred_actors", f"Actor {i % 9}"), (film, "has_genre", f"Genre {i % 3}")]
    for a in range(9):
        triples.append((f"Actor {a}", "born_in", f"City {a % 4}"))
    return triples


def _questions(index, films, offset):
    out = []
    for i in films:
        film = f"Film {i}"
        for relations, wordings in WORDINGS.items():
            path = tuple(PathStep(r) for r in relations)
            nodes = {index.entity_ids[film]}
            for step in path:
                nodes = {int(t) for h, r, t in index.triples.tolist() if h in nodes and index.relations[r] == step.relation}
            answers = tuple(sorted(index.entities[n] for n in nodes))
            text = wordings[(i + offset) % len(wordings)].format(film)
            out.append(Question(qid=f"{film}/{relations}", text=text, topic_entities=(film,), answers=answers,
                                gold_path=path))
    return out


@pytest.fixture(scope="module")
def trained():
    index = build_index(_kg())
    encoder = get_encoder(EncoderConfig(name="hashing"))
    train = _questions(index, range(0, 16), 0)
    val = _questions(index, range(16, 24), 1)
    ranker = train_path_ranker(train, val, index, encoder_name=encoder.name, embed=encoder.encode,
                               config=PathRankerConfig(epochs=60, hidden=32, projection=16), log=lambda _: None)
    ranker.encoder = encoder
    return ranker, index, val


def test_first_plan_is_the_asked_relation_on_unseen_topics(trained):
    ranker, index, val = trained
    beams = ranker.plan_batch(val)
    right = sum(chain_path(beam[0].schema) == q.gold_path for q, beam in zip(val, beams, strict=True))
    assert right / len(val) >= 0.8  # chance: about 1 in 10 candidates
    for beam in beams:  # a beam of real paths, most probable first, probabilities in (0, 1]
        probs = [entry.score for entry in beam]
        assert probs == sorted(probs, reverse=True) and 0 < probs[0] <= 1 and len(beam) == ranker.beam


def test_every_planned_path_leaves_the_topic_in_the_kg(trained):
    ranker, index, val = trained
    for question, beam in zip(val, ranker.plan_batch(val), strict=True):
        candidates = {path_key(c.path) for c in ranker.catalog.paths(index.entity_ids[question.topic_entities[0]])}
        assert all(path_key(chain_path(entry.schema)) in candidates for entry in beam)


def test_a_question_without_a_topic_gets_an_empty_beam(trained):
    ranker, _, _ = trained
    assert ranker.plan_batch([Question(qid="x", text="who directed it", topic_entities=(), answers=())]) == [[]]


def test_saved_ranker_plans_the_same(trained, tmp_path):
    ranker, index, val = trained
    ranker.save(tmp_path / "paths")
    loaded = PathRanker.load(tmp_path / "paths", index=index, encoder=ranker.encoder, beam=ranker.beam)
    for a, b in zip(ranker.plan_batch(val), loaded.plan_batch(val), strict=True):
        assert [e.schema for e in a] == [e.schema for e in b]
        np.testing.assert_allclose([e.score for e in a], [e.score for e in b], rtol=1e-5)


def test_targets_weigh_paths_by_the_f1_of_their_answers():
    index = build_index([("A", "r", "x"), ("A", "r", "y"), ("A", "s", "x")])
    q = Question(qid="q", text="?", topic_entities=("A",), answers=("x",))
    from stem_jax.plan.relation_paths import enumerate_paths

    cands = enumerate_paths(index, index.entity_ids["A"])
    target = dict(zip([path_key(c.path) for c in cands], path_targets(q, cands, index).tolist(), strict=True))
    assert target["s"] > target["r"] > 0 and abs(sum(target.values()) - 1) < 1e-6

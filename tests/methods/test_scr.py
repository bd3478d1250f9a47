"""SCR: neighbour lists, beam selection and search against plain references, training and resume."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hashing_tables import hashing_kg
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.config import ScrConfig, StemConfig
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.methods.base import MethodContext
from stem_jax.methods.scr.graph import build_neighbour_table
from stem_jax.methods.scr.model import ScrModel, ScrSpec
from stem_jax.methods.scr.search import (
    SearchTables,
    aggregate_answers,
    beam_search,
    beam_search_reference,
    select_beams,
    select_beams_reference,
)
from stem_jax.methods.scr.train import init_params, prepare_data, train_scr

# ----- a hand-made film KG with questions whose answers are known --------------------------------

MOVIES = {  # movie: (director, genre, actors)
    "Red Harbor": ("Ada Voss", "Noir", ("Ben Oak", "Cleo Fern")),
    "Blue Canyon": ("Ada Voss", "Western", ("Cleo Fern",)),
    "Green Mile Road": ("Hugo Lind", "Comedy", ("Dora Quill", "Ben Oak")),
    "Silver Night": ("Hugo Lind", "Noir", ("Evan Pike",)),
    "Golden Hour": ("Ivy Marsh", "Comedy", ("Dora Quill",)),
}


def film_kg() -> tuple[list[tuple[str, str, str]], list[Question]]:
    triples = []
    for movie, (director, genre, actors) in MOVIES.items():
        triples += [(movie, "directed_by", director), (movie, "has_genre", genre)]
        triples += [(movie, "starred_actors", a) for a in actors]
    questions = []
    for movie, (director, genre, actors) in MOVIES.items():
        questions.append(Question(f"d/{movie}", f"who directed {movie}", (movie,), (director,), 1,
                                  gold_path=(PathStep("directed_by"),)))
        questions.append(Question(f"g/{movie}", f"what genre is {movie}", (movie,), (genre,), 1,
                                  gold_path=(PathStep("has_genre"),)))
        directors_of_cast = sorted({MOVIES[m][0] for m, (_, _, cast) in MOVIES.items() if set(cast) & set(actors)})
        questions.append(Question(f"dc/{movie}", f"who directed films sharing actors with {movie}", (movie,),
                                  tuple(directors_of_cast), 3,
                                  gold_path=(PathStep("starred_actors"), PathStep("starred_actors", False),
                                             PathStep("directed_by"))))
    return triples, questions


@pytest.fixture(scope="module")
def film():
    return hashing_kg(*film_kg())


SMALL = ScrConfig(layers=2, dim=16, head_layers=1, tau=0.1, beam=4, threshold=0.0, max_steps=4, neighbours=8,
                  batch_questions=8, lr=1e-2, steps=120, train_batch=8, eval_every=60)


# ----- neighbour lists ----------------------------------------------------------------------------

def test_neighbour_lists_are_deduplicated_directed_and_capped(film):
    index = film.index
    table = build_neighbour_table(index, cap=64)
    r = index.num_relations
    movie, director = index.entity_ids["Red Harbor"], index.entity_ids["Ada Voss"]
    ents, rels, tris = table.neighbours(movie)
    assert sorted(index.entities[e] for e in ents) == ["Ada Voss", "Ben Oak", "Cleo Fern", "Noir"]
    assert rels[list(ents).index(director)] == index.relation_ids["directed_by"]
    back_ents, back_rels, _ = table.neighbours(director)
    assert rels.dtype == np.int32 and set(back_rels) == {index.relation_ids["directed_by"] + r}
    for e, t in zip(ents, tris, strict=True):
        assert {int(index.triples[t, 0]), int(index.triples[t, 2])} == {movie, int(e)}
    capped = build_neighbour_table(index, cap=2, seed=3)
    assert capped.capped == int((np.diff(table.offsets) > 2).sum()) and np.diff(capped.offsets).max() == 2
    again = build_neighbour_table(index, cap=2, seed=3)
    assert np.array_equal(capped.entity, again.entity)  # the hub sample is deterministic
    cand_e, cand_r, cand_t, valid = table.candidates(np.asarray([[movie, -1]]))
    assert cand_e.shape[-1] == 16 and cand_e[0, 0, 0] == movie and cand_r[0, 0, 0] == -1
    assert valid[0, 0].sum() == 1 + len(ents) and not valid[0, 1].any()


# ----- beam selection against a plain reference ---------------------------------------------------

_select = jax.jit(select_beams, static_argnums=3)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(3, 4, 5, 4), (2, 1, 3, 2), (1, 1, 1, 2)]), st.integers(0, 2**31 - 1),
       st.floats(0.0, 0.9), st.floats(0.0, 0.9))
def test_select_beams_matches_reference(shape, seed, empty_rate, done_rate):
    # Few fixed shapes (each one compiles once); (1, 1, 1, 2) has fewer hypotheses than slots.
    batch, beams, width, keep = shape
    rng = np.random.default_rng(seed)
    logp = np.where(rng.random((batch, beams)) < empty_rate, -np.inf,
                    -rng.random((batch, beams)) * 3).astype(np.float32)
    done = rng.random((batch, beams)) < done_rate
    cand = np.where(rng.random((batch, beams, width)) < empty_rate, -np.inf,
                    -rng.random((batch, beams, width)) * 3).astype(np.float32)
    parent, choice, values = jax.device_get(_select(jnp.asarray(logp), jnp.asarray(done), jnp.asarray(cand), keep))
    expected = select_beams_reference(logp, done, cand, keep)
    for b in range(batch):
        got = [(int(parent[b, i]), int(choice[b, i]), float(values[b, i])) for i in range(keep)
               if np.isfinite(values[b, i])]
        assert [(p, c) for p, c, _ in got] == [(p, c) for p, c, _ in expected[b]]
        np.testing.assert_allclose([v for *_, v in got], [v for *_, v in expected[b]], rtol=1e-6)


# ----- the jitted batched search equals the per-question reference --------------------------------

@pytest.mark.parametrize(("threshold", "min_hops"), [(0.0, 0), (0.02, 1)])
def test_batched_search_matches_per_question_reference(film, threshold, min_hops):
    index = film.index
    spec = ScrSpec(layers=2, dim=16, head_layers=1, text_dim=film.encoder.dim, num_relations=index.num_relations,
                   max_steps=3, tau=0.2, neighbours=8)
    model = ScrModel(spec)
    params = init_params(spec, jax.random.key(7))
    rng = np.random.default_rng(0)
    tables = SearchTables(jnp.asarray(rng.normal(size=(index.num_entities, spec.dim)), jnp.float32),
                          jnp.asarray(film.embeddings.entities.array), jnp.asarray(film.embeddings.relations.array))
    neighbours = build_neighbour_table(index, spec.neighbours)
    topics = np.asarray([index.entity_ids[m] for m in MOVIES] + [index.entity_ids["Ada Voss"], -1])
    questions = rng.normal(size=(topics.size, film.encoder.dim)).astype(np.float32)
    batched, _ = beam_search(model, params, tables, neighbours, questions, topics, beam=3, threshold=threshold,
                             max_steps=3, min_hops=min_hops)
    assert batched[-1] == []  # a padding row finds nothing
    for row, topic in enumerate(topics[:-1]):
        reference = beam_search_reference(model, params, tables, neighbours, questions[row], int(topic), beam=3,
                                          threshold=threshold, max_steps=3, min_hops=min_hops)
        assert [(h.entities, h.relations, h.triples) for h in batched[row]] == \
               [(h.entities, h.relations, h.triples) for h in reference]
        np.testing.assert_allclose([h.prob for h in batched[row]], [h.prob for h in reference], rtol=1e-4)
        assert all(h.prob >= threshold for h in batched[row])
        assert all(len(h.relations) >= min_hops for h in batched[row])


def test_answers_sum_path_probabilities():
    from stem_jax.methods.scr.search import Hypothesis

    hyps = [Hypothesis([0, 3], [1], [5], 0.3, True), Hypothesis([0, 4], [1], [6], 0.25, True),
            Hypothesis([0, 2, 4], [1, 2], [7, 8], 0.1, True)]
    assert aggregate_answers(hyps) == [(4, pytest.approx(0.35)), (3, 0.3)]


# ----- training: a tiny model learns to walk the known paths; resume is exact ---------------------

def _data(film, config):
    return prepare_data(film.questions, film.questions[:4], film.index, film.embeddings, film.encoder, config)


@pytest.mark.parametrize("relation_aware", [False, True], ids=["scr", "scr+rel"])
def test_trained_model_walks_the_gold_path(film, tmp_path, relation_aware):
    config = dataclasses.replace(SMALL, relation_aware=relation_aware)
    summary = train_scr(_data(film, config), config, tmp_path / "run", plot=False, log=lambda _: None)
    assert summary["final"]["loss"] < 0.5
    stem = StemConfig(scr=config)
    dataset = Dataset(name="film", questions=film.questions, triples=film.triples)
    context = MethodContext(dataset, film.index, film.embeddings, film.encoder, stem,
                            options={"checkpoint": tmp_path / "run"})
    from stem_jax.methods.scr import build

    method = build(context)
    assert method.name == ("scr+rel" if relation_aware else "scr")
    retrievals = method.retrieve(film.questions)
    one_hop = [(q, r) for q, r in zip(film.questions, retrievals, strict=True) if q.hops == 1]
    top1 = [film.index.entities[r.answers[0][0]] in q.answers for q, r in one_hop if r.answers]
    assert len(top1) == len(one_hop) and np.mean(top1) >= 0.9
    # Evidence is the triples of the kept paths, and every path starts on the topic.
    for q, r in zip(film.questions, retrievals, strict=True):
        assert all(chain.startswith(q.topic_entities[0]) for chain in r.chains)
        assert all(film.index.num_triples > t >= 0 for t in r.evidence)
    three_hop = [(q, r) for q, r in zip(film.questions, retrievals, strict=True) if q.hops == 3]
    hit = [any(film.index.entities[e] in q.answers for e, _ in r.answers) for q, r in three_hop]
    assert np.mean(hit) >= 0.6


def test_resumed_training_gives_identical_parameters(film, tmp_path):
    config = dataclasses.replace(SMALL, eval_every=3)  # same trainer as above: compiled once per process
    data = _data(film, config)
    straight = train_scr(data, config, tmp_path / "straight", stop_at=6, plot=False, log=lambda _: None)
    train_scr(data, config, tmp_path / "resumed", stop_at=3, plot=False, log=lambda _: None)
    resumed = train_scr(data, config, tmp_path / "resumed", stop_at=6, plot=False, log=lambda _: None)
    assert straight["params_sha"] == resumed["params_sha"]
    for a, b in zip(jax.tree.leaves(straight["params"]), jax.tree.leaves(resumed["params"]), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))

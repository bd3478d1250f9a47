"""The batched path planner (array enumeration, one scoring call per batch) matches its plain references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.config import EncoderConfig
from stem_jax.data.types import Question
from stem_jax.encoder import get_encoder
from stem_jax.kg.index import build_index
from stem_jax.plan.path_ranker import PathRanker, PathRankerConfig, init_params, words_of
from stem_jax.plan.relation_paths import PathCatalog, enumerate_paths, enumerate_paths_reference, path_key

RELATIONS = ["film.directed_by", "film.written_by", "people.place_of_birth", "sports.team_s", "r", "s"]
NODES = "abcdefgh"


def _same(got, want) -> bool:
    return [(path_key(c.path), c.ends.tolist(), c.ends.dtype) for c in got] == \
        [(path_key(c.path), c.ends.tolist(), c.ends.dtype) for c in want]


triple_lists = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(RELATIONS), st.sampled_from(NODES)),
                        min_size=1, max_size=30)


@settings(max_examples=80, deadline=None)
@given(triple_lists, st.sampled_from("abc"), st.sets(st.sampled_from("defgh"), max_size=3),
       st.integers(1, 3), st.integers(1, 4), st.integers(1, 12), st.integers(1, 40))
def test_array_enumeration_equals_the_node_by_node_walk(triples, topic, mediators, hops, fan_cap, hub_cap, max_paths):
    index = build_index(list(dict.fromkeys(triples)))
    if topic not in index.entity_ids:
        return
    mask = np.asarray([e in mediators for e in index.entities])
    options = dict(max_hops=hops, fan_cap=fan_cap, hub_cap=hub_cap, mediators=mask, max_paths=max_paths)
    t = index.entity_ids[topic]
    assert _same(enumerate_paths(index, t, **options), enumerate_paths_reference(index, t, **options))


def test_the_catalog_keeps_a_bounded_number_of_paths_and_reenumerates_dropped_topics():
    rng = np.random.default_rng(0)
    triples = [(f"e{rng.integers(40)}", RELATIONS[rng.integers(len(RELATIONS))], f"e{rng.integers(40)}")
               for _ in range(300)]
    index = build_index(triples)
    catalog = PathCatalog(index, cached_paths=50)
    first = {t: [path_key(c.path) for c in catalog.paths(t)] for t in range(index.num_entities)}
    assert catalog._held <= max(50, max(len(v) for v in first.values()))
    assert len(catalog) < index.num_entities
    walked = catalog.enumerated
    again = {t: [path_key(c.path) for c in catalog.paths(t)] for t in range(index.num_entities)}
    assert again == first and catalog.enumerated > walked
    recent = index.num_entities - 1
    walked = catalog.enumerated
    catalog.paths(recent)  # the most recently asked topic is still held
    assert catalog.enumerated == walked
    shared = catalog.paths_of([recent, recent, recent])
    assert list(shared) == [recent] and catalog.enumerated == walked


def _ranker(seed: int, n_entities: int = 30, n_triples: int = 160, end_names: int = 0) -> tuple[PathRanker, list[str]]:
    rng = np.random.default_rng(seed)
    triples = [(f"e{rng.integers(n_entities)}", RELATIONS[rng.integers(len(RELATIONS))],
                f"e{rng.integers(n_entities)}") for _ in range(n_triples)]
    index = build_index(triples)
    encoder = get_encoder(EncoderConfig(name="hashing"))
    config = PathRankerConfig(hidden=16, projection=8, end_names=end_names)
    d = int(np.asarray(encoder.encode(["x"])).shape[1])
    params = {k: (v + rng.standard_normal(v.shape).astype(np.float32) * 0.3).astype(np.float32)
              for k, v in init_params(d, config).items()}
    ranker = PathRanker(params=params, config=config, encoder_name=encoder.name, index=index, encoder=encoder,
                        temperature=float(rng.choice([0.7, 1.0, 1.5])))
    return ranker, list(index.entities)


words = st.lists(st.sampled_from(["who", "directed", "written", "by", "place", "birth", "team", "teams", "of", "x"]),
                 max_size=6)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 40), words), min_size=1, max_size=12),
       st.sampled_from([0, 2]))
def test_one_scoring_call_per_batch_gives_the_per_question_probabilities(seed, asked, end_names):
    ranker, entities = _ranker(seed, end_names=end_names)
    questions = [Question(qid=str(i), text=" ".join([*w, entities[t % len(entities)]]),
                          topic_entities=(entities[t % len(entities)],) if t < 38 else (), answers=())
                 for i, (t, w) in enumerate(asked)]
    got, want = ranker.score(questions), ranker.score_reference(questions)
    for (cands, probs, breadth), (cands_r, probs_r, breadth_r) in zip(got, want, strict=True):
        assert [path_key(c.path) for c in cands] == [path_key(c.path) for c in cands_r]
        np.testing.assert_allclose(probs, probs_r, rtol=1e-5, atol=1e-7)
        assert breadth == pytest.approx(breadth_r, abs=1e-6)


def test_the_batch_overlap_table_is_the_per_relation_overlap():
    ranker, _ = _ranker(1)
    texts = ["who directed it", "place of birth of the teams", "", "written by whom, directed by whom"]
    table = ranker.overlap_table([Question(qid=str(i), text=t, topic_entities=(), answers=()) for i, t in enumerate(texts)])
    for qi, text in enumerate(texts):
        want = [np.float32(ranker._overlap(r, words_of(text))) for r in ranker.index.relations] + [np.float32(0)]
        assert table[qi].tolist() == want


def test_a_batch_larger_than_one_call_is_scored_in_chunks(monkeypatch):
    import stem_jax.plan.path_ranker as module

    ranker, entities = _ranker(2)
    questions = [Question(qid=str(i), text="who directed", topic_entities=(entities[i % len(entities)],), answers=())
                 for i in range(20)]
    whole = ranker.score(questions)
    monkeypatch.setattr(module, "MAX_ROWS", 8)
    chunked = ranker.score(questions)
    for (_, a, ba), (_, b, bb) in zip(whole, chunked, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        assert ba == pytest.approx(bb, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_logits_from_a_relation_table_projected_once_equal_the_per_call_projection(seed):
    import jax

    from stem_jax.plan.path_ranker import N_EXTRA, N_STEP, _logits

    rng = np.random.default_rng(seed)
    config = PathRankerConfig()
    d, relations, candidates = 16, 9, 12
    params = {k: np.asarray(v) for k, v in init_params(d, config).items()}
    params = {k: v + rng.normal(0, 0.1, v.shape).astype(np.float32) for k, v in params.items()}
    table = rng.normal(0, 1, (relations, d)).astype(np.float32)
    q = rng.normal(0, 1, (candidates, d)).astype(np.float32)
    rel = rng.integers(0, relations, (candidates, 1, config.max_hops)).astype(np.int32)
    steps = rng.integers(0, 2, (candidates, 1, config.max_hops, N_STEP)).astype(np.float32)
    extra = rng.normal(0, 1, (candidates, 1, N_EXTRA)).astype(np.float32)
    each_call = jax.jit(_logits)(params, table, q, rel, steps, extra)
    projected = jax.jit(lambda t, w: t @ w)(table, params["wr"])
    once = jax.jit(_logits)(params, table, q, rel, steps, extra, projected)
    np.testing.assert_allclose(np.asarray(once), np.asarray(each_call), rtol=1e-6, atol=1e-6)

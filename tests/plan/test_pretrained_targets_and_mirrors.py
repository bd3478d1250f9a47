"""The pretrained path planner's training credits the shortest right path, and skips relations stored twice."""

from __future__ import annotations

import dataclasses

import numpy as np

from stem_jax.data.types import Question
from stem_jax.kg.index import build_index
from stem_jax.plan import pretrained
from stem_jax.plan.path_ranker import PathRankerConfig, path_targets
from stem_jax.plan.relation_paths import enumerate_paths, mirrored_relations, path_key


def _club_kg(mirrored: bool = False):
    triples = [(f"P{i}", "plays_in_club", f"C{i % 2}") for i in range(4)]
    triples += [("C0", "is_in_country", "Spain"), ("C1", "is_in_country", "Italy")]
    if mirrored:
        triples += [(t, f"{r}_inverse", h) for h, r, t in triples]
    return triples


def _targets(shortest: bool) -> dict[str, float]:
    index = build_index(_club_kg())
    q = Question(qid="q", text="which club does P0 play for", topic_entities=("P0",), answers=("C0",))
    cands = enumerate_paths(index, index.entity_ids["P0"], max_hops=3)
    return dict(zip([path_key(c.path) for c in cands], path_targets(q, cands, index, shortest=shortest).tolist(),
                    strict=True))


def test_an_out_and_back_walk_to_the_same_answers_shares_the_credit_by_default():
    target = _targets(shortest=False)
    assert target["plays_in_club"] > 0 and target["plays_in_club / ^plays_in_club / plays_in_club"] > 0


def test_shortest_targets_credit_only_the_shortest_path_that_reaches_the_answers_as_well():
    target = _targets(shortest=True)
    assert target["plays_in_club"] == 1.0
    assert all(v == 0 for k, v in target.items() if k != "plays_in_club")


def test_a_longer_path_keeps_its_credit_when_it_reaches_the_answers_better():
    index = build_index([("A", "r", "x"), ("A", "r", "y"), ("x", "s", "z")])
    q = Question(qid="q", text="?", topic_entities=("A",), answers=("z",))
    cands = enumerate_paths(index, index.entity_ids["A"], max_hops=2)
    target = dict(zip([path_key(c.path) for c in cands], path_targets(q, cands, index, shortest=True).tolist(),
                      strict=True))
    assert target["r / s"] == 1.0


def test_mirrored_relations_name_each_reverse_copy_and_keep_the_shorter_name():
    index = build_index(_club_kg(mirrored=True))
    assert mirrored_relations(index) == {"plays_in_club_inverse": "plays_in_club",
                                         "is_in_country_inverse": "is_in_country"}


def test_a_relation_whose_reverse_differs_by_one_triple_is_not_a_mirror():
    triples = _club_kg(mirrored=True)
    triples.remove(("C0", "plays_in_club_inverse", "P0"))
    assert mirrored_relations(build_index(triples)) == {"is_in_country_inverse": "is_in_country"}


def test_a_symmetric_relation_is_not_its_own_mirror():
    assert mirrored_relations(build_index([("a", "knows", "b"), ("b", "knows", "a")])) == {}


def test_the_pretrained_catalog_lists_each_walk_once_under_the_kept_name():
    index = build_index(_club_kg(mirrored=True))
    config = dataclasses.replace(PathRankerConfig(max_hops=2), skip_mirrors=True)
    keys = {path_key(c.path) for c in pretrained.make_catalog(index, None, config).paths(index.entity_ids["C0"])}
    assert "^plays_in_club" in keys and "plays_in_club_inverse" not in keys
    assert not any("inverse" in k for k in keys)
    plain = pretrained.make_catalog(index, None, PathRankerConfig(max_hops=2)).paths(index.entity_ids["C0"])
    assert any("inverse" in path_key(c.path) for c in plain)  # off by default: the trained planners' catalogs


def test_the_skipped_catalog_reaches_the_same_end_sets():
    index = build_index(_club_kg(mirrored=True))
    config = dataclasses.replace(PathRankerConfig(max_hops=2), skip_mirrors=True)
    topic = index.entity_ids["P1"]
    skipped = {tuple(c.ends.tolist()) for c in pretrained.make_catalog(index, None, config).paths(topic)}
    every = {tuple(c.ends.tolist()) for c in pretrained.make_catalog(index, None, PathRankerConfig(max_hops=2)).paths(topic)}
    assert skipped == every and np.all([len(e) for e in skipped])


def test_with_end_names_each_orientation_of_a_relation_has_its_own_row_naming_what_it_reaches():
    from stem_jax.config import EncoderConfig
    from stem_jax.encoder import get_encoder
    from stem_jax.plan.path_ranker import PathRanker, init_params

    index = build_index(_club_kg() + [("m.0abc", "plays_in_club", "C0")])
    encoder = get_encoder(EncoderConfig(name="hashing"))
    config = PathRankerConfig(end_names=2)
    ranker = PathRanker(params=init_params(int(np.asarray(encoder.encode(["x"])).shape[1]), config), config=config,
                        encoder_name=encoder.name, index=index, encoder=encoder)
    texts = ranker.step_texts()
    club = index.relation_ids["plays_in_club"]
    assert texts[2 * club + 1] == "plays in club: C0, C1"  # forward: the clubs, most frequent first
    assert texts[2 * club] == "plays in club: P0, P1"  # backward: the players (an opaque id left out)
    r = index.num_relations
    table = ranker.relation_table()
    assert table.shape[0] == 2 * r + 1 and not table[-1].any()
    assert ranker.step_id("plays_in_club", True) == 2 * club + 1 and ranker.no_step == 2 * r
    assert ranker.relation_of_row(np.asarray([2 * club, 2 * club + 1, 2 * r])).tolist() == [club, club, r]
    # each row mixes the relation's own text with the names it reaches: unit length, the two orientations differ
    np.testing.assert_allclose(np.linalg.norm(table[:-1], axis=1), 1.0, rtol=1e-5)
    assert not np.allclose(table[2 * club], table[2 * club + 1])

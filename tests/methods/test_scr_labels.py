"""SCR labels and the relation-aware variant on hand-made graphs: a pair joined by two relations keeps
both edges (GNN and positives), breadth-first walks are deterministic and every dropped question is
counted, and scr+rel's candidate score depends on the linking relation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hashing_tables import hashing_kg

from stem_jax.config import ScrConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.methods.scr.graph import build_neighbour_table
from stem_jax.methods.scr.model import ScrModel, ScrSpec
from stem_jax.methods.scr.supervision import GoldSteps, sample_walk, step_items, walk_layers
from stem_jax.methods.scr.train import init_params, prepare_data, train_scr

TRIPLES = [
    ("Dune", "directed_by", "Lynch"),  # Lynch directed *and* wrote Dune: one pair, two relations
    ("Dune", "written_by", "Lynch"),
    ("Dune", "written_by", "Herbert"),
    ("Dune", "starred_actors", "MacLachlan"),
    ("Blue Velvet", "directed_by", "Lynch"),
    ("Blue Velvet", "starred_actors", "MacLachlan"),
    ("Twin Peaks", "starred_actors", "MacLachlan"),
    ("Twin Peaks", "directed_by", "Frost"),
]


def kg():
    built = hashing_kg(TRIPLES)
    return built.index, built.encoder, built.embeddings


def ids(index, *names):
    return [index.entity_ids[n] for n in names]


def test_a_pair_with_two_relations_keeps_both_edges_and_both_labels():
    index, _, _ = kg()
    dune, lynch = ids(index, "Dune", "Lynch")
    directed, written = index.relation_ids["directed_by"], index.relation_ids["written_by"]
    table = build_neighbour_table(index, cap=64)
    ents, rels, _ = table.neighbours(dune)
    assert list(ents).count(lynch) == 1  # faithful SCR scores entities: Lynch is one candidate
    edge_e, edge_r, _ = table.edges(dune)
    assert sorted(int(r) for e, r in zip(edge_e, edge_r, strict=True) if e == lynch) == sorted([directed, written])
    senders, receivers, relations = table.gnn_edges()
    into_dune = {(int(s), int(r)) for s, rcv, r in zip(senders, receivers, relations, strict=True) if rcv == dune}
    assert {(lynch, directed), (lynch, written)} <= into_dune  # the GNN passes a message along each relation
    # "who wrote Dune": Lynch is listed under directed_by (lowest triple id) and is still a positive.
    gold = GoldSteps(0, dune, (written,), frozenset(ids(index, "Lynch", "Herbert")))
    layers = walk_layers(gold, table)
    items = step_items([gold], table, np.random.default_rng(0), max_steps=3, rows=4, width=table.max_width)
    positive = {int(e) for e, p in zip(items.cand_entities[0], items.positive[0], strict=True) if p}
    assert positive == set(ids(index, "Lynch", "Herbert")) and layers[1] == positive
    assert items.positive[1, 0] and items.valid[:2].all() and not items.valid[2:].any()
    # Relation-aware lists hold every edge; only the written_by edges are positives.
    per_edge = build_neighbour_table(index, cap=64, per_edge=True)
    items = step_items([gold], per_edge, np.random.default_rng(0), max_steps=3, rows=2, width=per_edge.max_width)
    pos = [(int(e), int(r)) for e, r, p in zip(items.cand_entities[0], items.cand_relations[0], items.positive[0],
                                               strict=True) if p]
    assert sorted(pos) == sorted([(lynch, written), (index.entity_ids["Herbert"], written)])


def test_breadth_first_walks_are_deterministic_and_end_on_answers():
    index, _, _ = kg()
    table = build_neighbour_table(index, cap=64)
    starred = index.relation_ids["starred_actors"]
    r = index.num_relations
    dune = index.entity_ids["Dune"]
    # Dune -> actor -> other films -> director: the answers are Lynch (Blue Velvet) and Frost (Twin Peaks).
    gold = GoldSteps(0, dune, (starred, starred + r, index.relation_ids["directed_by"]),
                     frozenset(ids(index, "Frost")))
    layers = walk_layers(gold, table)
    assert layers[2] == frozenset(ids(index, "Twin Peaks"))  # Blue Velvet leads to Lynch only: pruned
    walks = {tuple(sample_walk(gold, layers, table, np.random.default_rng(seed))) for seed in range(5)}
    assert walks == {tuple(ids(index, "Dune", "MacLachlan", "Twin Peaks", "Frost"))}
    unreachable = GoldSteps(0, dune, (starred, starred + r, index.relation_ids["directed_by"]),
                            frozenset(ids(index, "Herbert")))
    assert walk_layers(unreachable, table) is None


def test_dropped_questions_are_counted_not_hidden(tmp_path):
    index, encoder, embeddings = kg()
    good = [Question(f"q{i}", f"who wrote {m}", (m,), ("Lynch",), 1, gold_path=(PathStep("written_by"),))
            for i, m in enumerate(["Dune"] * 4)]
    bad = [Question("x1", "who wrote Twin Peaks", ("Twin Peaks",), ("Frost",), 1,
                    gold_path=(PathStep("written_by"),)),
           Question("x2", "who is Nobody", ("Nobody",), ("Lynch",), 1, gold_path=(PathStep("written_by"),))]
    config = ScrConfig(layers=1, dim=8, head_layers=1, max_steps=3, neighbours=8, steps=2, train_batch=4,
                       eval_every=1)
    data = prepare_data(good + bad, good[:1], index, embeddings, encoder, config)
    assert data.skipped == {"gold relations reach no answer over the capped neighbour lists": 1,
                            "topic or relation not in the KG": 1}
    summary = train_scr(data, config, tmp_path / "run", plot=False, log=lambda _: None)
    assert summary["skipped"] == dict(data.skipped) and summary["usable_train"] == 4


def test_relation_aware_score_separates_relations_of_one_pair():
    index, encoder, embeddings = kg()
    dune, lynch = ids(index, "Dune", "Lynch")
    directed, written = index.relation_ids["directed_by"], index.relation_ids["written_by"]
    features = jnp.asarray(np.random.default_rng(0).normal(size=(index.num_entities, 8)), jnp.float32)
    rel_text = jnp.asarray(embeddings.relations.array, jnp.float32)
    cand_e = jnp.asarray([[dune, lynch, lynch]])
    cand_r = jnp.asarray([[-1, directed, written]])
    for aware in (False, True):
        spec = ScrSpec(layers=1, dim=8, head_layers=1, text_dim=encoder.dim, num_relations=index.num_relations,
                       max_steps=3, tau=0.1, neighbours=8, relation_aware=aware)
        params = init_params(spec, jax.random.key(0))
        h = np.asarray(ScrModel(spec).apply(params, features, rel_text, cand_e, cand_r, method=ScrModel.candidates))
        if aware:
            assert not np.allclose(h[0, 1], h[0, 2])  # the linking relation changes the candidate's feature
            assert not np.allclose(h[0, 0], np.asarray(features[dune]))  # the stop slot has its own vector
        else:
            np.testing.assert_array_equal(h[0, 1], h[0, 2])  # faithful SCR: a pair is one candidate feature

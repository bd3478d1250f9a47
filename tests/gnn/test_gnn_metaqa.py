"""Triple-GNN data on real MetaQA: the dev hash split, labelled subgraph examples and walks on the KB."""

from __future__ import annotations

import types

import numpy as np
import pytest

from stem_jax.config import SubgraphConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.gnn.data import ExampleFactory, gold_entities, question_examples, schema_depth, split_by_qid
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.walks import random_walk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metaqa(shared_data):
    dev = load_dataset(DatasetSpec(name="metaqa", split="dev", data_dir=shared_data))
    test = load_dataset(DatasetSpec(name="metaqa", split="test", data_dir=shared_data))
    index = build_index(dev.triples)
    encoder = HashingEncoder(dim=16)
    rows = lambda n: types.SimpleNamespace(array=np.ones((n, 16), np.float16))  # noqa: E731 (features are not under test)
    embeddings = types.SimpleNamespace(entities=rows(index.num_entities), relations=rows(index.num_relations))
    factory = ExampleFactory(index, SchemaFeaturizer(index, embeddings, encoder), SubgraphConfig())
    return dev, test, index, factory


def test_training_questions_come_from_dev_only(metaqa):
    dev, test, _, _ = metaqa
    train, val = split_by_qid(dev.questions, 10)
    assert 0.08 < len(val) / len(dev.questions) < 0.12
    assert all("/dev/" in q.qid for q in train + val)
    assert {q.qid for q in train}.isdisjoint(q.qid for q in test.questions)


def test_labelled_examples_cover_gold_evidence(metaqa):
    dev, _, index, factory = metaqa
    by_hop = {h: [q for q in dev.questions if q.hops == h][:40:8] for h in (1, 2, 3)}
    for hops, questions in by_hop.items():
        pairs, skipped = question_examples(factory, questions, OraclePlanner().plan)
        assert not skipped
        for question, schema in pairs:
            assert schema_depth(schema, question.topic_entities[0]) == hops
            example = factory.for_plan(question, schema, labels=True)
            gold = gold_entities(question, index)
            assert example.labels.sum() + example.positives_outside == len(gold)
            assert example.positives_outside == 0  # the hop-radius subgraph holds the whole gold path
            assert np.all(np.diff(example.receivers) >= 0) and example.n_edge < 2**18


def test_walks_on_the_metaqa_kb(metaqa):
    _, _, index, factory = metaqa
    rng = np.random.default_rng(0)
    for i in range(20):
        walk = random_walk(index, rng, max_hops=3, hub_cap=2000)
        assert walk is not None and len(walk.schema.triples) == len(walk.triples)
        example = factory.from_walk(np.random.default_rng(i), 3, key=f"walk/{i}")
        assert example.positives_outside == 0 and example.labels.sum() >= 2

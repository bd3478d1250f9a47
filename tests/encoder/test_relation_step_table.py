"""The KG's relation-step table (placeholder-only schema-step texts): the texts it lists are the planners', its
vectors are the encoder's, it is bounded, and a new KG or encoder gets its own; the STEM holder reads it online."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.config import StemConfig
from stem_jax.encoder.hashing import HashingEncoder
from stem_jax.kg.index import build_index
from stem_jax.kg.relation_steps import (
    DEPTH,
    count_relation_step_texts,
    open_relation_step_table,
    relation_step_texts,
)
from stem_jax.plan.oracle import PathStep, schema_from_path

KG = [("Kismet", "directed_by", "William Dieterle"), ("Kismet", "starred_actors", "Ronald Colman"),
      ("Dieterle Story", "written_by", "William Dieterle"), ("Kismet", "film.film.release_year", "1944")]


def _plain_texts(relations, depth):
    """The reference: the placeholder-only steps of every chain the path planner writes, one step per relation and
    orientation at every position of a chain of ``depth - 1`` hops (its first step, from the topic, excluded)."""
    texts = set()
    for relation in relations:
        for forward in (True, False):
            for hops in range(2, depth + 1):
                schema = schema_from_path("Topic", [PathStep(relation, forward)] * hops)
                texts.update(t.text() for t in schema.triples[1:])
    return texts


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["r0", "film.film.r1", "people.person.r2", "r_3", "r4"]), min_size=1, max_size=5),
       st.integers(2, 5))
def test_relation_step_texts_are_the_planners_placeholder_steps(relations, depth):
    index = build_index([(f"e{i}", r, f"e{i + 1}") for i, r in enumerate(relations)])
    texts = relation_step_texts(index, depth)
    assert set(texts) == _plain_texts(index.relations, depth)
    assert len(texts) == len(set(texts)) <= count_relation_step_texts(index, depth)
    assert texts == relation_step_texts(index, depth)  # deterministic order


def test_table_vectors_are_the_encoders_one_text_at_a_time(tmp_path):
    index = build_index(KG)
    encoder = HashingEncoder(dim=64)
    table = open_relation_step_table(encoder, index, tmp_path, chunk_rows=5, max_texts=10_000)
    texts = relation_step_texts(index)
    assert table is not None and len(table) == len(texts)
    where, vectors = table.lookup(["not a step", *texts])
    assert where.tolist() == list(range(1, len(texts) + 1))
    alone = np.stack([encoder.encode([t])[0] for t in texts]).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(vectors, alone)  # stored as float16, as the schema-text table stores vectors


def test_table_is_off_at_zero_or_over_the_cap(tmp_path):
    index = build_index(KG)
    encoder = HashingEncoder(dim=64)
    count = count_relation_step_texts(index)
    assert count == 2 * (DEPTH - 1) * len(index.relations)
    assert open_relation_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=0) is None
    assert open_relation_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=count - 1) is None
    assert open_relation_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=count) is not None


def test_another_kg_or_encoder_gets_its_own_table(tmp_path):
    encoder = HashingEncoder(dim=64)
    first = open_relation_step_table(encoder, build_index(KG), tmp_path, chunk_rows=8, max_texts=10_000)
    more = open_relation_step_table(encoder, build_index([*KG, ("Kismet", "edited_by", "Ann")]), tmp_path,
                                    chunk_rows=8, max_texts=10_000)
    wider = open_relation_step_table(HashingEncoder(dim=32), build_index(KG), tmp_path, chunk_rows=8,
                                     max_texts=10_000)
    paths = {t.table.path for t in (first, more, wider)}
    assert len(paths) == 3 and all(p.parent == tmp_path for p in paths)
    assert "[ENT1] edited by [ENT2]" in more.rows and "[ENT1] edited by [ENT2]" not in first.rows
    assert wider.table.array.shape[1] == 32
    again = open_relation_step_table(encoder, build_index(KG), tmp_path, chunk_rows=8, max_texts=10_000)
    assert again.table.encoded_rows == 0  # built once, then read
    np.testing.assert_array_equal(again.table.array, first.table.array)


@pytest.fixture(scope="module")
def holder(demo_hashing64):
    from stem_jax.methods.stem.resources import StemResources

    dataset, index, encoder, embeddings = demo_hashing64
    return StemResources(dataset, index, embeddings, encoder, StemConfig())


def test_holder_reads_table_texts_and_encodes_the_rest(holder):
    relation = holder.index.relations[0]
    from stem_jax.plan.schema import SchemaTriple

    texts = [SchemaTriple("[ENT2]", relation, "[ENT1]").text(), "a text no table holds",
             SchemaTriple("[ENT1]", relation, "[ENT2]").text()]
    before = holder.relation_step_hits
    got = holder.encode_steps(texts)
    assert holder.relation_step_hits - before == 2
    plain = holder.encoder.encode(texts).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, plain)
    assert holder.relation_steps() is holder.relation_steps()  # opened once


def test_online_schema_texts_between_placeholders_are_read_not_encoded(demo_hashing64, monkeypatch):
    from stem_jax.methods.stem.method import StemMethod
    from stem_jax.methods.stem.pipeline import StemPipeline
    from stem_jax.plan.schema import SchemaTriple

    dataset, index, encoder, embeddings = demo_hashing64
    method = StemMethod.from_pipeline(StemPipeline(dataset, index, embeddings, encoder, StemConfig()), None)
    method.embed(["a split's first text"], False)  # the split-wide table; later calls append online
    encoded: list[str] = []
    plain = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda texts: encoded.extend(texts) or plain(texts))
    steps = [SchemaTriple("[ENT1]", r, "[ENT2]").text() for r in index.relations[:3]]
    method.embed([*steps, "Kismet directed by [ENT1]"], False)
    assert encoded == ["Kismet directed by [ENT1]"]
    rows = method.pipeline.text_emb[[method.pipeline.text_rows[t] for t in steps]]
    np.testing.assert_array_equal(rows, plain(steps).astype(np.float16).astype(np.float32))

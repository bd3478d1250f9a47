"""A one-layer question encoder distilled into all-MiniLM-L6-v2's vector space.

The student reads MiniLM's own token embeddings (word + position + type, layer-normalised: the shipped weights,
not a copy), runs one transformer layer of MiniLM's shape (trained from MiniLM's first layer), mean-pools the
tokens and maps the pooled vector into MiniLM's output space with a learned [h, h] projection, then L2-normalises.
It was fitted to MiniLM's float32 vectors of the questions of the shipped train and dev splits
(``experiments/encoder_distill.py``), so a question it encodes lands near the vector MiniLM gives it, at about a
sixth of MiniLM's work per token. Only online question encodes use it (``EncoderConfig.question_encoder``): every
KG row, schema text and cache stays MiniLM's.

:func:`student_vectors` is the jitted forward over padded rows (one question a row); :func:`reference_vectors`
is the plain per-question numpy computation it is tested against.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

STUDENT_FILE = "question-student.npz"
# Row lengths a student forward compiles for: a question pads to the next one (at most 3 padded tokens up to 24).
LENGTH_BUCKETS = (8, 12, 16, 20, 24, 32, 48, 64)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def shipped_student_path() -> Path:
    """The student's weights shipped in the package (``stem_jax/encoder/models/question-student.npz``)."""
    return Path(str(importlib.resources.files("stem_jax.encoder") / "models" / STUDENT_FILE))


def load_student(path: Path) -> dict[str, Any]:
    """The student's parameters from ``path``: ``{"layer": <an EncoderLayer tree>, "proj": {"kernel", "bias"}}``,
    float32. The file stores flat ``layer/<module>/<name>`` and ``proj/<name>`` arrays (float16 on disk)."""
    tree: dict[str, Any] = {}
    with np.load(path) as arrays:
        for key in arrays.files:
            node = tree
            *parents, leaf = key.split("/")
            for name in parents:
                node = node.setdefault(name, {})
            node[leaf] = np.asarray(arrays[key], np.float32)
    if "layer" not in tree or "proj" not in tree:
        raise ValueError(f"{path}: not a question-student file (needs layer/... and proj/... arrays)")
    return tree


def save_student(params: dict[str, Any], path: Path) -> None:
    """Write ``params`` (as :func:`load_student` returns them) to ``path`` as float16 arrays."""
    flat: dict[str, np.ndarray] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for name, child in node.items():
                walk(f"{prefix}/{name}" if prefix else name, child)
        else:
            flat[prefix] = np.asarray(node, np.float16)

    walk("", params)
    np.savez(path, **flat)


def student_fingerprint(path: Path) -> str:
    """A short digest of the student's weights file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def student_vectors(minilm: dict[str, Any], student: dict[str, Any], cfg: Any, tokens: Any, mask: Any) -> Any:
    """Unit vectors [rows, h] of padded rows ``tokens`` [rows, T] (``mask`` 1 on real tokens, 0 on padding; each
    row one question starting at position 0) through MiniLM's embeddings (``minilm``: MiniLM's parameter tree),
    the student's layer and its projection. Padding attends only to padding and is left out of the mean."""
    import jax.numpy as jnp

    from stem_jax.encoder.bert import attention_bias, embed, pool, run_layers

    segments = jnp.asarray(mask).astype(jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    x = embed(minilm, cfg, tokens, positions)
    x = run_layers([student["layer"]], cfg, x, attention_bias(segments, x.dtype))
    pooled = pool(x, segments, slots=1)[:, 0]
    y = pooled @ student["proj"]["kernel"] + student["proj"]["bias"]
    return y / jnp.maximum(jnp.linalg.norm(y, axis=-1, keepdims=True), 1e-12)


def _layer_norm(x: np.ndarray, p: dict[str, np.ndarray], eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def reference_vectors(minilm: dict[str, Any], student: dict[str, Any], cfg: Any,
                      sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """:func:`student_vectors` written plainly: each token sequence alone (no padding, no mask), float64, one
    attention head at a time, exact GELU; [len(sequences), h] float32 unit vectors."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    hd = h // heads
    layer = student["layer"]
    out = []
    for seq in sequences:
        ids = np.asarray(seq, np.int64)
        x = f64(minilm["word"]["embedding"])[ids] + f64(minilm["position"])[: len(ids)] + f64(minilm["token_type"])[0]
        x = _layer_norm(x, {k: f64(v) for k, v in minilm["embed_ln"].items()}, cfg.layer_norm_eps)
        qkv = x @ f64(layer["qkv"]["kernel"]) + f64(layer["qkv"]["bias"])
        context = np.zeros_like(x)
        for n in range(heads):
            q = qkv[:, n * hd : (n + 1) * hd]
            k = qkv[:, h + n * hd : h + (n + 1) * hd]
            v = qkv[:, 2 * h + n * hd : 2 * h + (n + 1) * hd]
            scores = q @ k.T / math.sqrt(hd)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            context[:, n * hd : (n + 1) * hd] = (weights / weights.sum(-1, keepdims=True)) @ v
        attn = context @ f64(layer["attn_out"]["kernel"]) + f64(layer["attn_out"]["bias"])
        x = _layer_norm(x + attn, {k: f64(v) for k, v in layer["attn_ln"].items()}, cfg.layer_norm_eps)
        inner = x @ f64(layer["intermediate"]["kernel"]) + f64(layer["intermediate"]["bias"])
        inner = 0.5 * inner * (1.0 + np.vectorize(math.erf)(inner / math.sqrt(2.0)))
        ffn = inner @ f64(layer["out"]["kernel"]) + f64(layer["out"]["bias"])
        x = _layer_norm(x + ffn, {k: f64(v) for k, v in layer["out_ln"].items()}, cfg.layer_norm_eps)
        pooled = x.mean(0)
        pooled /= max(np.linalg.norm(pooled), 1e-12)
        y = pooled @ f64(student["proj"]["kernel"]) + f64(student["proj"]["bias"])
        out.append(y / max(np.linalg.norm(y), 1e-12))
    return np.asarray(out, np.float32).reshape(len(sequences), h)


def _bucket(n: int, buckets: Sequence[int]) -> int:
    return next((b for b in buckets if b >= n), n)


class QuestionStudent:
    """The distilled question encoder over a :class:`~stem_jax.encoder.minilm.MiniLMEncoder`'s tokenizer and
    embeddings: :meth:`encode` gives unit vectors [N, h] in MiniLM's space. Rows are one question each, padded to
    the next of ``LENGTH_BUCKETS`` tokens (so attention and the dense layers see the question's own length, not a
    64-token row), ``ROW_BUCKETS`` rows a call; the parameters are put on the device once and each (rows, length)
    shape compiles once (:meth:`warm_up` compiles them all ahead)."""

    def __init__(self, minilm: Any, path: Path | None = None):
        self.minilm = minilm  # the MiniLMEncoder whose tokenizer, config and embeddings the student reads
        self.path = Path(path) if path is not None else shipped_student_path()
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: the question student's weights are missing\n  how to fix: "
                                    "reinstall stem_jax, or write them with experiments/encoder_distill.py")
        self.name = f"question-student:{student_fingerprint(self.path)}"
        self._params: Any = None
        self._forward: Any = None
        self.compile_count = 0

    def _ready(self) -> tuple[Any, Any]:
        if self._forward is None:
            import jax

            cfg = self.minilm.cfg
            embeddings = {k: self.minilm.params["params"][k] for k in ("word", "position", "token_type", "embed_ln")}
            self._params = (embeddings, jax.device_put(load_student(self.path)))

            def forward(params: Any, tokens: Any, mask: Any) -> Any:
                self.compile_count += 1  # runs only while tracing, i.e. once per compiled shape
                return student_vectors(params[0], params[1], cfg, tokens, mask)

            self._forward = jax.jit(forward)
        return self._forward, self._params

    def warm_up(self, max_rows: int = 1) -> int:
        """Compile the forward for every length bucket and row bucket up to ``max_rows``; returns new compiles."""
        import jax

        forward, params = self._ready()
        before = self.compile_count
        for rows in (b for b in ROW_BUCKETS if b <= max(1, max_rows)):
            for length in LENGTH_BUCKETS:
                if length <= self.minilm.max_length:
                    zeros = np.zeros((rows, length), np.int32)
                    jax.block_until_ready(forward(params, zeros, zeros))
        return self.compile_count - before

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors [len(texts), h] float32, in input order; texts past the encoder's ``max_length`` tokens
        are truncated as MiniLM truncates them."""
        out = np.empty((len(texts), self.minilm.dim), np.float32)
        if not len(texts):
            return out
        forward, params = self._ready()
        ids = self.minilm.tokenizer.tokenize(texts)
        # Similar lengths share a forward: sorted by length, cut into runs of at most ROW_BUCKETS[-1] rows.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), ROW_BUCKETS[-1]):
            chunk = order[start : start + ROW_BUCKETS[-1]]
            length = _bucket(max(len(ids[i]) for i in chunk), LENGTH_BUCKETS)
            rows = _bucket(len(chunk), ROW_BUCKETS)
            tokens = np.zeros((rows, length), np.int32)
            mask = np.zeros((rows, length), np.int32)
            for r, i in enumerate(chunk):
                tokens[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            out[chunk] = np.asarray(forward(params, tokens, mask))[: len(chunk)]
        return out

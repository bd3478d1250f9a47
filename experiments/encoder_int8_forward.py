"""Whether an int8 MiniLM forward beats the bfloat16 one on this CPU, and what it does to the vectors.

    STEM_DATA_DIR=../shared/data python experiments/encoder_int8_forward.py

The int8 forward quantises each dense layer's kernel per output channel (``scale = max|w| / 127``, codes
``round(w / scale)``) and its input per token on the fly (the same symmetric rule over the row), multiplies int8 x
int8 with int32 accumulation and rescales: the usual dynamic-quantisation scheme for BERT on CPUs with VNNI.
Attention, layer norms and GELU stay float32, as in the bfloat16 forward (``encoder.dot_dtype``).

1. CPU milliseconds per forward (the process's CPU time, which a loaded machine inflates less than wall time),
   median over 3 repeats, at [rows, length] = [1, 8], [1, 16], [4, 16], [16, 64] (one question, a short call,
   a few schema texts, a full batch).
2. Cosine of each dtype's vector to the float32 forward's, over the first 1,000 MetaQA 2-hop test questions.

Writes ``experiments/results/encoder-int8-forward.{json,md}``. About 3 minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from stem_jax.encoder import minilm  # noqa: E402
from stem_jax.encoder.base import minilm_model_dir  # noqa: E402
from stem_jax.encoder.tokenizer import pack, pack_batch  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

SHAPES = ((1, 8), (1, 16), (4, 16), (16, 64))
DENSE = ("qkv", "attn_out", "intermediate", "out")


class Int8Dense(nn.Module):
    """``x @ kernel + bias`` with int8 codes of the kernel (per output channel) and of ``x`` (per token)."""

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        codes = self.param("kernel", nn.initializers.zeros, (x.shape[-1], self.features), jnp.int8)
        scale = self.param("scale", nn.initializers.ones, (self.features,))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        step = jnp.maximum(jnp.abs(x).max(axis=-1, keepdims=True), 1e-12) / 127.0
        xq = jnp.round(x / step).astype(jnp.int8)
        return jnp.dot(xq, codes, preferred_element_type=jnp.int32).astype(jnp.float32) * (step * scale) + bias


def quantise(params: dict) -> dict:
    """MiniLM's parameters with every dense kernel as int8 codes and a float32 scale per output channel."""
    params = jax.tree.map(np.asarray, params)
    for name, layer in params["params"].items():
        if not name.startswith("layer_"):
            continue
        for dense in DENSE:
            kernel = layer[dense]["kernel"]
            scale = np.maximum(np.abs(kernel).max(axis=0), 1e-12) / 127.0
            layer[dense] = {"kernel": np.round(kernel / scale).astype(np.int8), "scale": scale.astype(np.float32),
                            "bias": layer[dense]["bias"]}
    return params


def int8_model(cfg: minilm.BertConfig) -> minilm.MiniLM:
    plain = minilm._dense
    # MiniLM builds its dense layers through minilm._dense; "int8" is this script's dtype only
    minilm._dense = lambda features, name, dtype: (Int8Dense(features, name=name) if dtype == "int8"
                                                   else plain(features, name, dtype))
    return minilm.MiniLM(cfg, "int8")


def cpu_ms(fn, *args, calls: int) -> float:
    jax.block_until_ready(fn(*args))
    repeats = []
    for _ in range(3):
        began = time.process_time()
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        repeats.append((time.process_time() - began) / calls)
    return 1000 * float(np.median(repeats))


def embed(fn, params, ids: list[list[int]]) -> np.ndarray:
    rows = pack([len(r) for r in ids], 64)
    out = np.zeros((len(ids), 384), np.float32)
    for start in range(0, len(rows), 16):
        batch = rows[start : start + 16]
        vectors = np.asarray(fn(params, *pack_batch(ids, batch, 16, 64)))
        for r, members in enumerate(batch):
            out[members] = vectors[r, : len(members)]
    return out


def questions(limit: int) -> list[str]:
    path = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "metaqa/2-hop/vanilla/qa_test.txt"
    lines = path.read_text(encoding="utf-8").splitlines()[:limit]
    return [line.split("\t")[0].replace("[", "").replace("]", "") for line in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--questions", type=int, default=1000)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    encoder = minilm.MiniLMEncoder(minilm_model_dir(), memo=0)
    forwards = {
        "float32": (jax.jit(minilm.MiniLM(encoder.cfg, "float32").apply), encoder.params),
        "bfloat16": (jax.jit(minilm.MiniLM(encoder.cfg, "bfloat16").apply), encoder._params_for("bfloat16")),
        "int8": (jax.jit(int8_model(encoder.cfg).apply), jax.device_put(quantise(jax.device_get(encoder.params)))),
    }
    timing = []
    for rows, length in SHAPES:
        z = np.ones((rows, length), np.int32)
        row = {"rows": rows, "length": length}
        for dtype in ("bfloat16", "int8"):
            fn, params = forwards[dtype]
            row[f"{dtype}_cpu_ms"] = round(cpu_ms(fn, params, z, z, z, calls=20 if rows < 16 else 3), 3)
        timing.append(row)
        print(row, flush=True)
    ids = encoder.tokenizer.tokenize(questions(args.questions))
    vectors = {dtype: embed(fn, params, ids) for dtype, (fn, params) in forwards.items()}
    closeness = {}
    for dtype in ("bfloat16", "int8"):
        cosine = (vectors["float32"] * vectors[dtype]).sum(axis=1)
        closeness[dtype] = {"min": round(float(cosine.min()), 6), "mean": round(float(cosine.mean()), 6)}
    load_after = [round(x, 2) for x in os.getloadavg()]
    meta = run_metadata()
    payload = {"meta": meta, "command": "python experiments/encoder_int8_forward.py",
               "load_average": {"before": load_before, "after": load_after}, "forwards": timing,
               "cosine_to_float32": closeness, "questions": len(ids)}
    time_table = markdown_table(["rows x length", "bfloat16 CPU ms", "int8 CPU ms", "int8 / bfloat16"],
                                [[f"{r['rows']} x {r['length']}", r["bfloat16_cpu_ms"], r["int8_cpu_ms"],
                                  round(r["int8_cpu_ms"] / r["bfloat16_cpu_ms"], 2)] for r in timing])
    cos_table = markdown_table(["forward", "min cosine", "mean cosine"],
                               [[k, f"{v['min']:.6f}", f"{v['mean']:.6f}"] for k, v in closeness.items()])
    write_report(args.out, "encoder-int8-forward", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\nLoad average before / after: {load_before} / "
                 f"{load_after} (a shared machine; CPU time of the process, median of 3 repeats).\n\n"
                 f"One MiniLM forward, int8 (per-channel kernel codes, per-token input codes, int32 accumulation) "
                 f"against bfloat16 (the default online forward):\n\n{time_table}\n\nVectors of {len(ids)} MetaQA "
                 f"2-hop test questions against the float32 forward's:\n\n{cos_table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

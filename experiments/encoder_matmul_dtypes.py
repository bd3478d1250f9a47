"""What a MiniLM matmul and forward cost on this CPU by operand dtype and XLA CPU option.

    python experiments/encoder_matmul_dtypes.py

1. One dense layer's matmul ([M, 384] x [384, 1536], MiniLM's intermediate) with float32, bfloat16 (float32
   accumulation) and int8 (int32 accumulation; signed x signed and unsigned x signed, the VNNI form) operands,
   each compiled with XLA's default CPU options, ``xla_cpu_use_xnnpack`` and ``xla_cpu_use_onednn`` (per-compile
   options: nothing else in the process changes), M = 8 / 64 / 2048 tokens.
2. The whole MiniLM forward (``MiniLM(cfg, dot_dtype)``) at [rows, length] = [1, 8], [1, 24], [2, 64], [16, 64]
   in float32 and bfloat16, with the smallest cosine between the two dtypes' vectors.

Times are the minimum over repeats (a shared machine: the minimum is the least disturbed run); the load
average is recorded. Writes ``experiments/results/encoder-matmul-dtypes.{json,md}``. About 2 minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from stem_jax.encoder.base import minilm_model_dir  # noqa: E402
from stem_jax.encoder.bert import MiniLM  # noqa: E402
from stem_jax.encoder.minilm import MiniLMEncoder, cast_kernels  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

OPTIONS = {"default": {}, "xnnpack": {"xla_cpu_use_xnnpack": True}, "onednn": {"xla_cpu_use_onednn": True}}


def best_ms(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - began)
    return 1000 * min(times)


def matmuls() -> list[dict]:
    rng = np.random.default_rng(0)
    k, n = 384, 1536
    w32 = rng.standard_normal((k, n)).astype(np.float32)
    w8 = rng.integers(-127, 128, (k, n)).astype(np.int8)
    kinds = {
        "float32": (lambda x, w: jnp.dot(x, w), np.float32, w32),
        "bfloat16": (lambda x, w: jnp.dot(x.astype(jnp.bfloat16), w, preferred_element_type=jnp.float32),
                     np.float32, w32.astype(jnp.bfloat16)),
        "int8 (s8 x s8)": (lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.int32), np.int8, w8),
        "int8 (u8 x s8)": (lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.int32), np.uint8, w8),
    }
    rows = []
    for m in (8, 64, 2048):
        for kind, (fn, dtype, w) in kinds.items():
            x = rng.integers(0, 100, (m, k)).astype(dtype)
            for option, flags in OPTIONS.items():
                compiled = jax.jit(fn).lower(x, w).compile(flags)
                ms = best_ms(compiled, x, w, repeats=20 if m < 1000 else 5)
                rows.append({"m": m, "operands": kind, "xla_option": option, "ms": round(ms, 4),
                             "gflops": round(2 * m * k * n / ms / 1e6, 1)})
                print(rows[-1], flush=True)
    return rows


def forwards() -> list[dict]:
    encoder = MiniLMEncoder(minilm_model_dir())
    params = {"float32": encoder.params,
              "bfloat16": jax.device_put(cast_kernels(jax.device_get(encoder.params), "bfloat16"))}
    rng = np.random.default_rng(0)
    rows = []
    for shape in ((1, 8), (1, 24), (2, 64), (16, 64)):
        tokens = rng.integers(1000, 20000, shape).astype(np.int32)
        segments = np.ones(shape, np.int32)
        positions = np.tile(np.arange(shape[1], dtype=np.int32), (shape[0], 1))
        vectors = {}
        for dtype in ("float32", "bfloat16"):
            model = MiniLM(encoder.cfg, dtype)
            fn = jax.jit(lambda p, t, s, q, model=model: model.apply(p, t, s, q))
            vectors[dtype] = np.asarray(fn(params[dtype], tokens, segments, positions))[:, 0]
            ms = best_ms(fn, params[dtype], tokens, segments, positions, repeats=20 if shape[0] < 8 else 5)
            rows.append({"rows": shape[0], "length": shape[1], "dot_dtype": dtype, "ms": round(ms, 3),
                         "ms_per_token": round(ms / (shape[0] * shape[1]), 4)})
        cosine = float((vectors["float32"] * vectors["bfloat16"]).sum(axis=1).min())
        rows[-1]["min_cosine_to_float32"] = round(cosine, 6)
        print(rows[-2], rows[-1], flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    mm = matmuls()
    fw = forwards()
    load_after = [round(x, 2) for x in os.getloadavg()]
    mm_table = markdown_table(["M", "operands", "XLA CPU option", "best ms", "GFLOP/s"],
                              [[r["m"], r["operands"], r["xla_option"], r["ms"], r["gflops"]] for r in mm])
    fw_table = markdown_table(["rows x length", "dot dtype", "best ms", "ms per token", "min cosine to float32"],
                              [[f"{r['rows']} x {r['length']}", r["dot_dtype"], r["ms"], r["ms_per_token"],
                                f"{r['min_cosine_to_float32']:.6f}" if "min_cosine_to_float32" in r else ""]
                               for r in fw])
    meta = run_metadata()
    payload = {"meta": meta, "command": "python experiments/encoder_matmul_dtypes.py",
               "load_average": {"before": load_before, "after": load_after}, "matmuls": mm, "forwards": fw}
    write_report(args.out, "encoder-matmul-dtypes", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\nLoad average before / after: {load_before} / "
                 f"{load_after} (a shared machine; times are the minimum over repeats).\n\n"
                 f"One [M, 384] x [384, 1536] matmul:\n\n{mm_table}\n\nThe MiniLM forward:\n\n{fw_table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""MiniLM's online encodes with float32 and with bfloat16 matmul operands on this machine, alternating call by
call, and what ``encoder.dot_dtype=auto`` picks here.

    python experiments/encoder_dot_dtype_speed.py [--calls 60] [--batches 6]

Writes experiments/results/encoder-dot-dtype-auto.{json,md}: p50 milliseconds of a one-question encode and of a
64-question encode (memo off), the CPU's bfloat16 flags and the choice ``auto`` makes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.encoder.base import BFLOAT16_CPU_FLAGS, cpu_flags, minilm_model_dir, resolve_dot_dtype  # noqa: E402
from stem_jax.encoder.minilm import MiniLMEncoder  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

DTYPES = ("float32", "bfloat16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="one-question calls per dtype")
    parser.add_argument("--batches", type=int, default=6, help="64-question calls per dtype")
    args = parser.parse_args()
    questions = [f"which films did the director of movie number {i} also write" for i in range(64 * args.batches + 64)]
    encoders = {d: MiniLMEncoder(minilm_model_dir(), memo=0, dot_dtype=d) for d in DTYPES}
    for encoder in encoders.values():  # compile both shapes first
        encoder.encode(questions[:1])
        encoder.encode(questions[:64])
    load_before = os.getloadavg()
    seconds = {d: {"batch 1": [], "batch 64": []} for d in DTYPES}
    for i in range(args.calls):
        for d, encoder in encoders.items():
            began = time.perf_counter()
            encoder.encode([questions[i]])
            seconds[d]["batch 1"].append(time.perf_counter() - began)
    for i in range(args.batches):
        for d, encoder in encoders.items():
            began = time.perf_counter()
            encoder.encode(questions[64 * i: 64 * i + 64])
            seconds[d]["batch 64"].append(time.perf_counter() - began)
    flags = cpu_flags()
    p50 = {d: {k: round(1000 * float(np.median(v)), 2) for k, v in rows.items()} for d, rows in seconds.items()}
    payload = {"meta": run_metadata(), "load_average": {"before": load_before, "after": os.getloadavg()},
               "bfloat16_flags": sorted(flags & BFLOAT16_CPU_FLAGS), "auto": resolve_dot_dtype("auto"),
               "p50_ms": p50, "calls": args.calls, "batches": args.batches}
    rows = [[d, p50[d]["batch 1"], p50[d]["batch 64"]] for d in DTYPES]
    text = (f"Command: `python experiments/encoder_dot_dtype_speed.py --calls {args.calls} --batches {args.batches}`\n\n"
            f"Machine: {payload['meta']}; load average before / after: {payload['load_average']['before']} / "
            f"{payload['load_average']['after']}. CPU bfloat16 flags: {payload['bfloat16_flags'] or 'none'}; "
            f"`encoder.dot_dtype=auto` picks {payload['auto']} here.\n\n"
            "MiniLM online encode, memo off, the two dtypes alternating call by call; p50 milliseconds.\n\n"
            + markdown_table(["dot dtype", "1 question", "64 questions"], rows) + "\n")
    write_report(ROOT / "experiments" / "results", "encoder-dot-dtype-auto", payload, text)
    print(text)


if __name__ == "__main__":
    main()

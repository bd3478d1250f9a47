"""`stem-jax bench stages` at two commits, alternating, in one window: the encoder's effect end to end.

    git worktree add ../wt-before <commit>
    STEM_DATA_DIR=../shared/data python experiments/encoder_bench_before_after.py --before-src ../wt-before \\
        [--repeats 3] [--name encoder-step-table-bench]

Runs ``python -m stem_jax.cli.main bench stages --dataset metaqa --hops 2 --planner pattern --batch-sizes 1,64
--no-encoder-memo`` (fresh questions: every question wording is encoded) from the ``--before-src`` checkout and
from ``--after-src`` (default this one), before / after / before / after ... ``--repeats`` times each, so both see the same load on a
shared machine; each run's JSON goes to ``runs/encoder-bench/<side>-<i>/``. Reports, per side, the median over
runs of batch 1's end-to-end p50 (and its CPU time), batch 64's questions/s, and the p50 of question and schema
encoding, with each run's load average. Writes ``experiments/results/<name>.{json,md}``. About 5 minutes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

BENCH = ["bench", "stages", "--dataset", "metaqa", "--hops", "2", "--planner", "pattern", "--batch-sizes", "1,64",
         "--no-encoder-memo"]


def git_head(src: Path) -> str:
    return subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def bench(src: Path, out: Path) -> dict:
    """One `bench stages` run with ``src``'s package first on the path; its numbers and load average."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-m", "stem_jax.cli.main", *BENCH, "--out", str(out.resolve())], cwd=src, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    data = json.loads(next(out.glob("bench-stages-*.json")).read_text())
    one, many = data["batch_sizes"]["1"], data["batch_sizes"]["64"]
    return {"load_average": data["meta"]["load_average"], "commit": data["meta"].get("commit"),
            "batch1_p50_ms": one["warm_ms"]["total"]["p50"], "batch1_cpu_p50_ms": one["warm_ms"]["process_cpu"]["p50"],
            "batch1_question_encoding_p50_ms": one["warm_ms"]["question_encoding"]["p50"],
            "batch1_schema_encoding_p50_ms": one["warm_ms"]["schema_encoding"]["p50"],
            "batch64_qps": many["questions_per_second"], "batch64_p50_ms": many["warm_ms"]["total"]["p50"],
            "batch64_question_encoding_p50_ms": many["warm_ms"]["question_encoding"]["p50"],
            "batch64_schema_encoding_p50_ms": many["warm_ms"]["schema_encoding"]["p50"],
            "table_hits": {size: row["encoder_memo_timed"].get("table_hits", 0)
                           for size, row in data["batch_sizes"].items()},
            "tokens": {size: row["encoder_timed"]["tokens_encoded"] for size, row in data["batch_sizes"].items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-src", type=Path, required=True, help="a checkout of the commit to compare with")
    parser.add_argument("--after-src", type=Path, default=ROOT,
                        help="a checkout of the commit measured (default this one, with its uncommitted edits)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="encoder-step-table-bench")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "encoder-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    sides = {"before": args.before_src.resolve(), "after": args.after_src.resolve()}
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    for i in range(args.repeats):
        for side, src in sides.items():
            runs[side].append(bench(src, args.runs / f"{side}-{i}"))
            print(side, i, runs[side][-1], flush=True)
    keys = ("batch1_p50_ms", "batch1_cpu_p50_ms", "batch1_question_encoding_p50_ms", "batch1_schema_encoding_p50_ms",
            "batch64_qps", "batch64_p50_ms", "batch64_question_encoding_p50_ms", "batch64_schema_encoding_p50_ms")
    medians = {side: {k: round(float(np.median([r[k] for r in rs])), 2) for k in keys} for side, rs in runs.items()}
    commits = {side: git_head(src) for side, src in sides.items()}
    meta = run_metadata()
    payload = {"meta": meta, "command": "python experiments/encoder_bench_before_after.py --before-src <checkout of "
               f"{commits['before']}> --after-src <checkout of {commits['after']}> --repeats {args.repeats}", "bench": "stem-jax " + " ".join(BENCH),
               "commits": commits, "medians": medians, "runs": runs}
    summary = markdown_table(
        ["side", "commit", "batch 1 p50 ms", "batch 1 CPU ms", "question enc. ms", "schema enc. ms", "batch 64 q/s",
         "batch 64 p50 ms", "b64 question enc. ms", "b64 schema enc. ms"],
        [[side, commits[side], *(medians[side][k] for k in ("batch1_p50_ms", "batch1_cpu_p50_ms",
          "batch1_question_encoding_p50_ms", "batch1_schema_encoding_p50_ms", "batch64_qps", "batch64_p50_ms",
          "batch64_question_encoding_p50_ms", "batch64_schema_encoding_p50_ms"))] for side in sides])
    each = markdown_table(["run", "side", "batch 1 p50 ms", "batch 64 q/s", "tokens encoded (b1 / b64)",
                           "step-table hits (b1 / b64)", "load average before -> after"],
                          [[i, side, round(r["batch1_p50_ms"], 2), round(r["batch64_qps"], 1),
                            f"{r['tokens']['1']} / {r['tokens']['64']}",
                            f"{r['table_hits']['1']} / {r['table_hits']['64']}",
                            f"{r['load_average']['before']} -> {r['load_average']['after']}"]
                           for i in range(args.repeats) for side, rs in runs.items() for r in [rs[i]]])
    write_report(args.out, args.name, payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\nEach run: `{payload['bench']}`, the two "
                 f"checkouts alternating on a shared machine. Medians over {args.repeats} runs a side (stage "
                 f"columns: p50 per call of the batch):\n\n{summary}\n\nEach run:\n\n{each}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`stem-jax bench stages` on the natural-question KGs (webqsp-r and cwq-e dev): one table of end-to-end rows.

Command (repo root; both KGs indexed, their pattern planners and answer scorers trained in the cache):

    STEM_DATA_DIR=../shared/data python experiments/bench_stages_natural.py --out runs/bench-natural

runs, for each KG, ``stem-jax bench stages --dataset files --data-dir $STEM_DATA_DIR/<kg> --split dev --planner
pattern --batch-sizes 1,16,64 --repeats 20 --no-encoder-memo --out <out>/<kg>`` one after the other (costs about
10-20 minutes on a 2-core CPU), then writes ``experiments/results/<name>.{json,md}``: per KG and batch size the
end-to-end p50 / p99, questions/s, the bench's ``overlapped`` questions/s (as many calls again, each batch encoded and
planned on a background thread while the one before is traced and answered; `bench stages` times it unless
``--no-overlapped``), the question encoding, planning, schema encoding, answers and tracing stages' p50, and each
run's load average, machine and commit. ``--collect DIR ...`` only reads finished bench folders (``--label`` names the
rows, e.g. before/after; ``--commits`` names the commit each folder measured, for benches run from a git archive,
whose recorded commit is the checkout's around it; a bench of a commit that counted a wrapped template classifier's
question encoding as planning shows 0 for it).
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

from stem_jax.eval.report import markdown_table, portable_paths, run_metadata, write_report  # noqa: E402

KGS = ("webqsp-r", "cwq-e")
SIZES = "1,16,64"


def data_root() -> Path:
    """The folder that holds the benchmark KGs ($STEM_DATA_DIR, else ../shared/data)."""
    return Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data"))


def run_bench(kg: str, out: Path) -> Path:
    data = data_root() / kg
    command = [sys.executable, "-m", "stem_jax.cli.main", "bench", "stages", "--dataset", "files", "--data-dir",
               str(data), "--split", "dev", "--planner", "pattern", "--batch-sizes", SIZES, "--repeats", "20",
               "--no-encoder-memo", "--out", str(out / kg)]
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out / kg


def rows_of(folder: Path, label: str, commit: str | None = None) -> list[dict]:
    (path,) = sorted(Path(folder).glob("bench-stages-*.json"))
    result = json.loads(path.read_text())
    meta = result["meta"]
    out = []
    for size, row in result["batch_sizes"].items():
        warm = row["warm_ms"]
        out.append({"label": label, "dataset": result["dataset"], "batch": int(size),
                    "p50_ms": warm["total"]["p50"], "p99_ms": warm["total"]["p99"],
                    "questions_per_second": row["questions_per_second"],
                    # the same number of calls again with each batch's front half (encoding, planning) on a
                    # background thread while the batch before is traced and answered (None: not timed)
                    "overlapped_questions_per_second": (row.get("overlapped") or {}).get("questions_per_second"),
                    "question_encoding_p50_ms": warm["question_encoding"]["p50"],
                    "planning_p50_ms": warm["planning"]["p50"], "answers_p50_ms": warm["answers"]["p50"],
                    "schema_encoding_p50_ms": warm["schema_encoding"]["p50"],
                    "tracing_p50_ms": warm["tracing"]["p50"], "process_cpu_p50_ms": warm["process_cpu"]["p50"],
                    "load_before": meta["load_average"]["before"], "load_after": meta["load_average"]["after"],
                    "commit": commit or meta["commit"], "time_utc": meta["time_utc"], "machine": meta["machine"],
                    "cpu_count": meta["cpu_count"], "command": portable_paths(result["command"], ROOT, data_root())})
    return out


def _rounded(value: float | None) -> float | str:
    return "" if value is None else round(value, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bench-natural"))
    parser.add_argument("--collect", nargs="+", type=Path, help="finished bench folders to read instead of running")
    parser.add_argument("--label", nargs="+", help="one label per --collect folder (default: after)")
    parser.add_argument("--commits", nargs="+", help="one commit per --collect folder (default: the one recorded)")
    parser.add_argument("--name", default="bench-stages-natural")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    if args.collect:
        labels = args.label or ["after"] * len(args.collect)
        commits = args.commits or [None] * len(args.collect)
        rows = [r for folder, label, commit in zip(args.collect, labels, commits, strict=True)
                for r in rows_of(folder, label, commit)]
    else:
        rows = [r for kg in KGS for r in rows_of(run_bench(kg, args.out), "this commit")]
    headers = ["", "KG (dev)", "batch", "p50 ms", "p99 ms", "q/s", "q/s overlapped", "question encoding p50", "planning p50",
               "schema encoding p50", "answers p50", "tracing p50", "process CPU p50", "load (1-min) before / after",
               "commit"]
    table = markdown_table(headers, [[r["label"], r["dataset"], r["batch"], round(r["p50_ms"], 1),
                                      round(r["p99_ms"], 1), round(r["questions_per_second"], 1),
                                      _rounded(r.get("overlapped_questions_per_second")),
                                      round(r.get("question_encoding_p50_ms", 0.0), 1), round(r["planning_p50_ms"], 1),
                                      round(r.get("schema_encoding_p50_ms", 0.0), 1), round(r["answers_p50_ms"], 1),
                                      round(r["tracing_p50_ms"], 1), round(r["process_cpu_p50_ms"], 1),
                                      f"{r['load_before'][0]} / {r['load_after'][0]}", r["commit"]] for r in rows])
    meta = run_metadata()
    command = "STEM_DATA_DIR=../shared/data python experiments/bench_stages_natural.py --out runs/bench-natural"
    write_report(ROOT / "experiments" / "results", args.name, {"meta": meta, "command": command, "rows": rows},
                 f"Command: `{command}`\n\nMachine: {meta}\n\nmilliseconds per call of the whole batch, warm calls "
                 "on other questions of the split, each planned afresh, every question encoded afresh "
                 "(`--no-encoder-memo`); process CPU: this process's CPU time per call (on a loaded machine "
                 f"wall time also waits for a core).\n\n{args.note}\n\n{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

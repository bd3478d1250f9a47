"""`stem-jax eval` end to end at two commits, alternating: wall, CPU (user + sys) and peak RSS per run (issue 22).

    STEM_DATA_DIR=../shared/data python experiments/eval_end_to_end.py --before d7ed904 --after HEAD \\
        --planner oracle --rounds 2

Each side runs from its own checkout (``runs/identity/src-<sha>``, as ``predictions_identity.py`` makes them)
with ``python -P`` so the working directory cannot shadow it, into a fresh folder per round, with the
schema-text and embedding caches warm (both sides read the same ``$STEM_CACHE_DIR``); ``--also REV`` adds
commits in between as more sides. A side that has
``stem_jax/compile_cache.py`` also reads XLA's compilation cache, warmed by one untimed run first: that is
what a user's second eval process gets. Rounds alternate the sides so machine load falls on both; the load
average is recorded before and after each run, and CPU seconds are reported beside wall seconds because
other jobs on a shared machine stretch wall time far more than CPU time. Each run's CPU seconds and peak RSS are its own
(``os.wait4``). Writes ``experiments/results/eval-end-to-end-<dataset>-<planner>[-<tag>].{json,md}`` (``--dataset``,
default metaqa).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.predictions_identity import source_tree  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402


def run_once(tree: Path, out: Path, planner: str, dataset: str = "metaqa", extra: Sequence[str] = ()) -> dict:
    """One eval in a child process (``extra``: more eval flags); its own CPU time and peak RSS come from ``os.wait4``
    (the children's totals of ``getrusage`` would carry the largest RSS of any earlier run into every later row)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-P", "-m", "stem_jax.cli.main", "eval", "--dataset", dataset, "--split", "test",
               "--planner", planner, "--no-progress", "--out", str(out), *extra]
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        began = time.perf_counter()
        child = subprocess.Popen(command, cwd=tree, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            stderr.seek(0)
            raise SystemExit(f"eval failed in {tree}:\n{stderr.read().decode(errors='replace')[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_gib": round(usage.ru_maxrss / 2**20, 2), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "questions": metrics["overall"]["n"],
            "prepare_s": round(metrics.get("prepare_seconds", 0.0), 2),
            "stage_s": {k: round(v / 1000, 2) for k, v in metrics.get("stage_ms_total_this_run", {}).items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--planner", default="oracle")
    parser.add_argument("--dataset", default="metaqa", help="any `stem-jax eval --dataset` name (test split)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--also", action="append", default=[], metavar="REV",
                        help="a commit in between, run as one more side (repeatable): whose change gained what")
    parser.add_argument("--tag", default=None, help="suffix of the result files' name (keeps earlier results)")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "identity")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    trees = {"before": source_tree(args.before, args.runs),
             **{f"also-{i + 1}": source_tree(rev, args.runs) for i, rev in enumerate(args.also)},
             "after": source_tree(args.after, args.runs)}
    scratch = Path(tempfile.mkdtemp(prefix="eval-e2e-"))
    results: dict[str, list[dict]] = {side: [] for side in trees}
    try:
        for side, (_, tree) in trees.items():  # untimed: warms the OS file cache and the compilation cache
            run_once(tree, scratch / f"warm-{side}", args.planner, args.dataset)
        for r in range(args.rounds):
            for side in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
                row = run_once(trees[side][1], scratch / f"{side}-{r}", args.planner, args.dataset)
                results[side].append(row)
                print(f"round {r} {side}: {json.dumps(row)}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for side, (sha, _) in trees.items():
        for r, row in enumerate(results[side]):
            rows.append([side, sha, r, row["questions"], row["wall_s"], round(row["questions"] / row["wall_s"]),
                         row["cpu_s"], row["peak_rss_gib"], f"{row['load_before']} / {row['load_after']}",
                         ", ".join(f"{k} {v}" for k, v in sorted(row["stage_s"].items()))])
    meta = run_metadata()
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"`stem-jax eval --dataset {args.dataset} --split test --planner {args.planner}` end to end, caches warm, machine "
            f"{meta['machine']} ({meta['cpu_count']} cores, shared), rounds alternating the sides.\n\nCommand: "
            f"`python experiments/eval_end_to_end.py {shown}`\n\n"
            + markdown_table(["side", "commit", "round", "questions", "wall s", "questions/s (wall)", "CPU s",
                              "peak RSS GiB", "load before / after", "stage totals s"], rows) + "\n")
    name = f"eval-end-to-end-{args.dataset}-{args.planner}" + (f"-{args.tag}" if args.tag else "")
    write_report(ROOT / "experiments" / "results", name,
                 {"meta": meta, "commits": {k: v[0] for k, v in trees.items()}, "runs": results}, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

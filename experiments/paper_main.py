"""Main table (paper Table 1 analogue): MetaQA-partial test, oracle and pattern planners, with and without guidance.

Command (repo root; needs the MetaQA index, the trained pattern planner and, for the guidance rows, a Triple-GNN):

    STEM_DATA_DIR=../shared/data python experiments/paper_main.py --limit 300

Evaluates through ``stem_jax.Engine`` into resumable run folders ``runs/paper/main-<planner>-<guidance>/``
(rerunning resumes; the other paper_* scripts read these folders), one MetaQA load shared by all rows.
``--limit N`` keeps the first N questions per hop (CPU budget); without it the whole split.
Writes experiments/results/paper-main-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from paper_common import COLUMNS, GNN, RUNS, Base, gnn_ready, metric_rows, save, table

ROWS = [("oracle", False), ("oracle", True), ("pattern", False), ("pattern", True)]


def run_folder(planner: str, guided: bool, limit: int | None) -> Path:
    return RUNS / f"main-{planner}-{'gnn' if guided else 'none'}{'' if limit is None else f'-limit{limit}'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N questions per hop (default: whole split)")
    parser.add_argument("--gnn-checkpoint", type=Path, default=GNN)
    parser.add_argument("--planners", default="oracle,pattern")
    args = parser.parse_args(argv)
    base = Base(limit=args.limit)
    results, rows, skipped = {}, [], []
    for planner, guided in ROWS:
        if planner not in args.planners.split(","):
            continue
        if guided and not gnn_ready(args.gnn_checkpoint):
            skipped.append(f"{planner} + GNN guidance: no trained checkpoint ready at {args.gnn_checkpoint}")
            continue
        began = time.perf_counter()
        engine = base.engine(planner, args.gnn_checkpoint if guided else None)
        out = run_folder(planner, guided, args.limit)
        summary = engine.evaluate(out)
        name = f"{planner}, {'GNN guidance' if guided else 'no guidance'}"
        results[name] = {"run": str(out), "wall_seconds": time.perf_counter() - began, **summary}
        rows += metric_rows(summary, COLUMNS, [name])
    markdown = table(["row", "hops", "questions"] + [t for _, t in COLUMNS], rows)
    if skipped:
        markdown += "\n\nNot run: " + "; ".join(skipped)
    print(markdown)
    command = "python experiments/paper_main.py" + (f" --limit {args.limit}" if args.limit else "")
    save("paper-main-metaqa", {"limit_per_hop": args.limit, "results": results, "not_run": skipped},
         f"MetaQA-partial test{'' if args.limit is None else f', first {args.limit} questions per hop'} "
         f"(percent; strict set metrics)\n\n{markdown}", command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

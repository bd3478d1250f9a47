"""Tables 2, 3, 5/12 analogues from existing run folders' predictions.jsonl (no re-running).

Command (repo root, after experiments/paper_main.py):

    python experiments/paper_from_runs.py --table answers   # Table 2: F1/Hit@1 by gold answer count
    python experiments/paper_from_runs.py --table hops      # Table 3: by hop
    python experiments/paper_from_runs.py --table coverage  # Tables 5/12: evidence coverage of the gold path
    python experiments/paper_from_runs.py --table latency   # mean ms shares per group (see paper_latency.py)

Reads every ``runs/paper/main-*`` folder (or ``--runs A B ...``); records carry hops, ground_truth,
coverage, strategies and per-stage ms. Batch runs record per-chunk shares of batch times, so the
latency table only compares runs; per-question latency (Tables 14/16) is experiments/paper_latency.py. Writes experiments/results/paper-<table>-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from paper_common import (
    ANSWER_BUCKETS,
    COLUMNS,
    RUNS,
    answer_bucket,
    group_metrics,
    latency_by,
    metric_rows,
    read_records,
    save,
    table,
)


def hop(record):
    return f"{record['hops']}-hop" if record.get("hops") is not None else None


def strategy(record):
    return "+".join(record.get("strategies", [])) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=("answers", "hops", "coverage", "latency"), required=True)
    parser.add_argument("--runs", type=Path, nargs="*", default=None)
    args = parser.parse_args(argv)
    runs = args.runs or sorted(p for p in RUNS.glob("main-*") if (p / "predictions.jsonl").exists())
    if not runs:
        raise SystemExit("no run folders: run experiments/paper_main.py first (or pass --runs)")
    payload, rows = {}, []
    for run in runs:
        records = read_records(run)
        if args.table == "answers":
            summary = group_metrics(records, answer_bucket, "answers")
            rows += metric_rows(summary, COLUMNS[:3], [run.name], ANSWER_BUCKETS)
            headers = ["run", "#answers", "questions"] + [t for _, t in COLUMNS[:3]]
        elif args.table == "hops":
            summary = group_metrics(records, hop, "hops")
            rows += metric_rows(summary, COLUMNS, [run.name], sorted(summary["groups"]))
            headers = ["run", "hops", "questions"] + [t for _, t in COLUMNS]
        elif args.table == "coverage":
            summary = group_metrics(records, hop, "hops")
            cols = (("coverage", "Coverage"), ("hit", "Hit"))
            rows += metric_rows(summary, cols, [run.name], sorted(summary["groups"]))
            headers = ["run", "hops", "questions", "Coverage", "Hit"]
        else:
            summary = {"by_answers": latency_by(records, answer_bucket), "by_strategy": latency_by(records, strategy)}
            stages = sorted({s for part in summary.values() for g in part.values() for s in g if s not in ("n",)})
            for kind, part in summary.items():
                for group, stats in sorted(part.items()):
                    rows.append([run.name, kind[3:], group, stats["n"]] + [round(stats.get(s, 0.0), 2) for s in stages])
            headers = ["run", "by", "group", "questions"] + [f"{s} ms" for s in stages]
        payload[run.name] = summary
    markdown = table(headers, rows)
    print(markdown)
    notes = {"answers": "F1/Hit@1 by the number of gold answers (percent)", "hops": "per hop (percent)",
             "coverage": "share of gold-path triples inside the retrieved evidence (eq. 17, percent)",
             "latency": "mean milliseconds per question and stage (shares of batch times; plan/encode/gnn are "
                        "whole-split preparation divided per question)"}
    save(f"paper-{args.table}-metaqa", {"runs": [str(r) for r in runs], "results": payload},
         f"{notes[args.table]}\n\n{markdown}", f"python experiments/paper_from_runs.py --table {args.table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Are two finished `stem-jax eval` run folders' predictions identical? (a speed-up must not move a number)

Command (repo root; each pair: a label, the run folder before, the run folder after):

    python experiments/predictions_identity_runs.py --pair webqsp-r-dev runs/before-webqsp runs/after-webqsp \\
        --pair cwq-e-dev runs/before-cwq runs/after-cwq --name predictions-identity-batched

Compares ``predictions.jsonl`` question by question on the fields ``predictions_identity.py`` compares (answers in
order, answer scores, evidence triples, evidence count, coverage, overflow, θ), reports for each field how many
questions differ and the largest score difference, and the Hit / Hit@1 / F1 over every question of the split at
both sides. Writes ``experiments/results/<name>.{json,md}``; exits 1 when any metric differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

COMPARED = ("prediction", "scores", "evidence", "evidence_count", "coverage", "overflow", "theta")
METRICS = ("hit", "hit_at_1", "f1")


def _records(folder: Path) -> dict[str, dict]:
    with open(folder / "predictions.jsonl") as f:
        return {r["id"]: r for r in map(json.loads, f)}


def _metrics(folder: Path) -> dict[str, float]:
    mean = json.loads((folder / "metrics.json").read_text())["all_questions"]["mean"]
    return {k: mean[k] for k in METRICS}


def compare(before: Path, after: Path) -> dict:
    a, b = _records(before), _records(after)
    differ = {field: 0 for field in COMPARED}
    largest_score = 0.0
    for qid in sorted(set(a) | set(b)):
        ra, rb = a.get(qid, {}), b.get(qid, {})
        for field in COMPARED:
            if ra.get(field) != rb.get(field):
                differ[field] += 1
        sa, sb = ra.get("scores") or [], rb.get("scores") or []
        if len(sa) == len(sb):
            largest_score = max([largest_score, *(abs(x - y) for x, y in zip(sa, sb, strict=True))])
    ma, mb = _metrics(before), _metrics(after)
    return {"questions": len(set(a) | set(b)), "only_before": len(set(a) - set(b)), "only_after": len(set(b) - set(a)),
            "questions_differing": differ, "largest_score_difference": largest_score,
            "metrics_before": ma, "metrics_after": mb, "metrics_identical": ma == mb,
            "before": str(before), "after": str(after)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", nargs=3, action="append", metavar=("LABEL", "BEFORE", "AFTER"), required=True)
    parser.add_argument("--name", default="predictions-identity-runs")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    cases = {label: compare(Path(b), Path(a)) for label, b, a in args.pair}
    headers = ["case", "questions", *(f"differ: {f}" for f in COMPARED), "largest score diff",
               *(f"{m} before" for m in METRICS), *(f"{m} after" for m in METRICS), "metrics identical"]
    rows = [[label, c["questions"], *(c["questions_differing"][f] for f in COMPARED),
             f"{c['largest_score_difference']:.2g}", *(round(100 * c["metrics_before"][m], 3) for m in METRICS),
             *(round(100 * c["metrics_after"][m], 3) for m in METRICS), "yes" if c["metrics_identical"] else "NO"]
            for label, c in cases.items()]
    table = markdown_table(headers, rows)
    command = "python experiments/predictions_identity_runs.py " + " ".join(
        f"--pair {label} {b} {a}" for label, b, a in args.pair) + f" --name {args.name}"
    meta = run_metadata()
    write_report(ROOT / "experiments" / "results", args.name, {"meta": meta, "command": command, "cases": cases},
                 f"Command: `{command}`\n\nMachine: {meta}\n\n{args.note}\n\nHit / Hit@1 / F1 in percent over every "
                 f"question of the split.\n\n{table}\n")
    print(table)
    return 0 if all(c["metrics_identical"] for c in cases.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Guidance-bias ablation (paper Table 7 analogue) as one 2×2 ``stem-jax sweep``: λ ∈ {1, 1.5} × τ ∈ {0, 0.5}.

Command (repo root; needs the MetaQA index and a trained Triple-GNN, `--gnn-checkpoint`, default
$GNN_CHECKPOINT or runs/gnn-metaqa-1000):

    STEM_DATA_DIR=../shared/data nice python experiments/paper_bias_ablation.py --subset 300

λ=1 removes the entity bias, τ=0 the triple bias; (1, 0) is "w/o both". The four rows are the four
points of one vmapped sweep (same plans, same GNN rows), so they equal four ``stem-jax eval`` runs
(tests/eval/test_sweep.py) at a quarter of the preparation. ``stem-jax ablate-guidance`` (and
experiments/guidance_ablation.py, full split) computes the same rows one after another.
Writes experiments/results/paper-bias-ablation-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from paper_common import GNN, RUNS, gnn_ready, gnn_sweep, save, table

NAMES = {(1.5, 0.5): "full guidance", (1.0, 0.5): "w/o entity bias", (1.5, 0.0): "w/o triple bias",
         (1.0, 0.0): "w/o both"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=300)
    parser.add_argument("--gnn-checkpoint", type=Path, default=GNN)
    args = parser.parse_args(argv)
    if not gnn_ready(args.gnn_checkpoint):
        raise SystemExit(f"the bias ablation needs a trained Triple-GNN; none ready at {args.gnn_checkpoint}")
    out = RUNS / f"bias-ablation-s{args.subset}"
    result = gnn_sweep(args.subset, args.gnn_checkpoint, out, "--lambda", "1.0,1.5", "--tau", "0.0,0.5")
    rows = []
    for r in sorted(result["points"], key=lambda r: list(NAMES).index((r["point"]["lam"], r["point"]["tau"]))):
        name = NAMES[(r["point"]["lam"], r["point"]["tau"])]
        for group in [*sorted(r["groups"]), None]:
            stats = r["overall"] if group is None else r["groups"][group]
            rows.append([name, group or "all", stats["n"]] + [round(100 * stats["mean"].get(k, 0.0), 2)
                                                              for k in ("hit_at_1", "f1", "coverage", "hit")])
    markdown = table(["variant", "hops", "questions", "Hit@1", "F1", "Coverage", "Hit"], rows)
    print(markdown)
    save("paper-bias-ablation-metaqa", {"subset_per_hop": args.subset, "sweep": result},
         f"MetaQA-partial test, stratified {args.subset} per hop, oracle planner, Triple-GNN guidance "
         f"{args.gnn_checkpoint} (percent)\n\n{markdown}", f"python experiments/paper_bias_ablation.py --subset {args.subset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

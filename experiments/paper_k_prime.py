"""K' sweep (paper Figures 6-7 analogue): guidance size |T|·K', K' = 1..8, one ``stem-jax sweep`` call.

Command (repo root; needs the MetaQA index and a trained Triple-GNN, `--gnn-checkpoint`, default
$GNN_CHECKPOINT or runs/gnn-metaqa-1000):

    STEM_DATA_DIR=../shared/data nice python experiments/paper_k_prime.py --subset 200

MetaQA-partial test, 1-3 hop stratified subset (``--subset`` per hop), oracle planner, λ/τ/θ at their
defaults. The GNN's top rows are computed once; each K' only cuts them, and all 8 points are traced
in one vmapped call per batch. Writes experiments/results/paper-k-prime-metaqa.{json,md,png}.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from paper_common import GNN, RESULTS, RUNS, gnn_ready, gnn_sweep, save


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=200)
    parser.add_argument("--gnn-checkpoint", type=Path, default=GNN)
    parser.add_argument("--k-prime", default="1,2,3,4,5,6,7,8")
    args = parser.parse_args(argv)
    if not gnn_ready(args.gnn_checkpoint):
        raise SystemExit(f"K' needs a trained Triple-GNN; none ready at {args.gnn_checkpoint}")
    out = RUNS / f"k-prime-s{args.subset}"
    result = gnn_sweep(args.subset, args.gnn_checkpoint, out, "--k-prime", args.k_prime)
    shutil.copyfile(out / "sweep-k_prime.png", RESULTS / "paper-k-prime-metaqa.png")
    save("paper-k-prime-metaqa", {"subset_per_hop": args.subset, "sweep": result, "figures": ["paper-k-prime-metaqa.png"]},
         (out / "sweep.md").read_text(), f"python experiments/paper_k_prime.py --subset {args.subset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

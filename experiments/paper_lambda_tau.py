"""λ×τ grids (paper Figures 8-9 analogue) with ``stem-jax sweep``, and what the one-call grid costs.

Command (repo root; MetaQA index ready; GNN guidance when a trained Triple-GNN is at
`--gnn-checkpoint` (default $GNN_CHECKPOINT or runs/gnn-metaqa-1000), else none):

    STEM_DATA_DIR=../shared/data nice python experiments/paper_lambda_tau.py --subset 300

Runs three ``stem-jax sweep`` commands on MetaQA-partial 2-hop test (the ``--subset`` stratified
questions, lowest sha256(qid)), oracle planner: the 42-point grid λ 1.2..2.7 (6) × τ 0.2..2.0 (7) in
one vmapped call per batch; one grid point alone; and the same 42 points one per compiled call
(``--points-per-call 1``, the point-by-point loop). Each is a fresh process (load, plan, GNN, compile
included). Reports whole-command wall time ratios and trace+anchor stage ratios, and copies the
heat maps (Hit@1, F1, coverage over λ×τ). Writes experiments/results/paper-lambda-tau-metaqa.{json,md,*.png}.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from paper_common import GNN, RESULTS, RUNS, gnn_ready, load_json, save, table

LAMBDAS = "1.2,1.5,1.8,2.1,2.4,2.7"
TAUS = "0.2,0.5,0.8,1.1,1.4,1.7,2.0"


def sweep(args: list[str]) -> tuple[float, dict]:
    out = Path(args[args.index("--out") + 1])
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "stem_jax.cli.main", "sweep", *args], check=True)
    return time.perf_counter() - began, load_json(out / "sweep.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=300, help="2-hop questions (stratified by sha256(qid))")
    parser.add_argument("--gnn-checkpoint", type=Path, default=GNN)
    parser.add_argument("--guidance", choices=("auto", "gnn", "none"), default="auto")
    parser.add_argument("--skip-loop", action="store_true", help="skip the point-by-point comparison")
    parser.add_argument("--rerun", default="grid,point,loop",
                        help="which of grid,point,loop to run; the others are read from their existing sweep.json")
    args = parser.parse_args(argv)
    guided = args.guidance == "gnn" or (args.guidance == "auto" and gnn_ready(args.gnn_checkpoint))
    tag = f"{'gnn' if guided else 'none'}-s{args.subset}"
    common = ["--dataset", "metaqa", "--hops", "2", "--subset", str(args.subset), "--planner", "oracle",
              "--no-progress", "--overwrite"]
    if guided:
        common += ["--guidance", "gnn", "--gnn-checkpoint", str(args.gnn_checkpoint)]
    runs = {
        "grid, one call": [*common, "--lambda", LAMBDAS, "--tau", TAUS, "--out", str(RUNS / f"lambda-tau-{tag}")],
        "one point": [*common, "--lambda", "1.5", "--tau", "0.5", "--out", str(RUNS / f"lambda-tau-point-{tag}")],
    }
    if not args.skip_loop:
        runs["grid, point by point"] = [*common, "--lambda", LAMBDAS, "--tau", TAUS, "--points-per-call", "1",
                                        "--out", str(RUNS / f"lambda-tau-loop-{tag}")]
    measured = {}
    keys = {"grid, one call": "grid", "one point": "point", "grid, point by point": "loop"}
    for name, flags in runs.items():
        out = Path(flags[flags.index("--out") + 1])
        if keys[name] in args.rerun.split(","):
            for folder in out.glob("points/*"):
                shutil.rmtree(folder)  # timings of a fresh run, not a resumed one
            _, result = sweep(flags)
        else:
            result = load_json(out / "sweep.json")
        wall = result["wall_seconds"]  # inside the command: load, plan, GNN, compile, trace, answers
        stages = result["stage_seconds_this_run"]
        measured[name] = {"wall_seconds": wall, "cpu_seconds": result.get("cpu_seconds"), "anchor_trace_seconds": stages["anchor"] + stages["trace"],
                          "answer_seconds": stages["answer"], "prepare_seconds": result["prepare_seconds"],
                          "points": len(result["points"]), "calls": result["compiled_calls_this_run"],
                          "sweep": result}
    grid, point = measured["grid, one call"], measured["one point"]
    rows = [[name, m["points"], m["calls"], round(m["wall_seconds"], 1),
             "-" if m["cpu_seconds"] is None else round(m["cpu_seconds"], 1), round(m["prepare_seconds"], 1),
             round(m["anchor_trace_seconds"], 1), round(m["answer_seconds"], 1)] for name, m in measured.items()]
    ratios = {"grid / one point (wall)": grid["wall_seconds"] / point["wall_seconds"],
              **({"grid / one point (process CPU)": grid["cpu_seconds"] / point["cpu_seconds"]}
                 if grid["cpu_seconds"] and point["cpu_seconds"] else {}),
              "grid / one point (anchor+trace)": grid["anchor_trace_seconds"] / point["anchor_trace_seconds"]}
    if "grid, point by point" in measured:
        loop = measured["grid, point by point"]
        ratios["grid / point-by-point loop (wall)"] = grid["wall_seconds"] / loop["wall_seconds"]
        if grid["cpu_seconds"] and loop["cpu_seconds"]:
            ratios["grid / point-by-point loop (process CPU)"] = grid["cpu_seconds"] / loop["cpu_seconds"]
        ratios["grid / point-by-point loop (anchor+trace)"] = grid["anchor_trace_seconds"] / loop["anchor_trace_seconds"]
    markdown = table(["run", "points", "grid calls", "wall s", "CPU s", "prepare s", "anchor+trace s", "answers s"], rows)
    markdown += "\n\n" + table(["ratio", "value"], [[k, round(v, 3)] for k, v in ratios.items()])
    best = max(grid["sweep"]["points"], key=lambda r: r["overall"]["mean"].get("f1", 0))
    markdown += (f"\n\nBest F1 on this subset: λ={best['point']['lam']}, τ={best['point']['tau']} "
                 f"(F1 {100 * best['overall']['mean']['f1']:.2f}, Hit@1 {100 * best['overall']['mean']['hit_at_1']:.2f})")
    figures = []
    for png in sorted(Path(runs["grid, one call"][-1]).glob("sweep-*.png")):
        target = RESULTS / f"paper-lambda-tau-metaqa-{png.name.removeprefix('sweep-')}"
        shutil.copyfile(png, target)
        figures.append(target.name)
    heat = (Path(runs["grid, one call"][-1]) / "sweep.md").read_text()
    title = (f"MetaQA-partial test, 2-hop, {grid['sweep']['questions']} questions (stratified subset), oracle planner, "
             f"guidance {'Triple-GNN ' + str(args.gnn_checkpoint) if guided else 'none (λ and τ have no effect)'}")
    print(markdown)
    save("paper-lambda-tau-metaqa", {"guidance": "gnn" if guided else "none", "subset": args.subset,
                                     "ratios": ratios, "measured": measured, "figures": figures},
         f"{title}\n\n{markdown}\n\nGrid (from the one-call sweep):\n\n{heat}",
         f"python experiments/paper_lambda_tau.py --subset {args.subset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

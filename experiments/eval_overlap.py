"""`stem-jax eval` end to end before and after a change, with flags per side, alternating: wall, CPU, predictions.

    STEM_DATA_DIR=../shared/data python experiments/eval_overlap.py --before REV \\
        --side after: --side "after-1dev:--cpu-devices 1" --flags "--hops 2" --planner pattern --rounds 2

``--before REV`` runs from a checkout of REV (as ``predictions_identity.py`` makes them); each ``--side
NAME:FLAGS`` runs this working tree with FLAGS added (``--overlap N``, ``--cpu-devices N``). Every run is a
child process (``python -P``, its CPU seconds and peak RSS from ``os.wait4``) into a fresh folder, caches warm
(one untimed run per side first unless ``--no-warm``); rounds alternate the sides' order, and the load average is
recorded around each run. Every run's ``predictions.jsonl`` is compared with the first side's first run
(answers, scores, evidence, coverage, overflow, θ; timings aside). Writes
``experiments/results/eval-overlap-<dataset>-<planner>[-<tag>].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import eval_end_to_end  # noqa: E402
from experiments.predictions_identity import compare, source_tree  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402


def run_once(tree: Path, out: Path, args: argparse.Namespace, flags: list[str]) -> dict:
    return eval_end_to_end.run_once(tree, out, args.planner, args.dataset, [*shlex.split(args.flags), *flags])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="a commit: the side named 'before'")
    parser.add_argument("--side", action="append", default=[], metavar="NAME:FLAGS",
                        help="a side running this working tree with FLAGS added to eval's (repeatable)")
    parser.add_argument("--planner", default="pattern")
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--flags", default="", help="eval flags of every side, e.g. '--hops 2'")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-warm", dest="warm", action="store_false", help="skip the untimed run per side")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "identity")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    sha, before_tree = source_tree(args.before, args.runs)
    sides: dict[str, tuple[str, Path, list[str]]] = {"before": (sha, before_tree, [])}
    for spec in args.side:
        name, _, flags = spec.partition(":")
        sides[name] = ("working tree", ROOT, shlex.split(flags))
    scratch = Path(tempfile.mkdtemp(prefix="eval-overlap-"))
    results: dict[str, list[dict]] = {side: [] for side in sides}
    first: Path | None = None
    try:
        if args.warm:
            for side, (_, tree, flags) in sides.items():
                run_once(tree, scratch / f"warm-{side}", args, flags)
        for r in range(args.rounds):
            for side in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
                _, tree, flags = sides[side]
                out = scratch / f"{side}-{r}"
                row = run_once(tree, out, args, flags)
                first = first or out
                found = compare(first, out)
                row["identical_to_first"] = bool(found["identical"])
                row["questions_differing"] = sum(found["differ"].values()) if isinstance(found["differ"], dict) else None
                results[side].append(row)
                print(f"round {r} {side}: {json.dumps(row)}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for side, (sha, _, flags) in sides.items():
        for r, row in enumerate(results[side]):
            rows.append([side, sha, " ".join(flags), r, row["questions"], row["wall_s"],
                         round(row["questions"] / row["wall_s"]), row["cpu_s"], row["peak_rss_gib"],
                         f"{row['load_before']} / {row['load_after']}", row["prepare_s"],
                         ", ".join(f"{k} {v}" for k, v in sorted(row["stage_s"].items())),
                         "yes" if row["identical_to_first"] else f"no ({row['questions_differing']})"])
    meta = run_metadata()
    shown = " ".join(argv if argv is not None else sys.argv[1:])
    text = (f"`stem-jax eval --dataset {args.dataset} --split test --planner {args.planner} {args.flags}` end to end, "
            f"caches warm, machine {meta['machine']} ({meta['cpu_count']} cores, shared), rounds alternating the "
            "sides; predictions compared with the first timed run (timings aside).\n\nCommand: "
            f"`python experiments/eval_overlap.py {shown}`\n\n"
            + markdown_table(["side", "commit", "flags", "round", "questions", "wall s", "questions/s (wall)", "CPU s",
                              "peak RSS GiB", "load before / after", "prepare s", "stage totals s",
                              "predictions identical"], rows) + "\n")
    name = f"eval-overlap-{args.dataset}-{args.planner}" + (f"-{args.tag}" if args.tag else "")
    write_report(ROOT / "experiments" / "results", name,
                 {"meta": meta, "sides": {k: {"commit": v[0], "flags": v[2]} for k, v in sides.items()},
                  "runs": results}, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Are `stem-jax eval`'s predictions identical at two commits? (issues 20 and 22: refactors must not move a number)

Command (repo root; MetaQA index and pattern planner ready; a GNN run for the guided case):

    STEM_DATA_DIR=../shared/data python experiments/predictions_identity.py --before 2ea6c75 --after HEAD \\
        --case pattern --case pattern-gnn --gnn-checkpoint runs/gnn-metaqa-1000

For each commit the script checks the source out into ``runs/identity/src-<sha>`` (``git worktree``),
runs ``stem-jax eval --dataset metaqa --split test`` with that source first on ``PYTHONPATH`` into
``runs/identity/<sha>-<case>/`` (resumable; an existing folder is reused), and compares the two
``predictions.jsonl`` question by question: answers in order, answer scores, evidence triples,
evidence count, coverage, overflow and θ. Writes
``experiments/results/predictions-identity-<dataset>[-<label>].{json,md}`` (``--dataset``, default metaqa) and exits 1 when any question differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.cli.report import markdown_table, run_metadata, write_report  # noqa: E402

COMPARED = ("prediction", "scores", "evidence", "evidence_count", "coverage", "overflow", "theta")
CASES = {
    "pattern": ["--planner", "pattern"],
    "pattern-gnn": ["--planner", "pattern", "--guidance", "gnn"],
    "oracle": ["--planner", "oracle"],
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def source_tree(rev: str, runs: Path) -> tuple[str, Path]:
    """(short sha, a checkout of ``rev``); HEAD with uncommitted changes is the working tree itself."""
    sha = git("rev-parse", "--short=7", rev)
    if rev == "HEAD" and not git("status", "--porcelain", "--untracked-files=no"):
        return sha, ROOT
    if rev == "HEAD":
        return sha + "-dirty", ROOT
    tree = runs / f"src-{sha}"
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), sha)
    return sha, tree


def shown(path: Path) -> str:
    """``path`` relative to the checkout where it lies inside it: results never record a machine's paths."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def run_eval(tree: Path, out: Path, flags: list[str], log: list[str], dataset: str = "metaqa") -> float:
    if (out / "metrics.json").exists():
        log.append(f"reused {shown(out)}")
        return 0.0
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # -P: `python -m` would put the working directory (this checkout, with whatever it holds now) first on
    # sys.path, ahead of PYTHONPATH, and every side would run today's code; the check below fails loudly.
    command = [sys.executable, "-P", "-m", "stem_jax.cli.main", "eval", "--dataset", dataset, "--split", "test",
               "--no-progress", "--out", str(out), *flags]
    probe = subprocess.run([sys.executable, "-P", "-c", "import stem_jax; print(stem_jax.__file__)"], cwd=ROOT,
                           env=env, check=True, capture_output=True, text=True).stdout.strip()
    if not Path(probe).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"stem_jax imports from {probe}, not from {tree}")
    began = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    log.append(f"PYTHONPATH={shown(tree)} " + " ".join(shown(Path(c)) if c.startswith("/") else c
                                                       for c in command[1:]))
    return time.perf_counter() - began


def read(path: Path) -> dict[str, dict]:
    records = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["id"]] = record
    return records


def compare(before: Path, after: Path) -> dict:
    a, b = read(before / "predictions.jsonl"), read(after / "predictions.jsonl")
    per_hop: Counter = Counter()
    differ: Counter = Counter()
    fields: Counter = Counter()
    examples = []
    for qid in sorted(set(a) | set(b)):
        x, y = a.get(qid), b.get(qid)
        hop = f"{(x or y).get('hops')}-hop"
        per_hop[hop] += 1
        changed = ["missing"] if x is None or y is None else [k for k in COMPARED if x.get(k) != y.get(k)]
        if changed:
            differ[hop] += 1
            fields.update(changed)
            if len(examples) < 10:
                examples.append({"id": qid, "fields": changed})
    return {"questions": dict(per_hop), "differ": dict(differ), "fields": dict(fields), "examples": examples,
            "identical": not differ}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--case", action="append", choices=tuple(CASES), help="repeatable (default: pattern)")
    parser.add_argument("--gnn-checkpoint", type=Path, default=None)
    parser.add_argument("--dataset", default="metaqa", help="any `stem-jax eval --dataset` name (test split)")
    parser.add_argument("--label", default="", help="results go to predictions-identity-DATASET[-LABEL].*")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "identity")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    trees = dict(before=source_tree(args.before, args.runs), after=source_tree(args.after, args.runs))
    log: list[str] = []
    results, rows = {}, []
    for case in args.case or ["pattern"]:
        flags = list(CASES[case])
        if "gnn" in case:
            if args.gnn_checkpoint is None:
                raise SystemExit(f"--case {case} needs --gnn-checkpoint")
            flags += ["--gnn-checkpoint", str(args.gnn_checkpoint)]
        folders, seconds = {}, {}
        for side, (sha, tree) in trees.items():
            # MetaQA's folders keep their earlier names, so runs made before --dataset are reused
            folders[side] = args.runs / (f"{sha}-{case}" if args.dataset == "metaqa" else f"{sha}-{args.dataset}-{case}")
            seconds[side] = run_eval(tree, folders[side], flags, log, args.dataset)
        result = compare(folders["before"], folders["after"])
        result.update(flags=flags, seconds=seconds, folders={k: shown(v) for k, v in folders.items()})
        results[case] = result
        for hop in sorted(result["questions"]):
            rows.append([case, hop, result["questions"][hop], result["differ"].get(hop, 0)])
    names = {side: sha for side, (sha, _) in trees.items()}
    table = markdown_table(["case", "hops", "questions", "differ"], rows)
    text = (f"`stem-jax eval --dataset {args.dataset} --split test` at {names['before']} (before) and {names['after']} "
            f"(after), compared per question on {', '.join(COMPARED)}.\n\nCommand: `python "
            f"experiments/predictions_identity.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n{table}\n")
    for case, result in results.items():
        text += f"\n{case}: {'identical' if result['identical'] else 'DIFFERENT: ' + json.dumps(result['fields'])}\n"
    name = f"predictions-identity-{args.dataset}" + (f"-{args.label}" if args.label else "")
    write_report(args.out, name, {"meta": run_metadata(), "commits": names, "dataset": args.dataset,
                                  "commands": log, "cases": results}, text)
    print(text)
    return 0 if all(r["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

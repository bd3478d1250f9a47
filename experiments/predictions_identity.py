"""Are `stem-jax eval`'s predictions identical at two commits? (a refactor must not move a number)

Command (repo root; MetaQA index and pattern planner ready; a GNN run for the guided case):

    STEM_DATA_DIR=../shared/data python experiments/predictions_identity.py --before 2ea6c75 --after HEAD \\
        --case pattern --case pattern-gnn --gnn-checkpoint runs/gnn-metaqa-1000

For each commit the script checks the source out into ``runs/identity/src-<sha>`` (``git worktree``),
runs ``stem-jax eval --dataset DATASET --split SPLIT`` (``--dataset``, default metaqa; ``--split``, default
test; ``--flags`` adds any eval flags, e.g. ``'--hops 2 --limit 500'``) with that source first on
``PYTHONPATH`` into ``runs/identity/<sha>-<case>[-<label>]/`` (resumable; an existing folder is reused), and
compares the two ``predictions.jsonl`` question by question: answers in order, answer scores, evidence
triples, evidence count, coverage, overflow and θ. Cases ``sweep-*`` run ``stem-jax sweep`` and compare
every grid point's predictions; ``demo-command`` runs ``stem-jax demo`` and compares both of its engines'.
Writes ``experiments/results/predictions-identity-<dataset>[-<label>].{json,md}`` (eval cases with Hit@1 and
F1 per hop at both sides, what a difference cost) and exits 1 when any question differs. GNN guidance tables
are cached by checkpoint, inputs and the source of the code that computes them
(``stem_jax.gnn.provider.GUIDANCE_MODULES``): each side of a ``*-gnn`` case computes its own table when that code
differs between the two commits, and reads the same table when it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # as a script, this checkout's stem_jax; an importer (kg_shard_metaqa*.py, whose child
    sys.path.insert(0, str(ROOT))  # processes import a commit's checkout) has put its own on sys.path

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

# The record fields an identity check compares (this script and kg_shard_metaqa*.py): answers in order, answer
# scores, evidence triples, evidence count, coverage, overflow and θ.
COMPARED = ("prediction", "scores", "evidence", "evidence_count", "coverage", "overflow", "theta")
CASES = {
    "pattern": ["--planner", "pattern"],
    "pattern-gnn": ["--planner", "pattern", "--guidance", "gnn"],
    "oracle": ["--planner", "oracle"],
    # `stem-jax sweep` over three θ values: every grid point's predictions.jsonl is compared
    "sweep-theta": ["sweep", "--theta", "0.5,0.7,0.9"],
    # λ x τ: the guidance biases (with --flags '--guidance gnn --gnn-checkpoint RUN'; else λ, τ are unused)
    "sweep-lambda-tau": ["sweep", "--lambda", "1.0,1.5", "--tau", "0.0,0.5"],
    # `stem-jax demo`: its default and paper-literal engines' predictions.jsonl
    "demo-command": ["demo"],
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def source_tree(rev: str, runs: Path, *, working_tree: bool = True) -> tuple[str, Path]:
    """(short sha, a checkout of ``rev``): a worktree under ``runs``; with ``working_tree``, HEAD is the working
    tree itself (``<sha>-dirty`` with uncommitted changes), else a worktree too, so later edits never reach a run."""
    sha = git("rev-parse", "--short=7", rev)
    if working_tree and rev == "HEAD" and not git("status", "--porcelain", "--untracked-files=no"):
        return sha, ROOT
    if working_tree and rev == "HEAD":
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


def run_eval(tree: Path, out: Path, flags: list[str], log: list[str], dataset: str = "metaqa",
             split: str = "test") -> float:
    command_name = "eval"
    if flags and flags[0] in ("sweep", "demo"):
        command_name, flags = flags[0], flags[1:]
    if (out / {"sweep": "sweep.json", "demo": "demo.json"}.get(command_name, "metrics.json")).exists():
        log.append(f"reused {shown(out)}")
        return 0.0
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # -P: `python -m` would put the working directory (this checkout, with whatever it holds now) first on
    # sys.path, ahead of PYTHONPATH, and every side would run today's code; the check below fails loudly.
    data = [] if command_name == "demo" else ["--dataset", dataset, "--split", split]
    command = [sys.executable, "-P", "-m", "stem_jax.cli.main", command_name, *data, "--no-progress", "--out", str(out),
               *flags]
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


def prediction_files(folder: Path) -> dict[str, Path]:
    """``predictions.jsonl`` of an eval run folder, or of every grid point of a sweep folder, by name."""
    if (folder / "points").is_dir():
        return {p.parent.name + "/": p for p in sorted((folder / "points").glob("*/predictions.jsonl"))}
    if (folder / "demo.json").is_file():  # the demo's engines, one folder each
        return {p.parent.name + "/": p for p in sorted(folder.glob("*/predictions.jsonl"))}
    return {"": folder / "predictions.jsonl"}


def compare(before: Path, after: Path) -> dict:
    files_a, files_b = prediction_files(before), prediction_files(after)
    if set(files_a) != set(files_b):
        raise SystemExit(f"different grid points: {sorted(files_a)} vs {sorted(files_b)}")
    a, b = {}, {}
    for name in files_a:
        a.update({name + qid: r for qid, r in read(files_a[name]).items()})
        b.update({name + qid: r for qid, r in read(files_b[name]).items()})
    per_hop: Counter = Counter()
    differ: Counter = Counter()
    answers: Counter = Counter()  # questions whose answer list itself differs (not only scores or evidence)
    fields: Counter = Counter()
    examples = []
    for qid in sorted(set(a) | set(b)):
        x, y = a.get(qid), b.get(qid)
        hop = f"{(x or y).get('hops')}-hop"
        per_hop[hop] += 1
        changed = ["missing"] if x is None or y is None else [k for k in COMPARED if x.get(k) != y.get(k)]
        if changed:
            differ[hop] += 1
            answers[hop] += "missing" in changed or "prediction" in changed
            fields.update(changed)
            if len(examples) < 10:
                examples.append({"id": qid, "fields": changed})
    return {"questions": dict(per_hop), "differ": dict(differ), "answers_differ": dict(answers), "fields": dict(fields),
            "examples": examples, "identical": not differ}


def hop_scores(folder: Path) -> dict[str, dict[str, float]]:
    """Hit@1 and F1 per hop from an eval run's metrics.json ({} for sweeps and the demo): what a difference cost."""
    path = folder / "metrics.json"
    if not path.is_file():
        return {}
    groups = json.loads(path.read_text()).get("groups", {})
    return {hop: {k: group["mean"][k] for k in ("hit_at_1", "f1")} for hop, group in groups.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--case", action="append", choices=tuple(CASES), help="repeatable (default: pattern)")
    parser.add_argument("--gnn-checkpoint", type=Path, default=None)
    parser.add_argument("--dataset", default="metaqa", help="any `stem-jax eval --dataset` name (test split)")
    parser.add_argument("--split", default="test", help="the split every run evaluates (default test)")
    parser.add_argument("--label", default="", help="results go to predictions-identity-DATASET[-LABEL].*")
    parser.add_argument("--flags", default="", help="more eval flags, e.g. '--hops 2 --limit 500' (the run folders "
                        "are named with --label then, so a sample never reuses a full run)")
    parser.add_argument("--after-flags", default="", help="eval flags for the after side only, e.g. a setting the "
                        "before commit lacks set to its old behaviour ('--encoder.dot_dtype float32'); its folder is "
                        "named with --label")
    parser.add_argument("--pair", action="append", default=[], metavar="CASE=BEFORE_DIR:AFTER_DIR",
                        help="compare run folders made elsewhere (repeatable) instead of running eval; --before and "
                        "--after then only name the commits, --commands-file lists the commands that made them")
    parser.add_argument("--commands-file", type=Path, default=None, help="with --pair: the commands, one a line")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "identity")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args(argv)
    if args.pair:
        return compare_pairs(args, argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    trees = dict(before=source_tree(args.before, args.runs), after=source_tree(args.after, args.runs))
    log: list[str] = []
    results, rows = {}, []
    for case in args.case or ["pattern"]:
        flags = list(CASES[case]) + shlex.split(args.flags)
        if "gnn" in case:
            if args.gnn_checkpoint is None:
                raise SystemExit(f"--case {case} needs --gnn-checkpoint")
            flags += ["--gnn-checkpoint", str(args.gnn_checkpoint)]
        folders, seconds = {}, {}
        for side, (sha, tree) in trees.items():
            extra = shlex.split(args.after_flags) if side == "after" else []
            # MetaQA's folders keep their earlier names, so runs made before --dataset are reused
            name = f"{sha}-{case}" if args.dataset == "metaqa" else f"{sha}-{args.dataset}-{case}"
            folders[side] = args.runs / (name + (f"-{args.label}" if (args.flags or extra) and args.label else ""))
            seconds[side] = run_eval(tree, folders[side], flags + extra, log, args.dataset, args.split)
        result = compare(folders["before"], folders["after"])
        result.update(flags=flags, seconds=seconds, folders={k: shown(v) for k, v in folders.items()},
                      scores={side: hop_scores(folder) for side, folder in folders.items()})
        results[case] = result
        for hop in sorted(result["questions"]):
            row = [case, hop, result["questions"][hop], result["differ"].get(hop, 0), result["answers_differ"].get(hop, 0)]
            for key in ("hit_at_1", "f1"):  # in percent, as eval's tables
                row += [f"{100 * result['scores'][side][hop][key]:.3f}" if hop in result["scores"][side] else ""
                        for side in ("before", "after")]
            rows.append(row)
    names = {side: sha for side, (sha, _) in trees.items()}
    table = markdown_table(["case", "hops", "questions", "differ", "answers differ", "Hit@1 before", "Hit@1 after",
                            "F1 before", "F1 after"], rows)
    after_flags = f" with `{args.after_flags}`" if args.after_flags else ""
    text = (f"`stem-jax eval --dataset {args.dataset} --split {args.split} {args.flags}` at {names['before']} (before) and {names['after']} "
            f"(after{after_flags}), compared per question on {', '.join(COMPARED)}.\n\nCommand: `python "
            f"experiments/predictions_identity.py {shlex.join(argv if argv is not None else sys.argv[1:])}`\n\n{table}\n")
    for case, result in results.items():
        text += f"\n{case}: {'identical' if result['identical'] else 'DIFFERENT: ' + json.dumps(result['fields'])}\n"
    name = f"predictions-identity-{args.dataset}" + (f"-{args.label}" if args.label else "")
    write_report(args.out, name, {"meta": run_metadata(), "commits": names, "dataset": args.dataset,
                                  "commands": log, "cases": results}, text)
    print(text)
    return 0 if all(r["identical"] for r in results.values()) else 1


def compare_pairs(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--pair`` mode: compare existing run folders case by case and write the report (no eval is run)."""
    results, rows = {}, []
    for pair in args.pair:
        case, _, dirs = pair.partition("=")
        before, _, after = dirs.partition(":")
        result = compare(Path(before), Path(after))
        result.update(folders={"before": shown(Path(before)), "after": shown(Path(after))})
        results[case] = result
        for hop in sorted(result["questions"]):
            rows.append([case, hop, result["questions"][hop], result["differ"].get(hop, 0),
                         result["answers_differ"].get(hop, 0)])
    names = {"before": git("rev-parse", "--short=7", args.before), "after": git("rev-parse", "--short=7", args.after)}
    commands = args.commands_file.read_text().splitlines() if args.commands_file else []
    table = markdown_table(["case", "hops", "questions", "differ", "answers differ"], rows)
    text = (f"Run folders made at {names['before']} (before) and {names['after']} (after), compared per question on "
            f"{', '.join(COMPARED)}.\n\n{table}\n")
    for case, result in results.items():
        text += f"\n{case}: {'identical' if result['identical'] else 'DIFFERENT: ' + json.dumps(result['fields'])}\n"
    if commands:
        text += "\nCommands:\n\n" + "\n".join(f"    {c}" for c in commands) + "\n"
    name = "predictions-identity" + (f"-{args.label}" if args.label else "")
    write_report(args.out, name, {"meta": run_metadata(), "commits": names, "commands": commands, "cases": results}, text)
    print(text)
    return 0 if all(r["identical"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Complex questions: every row on cwq-e dev (ComplexWebQuestions over GPT-4o-labelled Freebase evidence), over all
of its questions, by kind of question, next to the data's evidence bound and GNN-RAG.

    STEM_DATA_DIR=../shared/data python experiments/cwq_dev.py [--rows pattern,oracle,rog,safe] [--reuse]

Needs, as README "Your own KG" runs them (defaults):

    stem-jax index --dataset files --data-dir $STEM_DATA_DIR/cwq-e
    stem-jax calibrate --dataset files --data-dir $STEM_DATA_DIR/cwq-e --planner oracle
    stem-jax train-planner --dataset files --data-dir $STEM_DATA_DIR/cwq-e

Each row is one ``stem-jax eval --split dev`` run folder under ``runs/cwq-dev/<row>`` (``--reuse``: read a finished
one instead of re-running it). Metrics are over every dev question (353): a question the loader could not answer
(no topic entity found) is a miss. Kinds: several topic entities in the file, one, none (the linker finds it).
The evidence bound (:func:`stem_jax.plan.branches.evidence_bounds`) is what some schema graph over the KG can
yield: a main relation path from one topic plus at most one branch from each other topic (1-2 steps, through
mediators), all meeting at the answer. Writes ``experiments/results/cwq-dev.{json,md}`` with the machine, commit
and load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.metrics import SplitScorer  # noqa: E402
from stem_jax.eval.report import portable_paths  # noqa: E402

ROWS = {
    "pattern": ["--planner", "pattern"],  # the default: what train-planner chose, with its answer scorer
    "pattern-tracer-ranking": ["--planner", "pattern", "--engine.answer_scorer", "off"],
    "oracle": ["--planner", "oracle"],  # the gold relation path from the first topic
    # the evidence bound's best schema graph per question (main path + branches, chosen with the gold answers),
    # traced by STEM: how much of the bound the tracer keeps when it is handed the right tree
    "oracle-tree": ["--plans-file", "{runs}/oracle-tree-plans.jsonl"],
    "rog": ["--plans-file", "{data}/dev.jsonl"],  # RoG's LLM plans (the rog_plans field), traced by STEM
    "safe": ["--method", "safe", "--planner", "pattern"],
}
# GNN-RAG's published per-question results on these 353 dev questions (SOURCES.md): Hit / Hit@1 / F1
PEERS = {"GNN-RAG (LLaMA2-7B reader)": (64.6, 60.6, 58.3), "GNN-RAG+RA": (66.6, 61.5, 59.6)}
KINDS = ("several", "one", "none")
# GNN-RAG (LLaMA2-7B reader) by kind on the same questions, Hit@1 / F1, scored with the engine's metrics from its
# published per-question results (as the issue that staged cwq-e reports them)
PEER_BY_KIND = {"several": (69.2, 70.2), "one": (57.0, 53.5), "none": (50.0, 42.5)}


def kinds(data: Path) -> dict[str, str]:
    """qid -> kind of question by the file's own topic entities."""
    out = {}
    for line in (data / "dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        n = len(record.get("topic_entities") or [])
        out[record["id"]] = "several" if n > 1 else "one" if n == 1 else "none"
    return out


def value_condition_of(data: Path) -> dict[str, str]:
    """qid -> whether the question's wording states a value condition (a date, comparison, superlative or number
    outside its topic names: :func:`stem_jax.data.conditions.value_conditions`), which a KG without literal values
    cannot apply."""
    from stem_jax.data.conditions import value_conditions

    out = {}
    for line in (data / "dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        stated = value_conditions(record["question"], record.get("topic_entities") or [])
        out[record["id"]] = "value condition" if stated else "no value condition"
    return out


def summarise(per_question: dict[str, dict[str, float]], kind_of: dict[str, str]) -> dict[str, dict]:
    """Mean Hit / Hit@1 / F1 over every dev question and per kind; a question with no record is a miss."""
    out = {}
    for kind in ("all", *KINDS):
        qids = [q for q, k in kind_of.items() if kind in ("all", k)]
        rows = [per_question.get(q, {"hit": 0.0, "hit_at_1": 0.0, "f1": 0.0}) for q in qids]
        out[kind] = {"n": len(qids), **{m: sum(r[m] for r in rows) / max(len(rows), 1)
                                        for m in ("hit", "hit_at_1", "f1")}}
    return out


def by_condition(per_question: dict[str, dict[str, float]], condition_of: dict[str, str]) -> dict[str, dict]:
    """Mean Hit / Hit@1 / F1 over the questions that state a value condition and over the rest."""
    out = {}
    for group in ("value condition", "no value condition"):
        rows = [per_question.get(q, {"hit": 0.0, "hit_at_1": 0.0, "f1": 0.0})
                for q, g in condition_of.items() if g == group]
        out[group] = {"n": len(rows), **{m: sum(r[m] for r in rows) / max(len(rows), 1)
                                         for m in ("hit", "hit_at_1", "f1")}}
    return out


def write_tree_plans(data: Path, path: Path) -> int:
    """The evidence bound's best schema graph of each dev question as a plans file (``schemas``); returns how
    many questions have one."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.kg.index import build_index
    from stem_jax.plan.branches import evidence_bounds
    from stem_jax.plan.oracle import strategy_for

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    index = build_index(dataset.triples)
    names = dataset.entity_names or {}
    by_qid = {q.qid: q for q in dataset.questions}
    lines = []
    for qid, found in evidence_bounds(dataset, index=index).items():
        schema = found.schema(lambda i: names.get(index.entities[i], index.entities[i]),
                              strategy_for(by_qid[qid].answers))
        if schema is not None:
            lines.append(json.dumps({"id": qid, "schemas": [{
                "triples": [[t.head, t.relation, t.tail] for t in schema.triples], "answer": schema.answer}]}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def hop_row(hops: int, cache: Path, data: Path) -> dict:
    """A row for a pattern planner whose path ranker enumerates paths of up to ``hops`` steps (that length only:
    ``planner.path_hops=fixed``), trained (when its cache has none yet) and evaluated with its own cache folder, so
    its planner and answer scorer stand apart from the default's."""
    env = {**os.environ, "STEM_CACHE_DIR": str(cache)}
    train = ["train-planner", "--dataset", "files", "--data-dir", str(data), "--no-progress",
             "--planner.path_max_hops", str(hops), "--planner.path_hops", "fixed"]
    if not (cache / f"files-{data.name}" / "planners").is_dir():
        subprocess.run([sys.executable, "-m", "stem_jax.cli.main", *train], env=env, check=True)
    return {"flags": ["--planner", "pattern"], "env": env, "train": "stem-jax " + " ".join(train)}


def run_row(name: str, data: Path, out: Path, kind_of: dict[str, str], reuse: bool,
            extra: dict | None = None) -> dict:
    if name == "oracle-tree":
        write_tree_plans(data, out.parent / "oracle-tree-plans.jsonl")
    flags = extra["flags"] if extra else [f.format(data=data, runs=out.parent) for f in ROWS[name]]
    command = [sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", "files", "--data-dir", str(data),
               "--split", "dev", "--out", str(out), "--no-progress", *flags]
    seconds = None
    if not (reuse and (out / "metrics.json").exists()):
        began = time.perf_counter()
        done = subprocess.run([*command, "--overwrite"], env=extra["env"] if extra else os.environ.copy())
        seconds = time.perf_counter() - began
        if done.returncode != 0:
            return {"command": "stem-jax " + " ".join(command[3:]), "failed": f"exit status {done.returncode}"}
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines() if line.strip()]
    scorer = SplitScorer()
    per_question = {r["id"]: scorer.strict_metrics(r["prediction"], r["ground_truth"]) for r in records}
    mids = sum(1 for r in records for p in r["prediction"] if p.startswith(("m.", "g.")))
    metrics = json.loads((out / "metrics.json").read_text())
    row = {"command": "stem-jax " + " ".join(command[3:]), "seconds": seconds, "mids_returned": mids,
           "planner": metrics.get("planner_info", {}), "by_kind": summarise(per_question, kind_of),
           "by_condition": by_condition(per_question, value_condition_of(data))}
    if extra:
        row["trained_with"] = extra["train"]
    return row


def bound(data: Path, kind_of: dict[str, str], max_hops: int = 2) -> dict:
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.plan.branches import evidence_bounds

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    found = evidence_bounds(dataset, max_hops=max_hops)
    per_question = {q: {"hit": float(b.best_f1 > 0), "hit_at_1": float(b.exact), "f1": b.best_f1}
                    for q, b in found.items()}
    table = summarise(per_question, kind_of)
    for kind in table:
        qids = [q for q, k in kind_of.items() if kind in ("all", k)]
        table[kind]["exact"] = sum(found[q].exact for q in qids if q in found) / max(len(qids), 1)
        table[kind]["with_branch"] = sum(bool(found[q].branches) for q in qids if q in found and found[q].exact)
    return table


def literal_share_of(data: Path) -> float:
    """The share of the KG's entity names (as the ``files`` loader reads them) that read as literal values."""
    from stem_jax.data.conditions import literal_share
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.kg.index import build_index

    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev"))
    names = dataset.entity_names or {}
    return literal_share(names.get(e, e) for e in build_index(dataset.triples).entities)


def machine() -> dict:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "commit": commit.strip(), "dirty": bool(dirty), "load_average": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="pattern,pattern-tracer-ranking,oracle,oracle-tree,rog,safe")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "cwq-dev")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--reuse", action="store_true", help="read finished run folders instead of re-running them")
    parser.add_argument("--hop-caches", default="",
                        help="HOPS=DIR,...: also a pattern row whose path ranker enumerates paths of up to HOPS "
                             "steps, with its own cache folder DIR (trained there first when it has no planner), "
                             "and the evidence bound at HOPS")
    parser.add_argument("--bound-hops", default="", help="H,...: the evidence bound also at paths and branches of "
                        "up to H steps (without a planner row; --hop-caches adds both)")
    args = parser.parse_args()
    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "cwq-e"
    kind_of = kinds(data)
    rows = {name: run_row(name, data, args.runs / name, kind_of, args.reuse) for name in args.rows.split(",")}
    hop_caches = {int(h): Path(d) for h, d in (item.split("=", 1) for item in args.hop_caches.split(",") if item)}
    for hops, cache in hop_caches.items():
        name = f"pattern-paths-{hops}-steps"
        row = run_row(name, data, args.runs / name, kind_of, args.reuse, hop_row(hops, cache, data))
        row.pop("env", None)
        rows[name] = json.loads(json.dumps(row).replace(str(cache), f"$CACHE_{hops}_STEPS"))
    limit = bound(data, kind_of)
    bound_hops = sorted({*hop_caches, *(int(h) for h in args.bound_hops.split(",") if h)})
    wider = {hops: bound(data, kind_of, hops) for hops in bound_hops}
    counts = {k: sum(v == k for v in kind_of.values()) for k in KINDS}

    def cells(by_kind: dict) -> list[str]:
        return [f"{100 * by_kind[k][m]:.1f}" for k in ("all", *KINDS) for m in ("hit", "hit_at_1", "f1")]

    header = ["row", *(f"{k} {m}" for k in (f"all ({len(kind_of)})", *(f"{k} ({counts[k]})" for k in KINDS))
                       for m in ("Hit", "Hit@1", "F1")), "mids returned"]
    body = [[name, *cells(r["by_kind"]), r["mids_returned"]] if "failed" not in r
            else [f"{name} (failed: {r['failed']})", *[""] * 12, ""] for name, r in rows.items()]
    body.append(["evidence bound (any gold / exact set / best F1)", *cells(limit), ""])
    for hops, found in wider.items():
        body.append([f"evidence bound, paths and branches of up to {hops} steps", *cells(found), ""])
    for peer, figures in PEERS.items():
        by_kind = [c for k in KINDS for c in ("", *map(str, PEER_BY_KIND[k]))] if peer.startswith("GNN-RAG (") \
            else [""] * 9
        body.append([f"{peer} (published)", *map(str, figures), *by_kind, ""])
    condition_of = value_condition_of(data)
    groups = ("value condition", "no value condition")
    sizes = {g: sum(v == g for v in condition_of.values()) for g in groups}
    condition_rows = [[name, *(f"{100 * r['by_condition'][g][m]:.1f}" for g in groups for m in ("hit", "hit_at_1", "f1"))]
                      for name, r in rows.items() if "failed" not in r]
    condition_table = table(["row", *(f"{g} ({sizes[g]}) {m}" for g in groups for m in ("Hit", "Hit@1", "F1"))],
                            condition_rows)
    meta = machine()
    md = (f"cwq-e dev, every question (353; a question whose topic the loader could not find is a miss), percent, by "
          f"kind of question (topic entities in the file). Commit {meta['commit'][:10]}"
          f"{' (uncommitted changes)' if meta['dirty'] else ''}, {meta['platform']}, {meta['cpus']} CPUs, load "
          f"average {', '.join(f'{x:.2f}' for x in meta['load_average'])} at {meta['date']}.\n\n"
          + table(header, body)
          + "\n\nEvidence bound: per question, the best schema graph over the KG (a main path of 1-2 steps from one "
            "topic plus at most one branch from each other topic, meeting at the answer or at a mediator on the main "
            "path): Hit = some graph reaches a "
            "gold answer, Hit@1 column = some graph yields exactly the gold set, F1 = the best F1 any one yields.\n"
          + "\nBy whether the question states a value condition (a date, comparison, superlative or number outside "
            "its topic names, `stem_jax.data.conditions.value_conditions`). The KG holds no literal values (share of "
            f"entity names that read as values: {literal_share_of(data):.4f}), so no schema graph can apply such a "
            "condition: the answer is among the entities the rest of the question allows.\n\n"
          + condition_table + "\n")
    args.out.mkdir(parents=True, exist_ok=True)
    for row in rows.values():
        row.pop("env", None)
    result = {"meta": meta, "rows": portable_paths(rows, ROOT, data.parent), "evidence_bound": limit,
              "evidence_bound_by_hops": {str(h): found for h, found in wider.items()}, "peers": PEERS}
    (args.out / "cwq-dev.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "cwq-dev.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

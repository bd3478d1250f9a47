"""SCR on MetaQA-partial: per-hop accuracy, retrieval latency, training cost, and where the loss comes from.

Command (from the repo root; needs the MetaQA KG embeddings (`stem-jax index --dataset metaqa`) and a trained SCR
run (`stem-jax train-scr --dataset metaqa --split dev --limit 2500 --out runs/scr-metaqa`)):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=... python experiments/scr_metaqa.py \
        --checkpoint runs/scr-metaqa --split test --sample 1000 [--min-hops 0]

Runs `Engine.evaluate(method="scr")` (what `stem-jax eval --method scr` runs) on a seeded sample of N questions per
hop (`--sample`; the whole split without it) into runs/scr-metaqa-SPLIT[-sampleN-seedS] (resumable), then reads
predictions.jsonl. Writes experiments/results/scr-metaqa-SPLIT[-sampleN].{json,md}.

Latency: `search` ms per question is the jitted batched beam search (GNN features are computed once at build
time and question vectors once per split in `prepare`, both reported separately), median and p95 over
questions (each question carries its batch's time divided by the batch size), and questions/s over the whole
evaluation loop after `prepare`.

Loss attribution, per question without a hit, from the best (most probable) path against the gold relation path
(qtype): topic not in the KG; gold path reaches no gold answer over the capped neighbour lists (the partial
KB or the hub sample lose it); stopped early (the best path is a
proper prefix of the gold relations); did not stop (the gold relations are a proper prefix of the best path);
wrong relation at hop j; right relations but no gold answer. For questions with a hit, how many have more gold
answers than the beam (K) can return (an F1 ceiling).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from stem_jax.config import StemConfig
from stem_jax.data.sampling import sample_per_hop
from stem_jax.eval.metrics import strict_metrics
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.methods.scr.search import above_cut

RESULTS = Path("experiments/results")


def gold_relations(question, index) -> list[str] | None:
    from stem_jax.plan.oracle import gold_paths

    found = gold_paths(question)
    if not found.paths:
        return None
    return [step.relation + ("" if step.forward else "^-1") for step in found.paths[0][1]]


def reaches_answer(gold, table) -> bool:
    """Whether following the gold relations over the capped neighbour lists reaches a gold answer."""
    frontier = {gold.topic}
    for relation in gold.relations:
        nxt = set()
        for entity in frontier:
            ents, rels, _ = table.edges(entity)
            nxt.update(int(e) for e in ents[rels == relation] if e != gold.topic)
        frontier = nxt
    return bool(frontier & gold.answers)


def attribute(record: dict, gold: list[str] | None, walkable: bool) -> str:
    if record.get("scr_skip"):
        return "topic entity not in the KG"
    if gold is None:
        return "no gold relation path"
    if not walkable:
        return "gold relations reach no gold answer over the capped lists"
    best = record.get("scr_best_relations")
    if best is None:
        return "no path kept (all below the threshold)"
    if best == gold:
        return "right relations, no gold answer"
    if len(best) < len(gold) and gold[: len(best)] == best:
        return f"stopped early (after {len(best)} of {len(gold)} hops)"
    if len(best) > len(gold) and best[: len(gold)] == gold:
        return "did not stop at the answer"
    hop = next(i for i, (a, b) in enumerate(zip(best, gold, strict=False)) if a != b)
    return f"wrong relation at hop {hop + 1}"


CUTS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7]


def run_tag(checkpoint: Path) -> str:
    """``scr`` or ``scr-rel`` (the relation-aware variant), with ``-ft`` when the question encoder is the
    fine-tuned MiniLM (``scr.question_encoder=minilm``), from the run's saved spec."""
    spec = json.loads((Path(checkpoint) / "scr.json").read_text())["spec"]
    tag = "scr-rel" if spec.get("relation_aware") else "scr"
    return tag + ("-ft" if spec.get("question_encoder", "segments") == "minilm" else "")


def cut_sweep(records: list[dict], cuts: list[float]) -> list[list]:
    """Per cut: Hit / Hit@1 / F1 per hop when answers below cut x the best answer's probability are dropped."""
    rows = []
    for cut in cuts:
        per_hop: dict = defaultdict(lambda: defaultdict(list))
        for r in records:
            if not r["ground_truth"]:
                continue
            scores = r.get("scores") or []
            kept = [p for p, _ in above_cut(list(zip(r["prediction"], scores, strict=True)), cut)] if scores else []
            m = strict_metrics(kept, r["ground_truth"])
            for key in ("hit", "hit_at_1", "f1"):
                per_hop[r["hops"]][key].append(m[key])
        row: list = [cut]
        for hop in sorted(per_hop):
            row += [round(100 * statistics.fmean(per_hop[hop][k]), 1) for k in ("hit", "hit_at_1", "f1")]
        rows.append(row)
    return rows


def choose(checkpoint: Path, sample: int | None, dataset: str = "metaqa") -> None:
    """The dev choice of (min_hops, answer_cut) from the dev result files of ``checkpoint``'s variant."""
    tag = run_tag(checkpoint)
    candidates = []
    for path in sorted(RESULTS.glob(f"{tag}-{dataset}-dev-minhops*" + (f"-sample{sample}" if sample else "") + ".json")):
        result = json.loads(path.read_text())
        if result.get("checkpoint") != str(checkpoint):
            continue
        for row in result["cut_sweep"]:
            f1 = statistics.fmean(row[3::3])
            hit1 = statistics.fmean(row[2::3])
            candidates.append(((round(f1, 1), round(hit1, 1)), result["min_hops"], row[0], str(path)))
    if not candidates:
        raise SystemExit(f"no dev result files for {checkpoint}: run --split dev first (one per --min-hops)")
    (f1, hit1), min_hops, cut, source = max(candidates, key=lambda c: (c[0], -c[1], -c[2]))
    choice = {"split": "dev", "checkpoint": str(checkpoint), "min_hops": min_hops, "answer_cut": cut,
              "dev_mean_f1": f1, "dev_mean_hit_at_1": hit1, "from": source,
              "rule": "max mean F1 over hops, then mean Hit@1; ties: smaller min_hops, smaller cut",
              "candidates": [[c[1], c[2], *c[0]] for c in candidates]}
    path = RESULTS / f"{tag}-{dataset}-dev-choice.json"
    path.write_text(json.dumps(choice, indent=2))
    print(json.dumps(choice, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="train-scr run folder")
    parser.add_argument("--dataset", default="metaqa", help="metaqa (default) or wc2014")
    parser.add_argument("--split", default="test")
    parser.add_argument("--sample", type=int, default=None, help="questions per hop (seeded); all without it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subset", type=int, default=None,
                        help="the N questions per hop with the lowest sha256(qid) (compare_methods.py's question set)")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default runs/scr-metaqa-...)")
    parser.add_argument("--min-hops", dest="min_hops", type=int, default=None,
                        help="override scr.min_hops (0 = the paper: a beam may stop on the topic)")
    parser.add_argument("--settings-from", dest="settings_from", type=Path, default=None,
                        help="a dev choice file (written by --choose) whose min_hops and answer_cut this run uses")
    parser.add_argument("--choose", action="store_true",
                        help="read this checkpoint's dev result files (--split dev, one per --min-hops) and write the "
                             "dev choice of (min_hops, answer_cut): best mean F1 over hops, then mean Hit@1")
    args = parser.parse_args()
    if args.choose:
        choose(args.checkpoint, args.sample, args.dataset)
        return

    from stem_jax.engine import Engine
    from stem_jax.eval.loop import evaluate_method
    from stem_jax.methods.scr.supervision import gold_steps

    config = StemConfig()
    chosen_where = "ScrConfig default (not calibrated)"
    if args.settings_from is not None:
        choice = json.loads(args.settings_from.read_text())
        if choice.get("split") != "dev":
            raise SystemExit(f"{args.settings_from} was not chosen on dev")
        config = dataclasses.replace(config, scr=dataclasses.replace(
            config.scr, min_hops=int(choice["min_hops"]), answer_cut=float(choice["answer_cut"])))
        chosen_where = f"chosen on dev validation questions ({args.settings_from})"
    if args.min_hops is not None:
        config = dataclasses.replace(config, scr=dataclasses.replace(config.scr, min_hops=args.min_hops))
        chosen_where = "--min-hops on the command line"
    if args.split == "dev":  # calibration: keep every answer, sweep the cut offline
        config = dataclasses.replace(config, scr=dataclasses.replace(config.scr, answer_cut=0.0))
    tag = run_tag(args.checkpoint)
    kg = "" if args.dataset == "metaqa" else f"-{args.dataset}"  # MetaQA keeps its run folder names
    variant = f"-minhops{config.scr.min_hops}" + (f"-cut{config.scr.answer_cut:g}" if config.scr.answer_cut else "")
    suffix = f"-sample{args.sample}-seed{args.seed}" if args.sample else ""
    out = args.out or Path("runs") / f"{tag}{kg}-{args.split}{variant}{suffix}"
    began = time.perf_counter()
    engine = Engine.open(args.dataset, split=args.split, config=config,
                         method_options={"scr": {"checkpoint": args.checkpoint}}, log=print)
    questions = engine.dataset.questions
    report = Path(args.checkpoint) / "train-scr.json"
    trained_on = (json.loads(report.read_text()).get("split") if report.is_file() else None) or "dev"
    if args.split == trained_on:  # only the hash-split validation part: training never saw these questions
        from stem_jax.data.splits import hash_split

        questions = hash_split(questions, 0.1)[1]
    if args.subset:
        questions = sample_per_hop(questions, args.subset, rule="lowest_hash")
        args.sample, suffix = None, f"-subset{args.subset}"
        out = args.out or Path("runs") / f"{tag}{kg}-{args.split}{variant}{suffix}"
    questions = sample_per_hop(questions, args.sample or None, args.seed)
    method = engine.method("scr")
    build_seconds = time.perf_counter() - began
    print(f"SCR {args.checkpoint} (step {method.info['step']}); {len(questions)} {args.split} questions -> {out}")
    began = time.perf_counter()
    # the same call as compare_methods.py, so its SCR rows can resume these run folders
    summary = evaluate_method(method, questions, out, chunk_size=config.engine.chunk_questions, show_progress=False,
                              log=print)
    eval_seconds = time.perf_counter() - began
    (out / "compare-wall.json").write_text(json.dumps({"wall_seconds": eval_seconds, "questions": len(questions)}))

    records = {}
    with (out / "predictions.jsonl").open() as f:
        for line in f:
            record = json.loads(line)
            records[record["id"]] = record
    index = engine.index
    cap_table = method.neighbours
    per_hop: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    losses: dict[str, Counter] = defaultdict(Counter)
    top_losses: dict[str, Counter] = defaultdict(Counter)  # the same, for Hit@1: why the top answer is not gold
    beam = engine.config.scr.beam
    for q in questions:
        record = records[q.qid]
        hop = f"{q.hops}-hop"
        metrics = strict_metrics(record["prediction"], record["ground_truth"])
        for key in ("hit", "hit_at_1", "f1"):
            per_hop[hop][key].append(metrics[key])
        per_hop[hop]["ms"].append(record["ms"].get("search", 0.0))
        if record.get("coverage") is not None:
            per_hop[hop]["coverage"].append(record["coverage"])
        if metrics["hit"]:
            losses[hop]["hit"] += 1
            if len(record["ground_truth"]) > beam:
                losses[hop][f"hit, but more gold answers than K={beam}"] += 1
            if metrics["hit_at_1"]:
                top_losses[hop]["top answer gold (Hit@1)"] += 1
            else:  # a gold answer in the beam, but the most probable answer is not one
                top_losses[hop]["gold in the beam, top answer not gold; best path: "
                                + attribute(record, gold_relations(q, index), True)] += 1
            continue
        golds = gold_steps([q], index, Counter())
        walkable = bool(golds) and reaches_answer(golds[0], cap_table)
        reason = attribute(record, gold_relations(q, index), walkable)
        losses[hop][reason] += 1
        top_losses[hop]["no gold answer in the beam; best path: " + reason] += 1

    rows, payload_hops = [], {}
    all_ms = [ms for h in per_hop.values() for ms in h["ms"]]
    for hop in sorted(per_hop):
        h = per_hop[hop]
        stats = {"n": len(h["hit"]), "hit": 100 * float(np.mean(h["hit"])), "hit_at_1": 100 * float(np.mean(h["hit_at_1"])),
                 "f1": 100 * float(np.mean(h["f1"])),
                 "coverage": 100 * float(np.mean(h["coverage"])) if h["coverage"] else None,
                 "ms_median": statistics.median(h["ms"]), "ms_p95": float(np.percentile(h["ms"], 95))}
        payload_hops[hop] = stats
        rows.append([hop, stats["n"], round(stats["hit"], 1), round(stats["hit_at_1"], 1), round(stats["f1"], 1),
                     None if stats["coverage"] is None else round(stats["coverage"], 1),
                     round(stats["ms_median"], 2), round(stats["ms_p95"], 2)])
    search_seconds = sum(all_ms) / 1000
    summary_path = Path(args.checkpoint) / "train-summary.json"
    train_summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {
        "seconds": None, "steps": method.info["step"], "params_sha": method.info["params_sha"]}
    train_config = json.loads((Path(args.checkpoint) / "scr.json").read_text()).get("config", {})
    loss_rows = []
    for hop in sorted(losses):
        for reason, n in losses[hop].most_common():
            loss_rows.append([hop, reason, n])
    table = markdown_table(["hops", "questions", "Hit", "Hit@1", "F1", "coverage", "search ms median", "search ms p95"],
                           rows)
    timing = markdown_table(["measure", "value"], [
        ["questions", len(questions)],
        ["questions/s (evaluation loop after prepare)",
         round(len(questions) / max(eval_seconds - summary.get("prepare_seconds", 0.0), 1e-9), 1)],
        ["questions/s (search only)", round(len(questions) / max(search_seconds, 1e-9), 1)],
        ["question encoding s (prepare, frozen MiniLM)", round(summary.get("prepare_seconds", 0.0), 1)],
        ["GNN features over the whole KG s (once)", summary.get("scr_gnn_seconds")],
        ["engine + method build s", round(build_seconds, 1)],
        ["training s (train-scr, all runs)", train_summary["seconds"]],
        ["training steps x questions per step", f"{train_summary['steps']} x {train_config.get('train_batch')}"],
        ["checkpoint params", method.info["params_sha"]],
    ])
    losses_md = markdown_table(["hops", "outcome (best path vs gold relations)", "questions"], loss_rows)
    top_rows = [[hop, reason, n] for hop in sorted(top_losses) for reason, n in top_losses[hop].most_common()]
    losses_md += ("\n\nWhere Hit@1 is lost (per question: is the most probable answer gold; if not, the most probable "
                  "path against the gold relations):\n\n"
                  + markdown_table(["hops", "outcome", "questions"], top_rows))
    sweep = cut_sweep(list(records.values()), CUTS) if args.split == "dev" else None
    sweep_md = ("\n\nanswer-cut sweep (keep answers with >= cut x the best answer's probability; Hit / Hit@1 / F1 "
                "per hop):\n\n" + markdown_table(["cut", "1h Hit", "1h H@1", "1h F1", "2h Hit", "2h H@1", "2h F1",
                                                  "3h Hit", "3h H@1", "3h F1"], sweep)) if sweep else ""
    markdown = (f"{method.name} on {'MetaQA-partial' if args.dataset == 'metaqa' else args.dataset} {args.split}"
                + (" (hash-split validation questions, never trained on)" if args.split == trained_on else
                   " (never trained on)" if args.split == "dev" else "")
                + (f" (seeded sample of {args.sample} per hop)" if args.sample else
                   f" (stratified subset: {args.subset} per hop, lowest sha256(qid))" if args.subset else " (full split)")
                + f", checkpoint {args.checkpoint} step {method.info['step']}"
                + f"{' (best validation)' if method.info.get('best') else ''}; min_hops={config.scr.min_hops}, "
                + f"answer_cut={config.scr.answer_cut} ({chosen_where})\n\n" + table + "\n\n" + timing + "\n\nWhere the loss comes from:\n\n"
                + losses_md + sweep_md)
    print("\n" + markdown)
    payload = {"meta": run_metadata(), "dataset": args.dataset, "split": args.split, "sample_per_hop": args.sample, "seed": args.seed,
               "method": method.name, "min_hops": config.scr.min_hops, "answer_cut": config.scr.answer_cut,
               "settings_chosen": chosen_where, "cut_sweep": sweep,
               "checkpoint": str(args.checkpoint), "fingerprint": method.fingerprint(), "per_hop": payload_hops,
               "losses": {h: dict(c) for h, c in losses.items()},
               "hit_at_1_losses": {h: dict(c) for h, c in top_losses.items()}, "eval_summary": summary, "train": train_summary,
               "eval_seconds": eval_seconds, "build_seconds": build_seconds, "search_seconds": search_seconds}
    paths = write_report(RESULTS, f"{tag}-{args.dataset}-{args.split}{variant}" + (f"-sample{args.sample}" if args.sample else "")
                         + (f"-subset{args.subset}" if args.subset else ""),
                         payload, markdown)
    print(f"\nwrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()

"""SAFE on MetaQA-partial: per-hop accuracy, retrieval latency, and where the loss comes from.

Command (from the repo root; needs the MetaQA KG embeddings (`stem-jax index --dataset metaqa`) and, for the
pattern planner, `stem-jax train-planner --dataset metaqa`):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=... python experiments/safe_metaqa.py --split test --sample 1000

Each variant runs `Engine.evaluate(method="safe")` (what `stem-jax eval --method safe --planner P` runs) on a
seeded sample of N questions per hop (`--sample`; the whole split without it) into
runs/safe-metaqa-SPLIT-P[-sampleN-seedS] (resumable). With `--split dev` the script keeps every answer and sweeps
SAFE's answer margin offline (the cut is calibrated on dev; test runs use SafeConfig's default). Tens of ms per
question on a CPU (3-hop slowest). Writes experiments/results/safe-metaqa-SPLIT[-sampleN].{json,md}.

Loss attribution (per question, from predictions.jsonl; the pseudo graph of the oracle planner is the gold path):
value retrieval (topic entity among SimEnt), ADJ (some aligned query graph keeps the pseudo graph's relations),
type derivation (a gold answer has the answer node's derived type), matching (no hit although all of those hold),
and how many questions have more gold answers than k_retrieval matches can hold.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from stem_jax.data.sampling import sample_per_hop
from stem_jax.eval.metrics import strict_metrics
from stem_jax.eval.report import markdown_table, run_metadata, write_report

RESULTS = Path("experiments/results")
RETRIEVAL_STAGES = ("value", "adj", "match")  # per-question work after planning and text encoding


# "+para" variants render the planner's templates with relation phrases that are not KG ids
# (stem_jax.methods.safe.phrases, --safe.relation_phrases=true), so ADJ has to find the KG's relations from the
# typed-triple text alone, as with the words SAFE's LLM writes.
from stem_jax.methods.safe.phrases import METAQA_PHRASES as PARAPHRASES  # noqa: E402

UNPARAPHRASE = {v: k for k, v in PARAPHRASES.items()}


def run_variant(split: str, variant: str, per_hop: int | None, seed: int,
                overrides: dict[str, str], rescore: bool = False) -> tuple[Path, float | None, dict, list]:
    """``variant``: a planner name, optionally ``+para`` (paraphrased relations) and ``/noadj`` (w/o ADJ) or ``/kN``."""
    from stem_jax.config import StemConfig, apply_overrides
    from stem_jax.engine import Engine

    name, *suffixes = variant.split("/")
    planner, _, para = name.partition("+")
    overrides = dict(overrides)
    if para:
        overrides["safe.relation_phrases"] = "true"
    for ablation in suffixes:
        if ablation == "noadj":
            overrides["safe.use_adj"] = "false"
        elif ablation == "inj":  # injective matching (a KG entity binds at most one query node)
            overrides["safe.injective"] = "true"
        elif ablation == "noinj":
            overrides["safe.injective"] = "false"
        elif ablation.startswith("k"):  # /k100: keep the top 100 matches per query graph instead of 10
            overrides["safe.k_retrieval"] = ablation[1:]
        else:
            raise SystemExit(f"unknown variant suffix /{ablation}: use /noadj, /inj, /noinj or /kN")
    tag = f"safe-metaqa-{split}-{planner}{'-para' if para else ''}" + "".join(f"-{a}" for a in suffixes)
    tag += f"-sample{per_hop}-seed{seed}" if per_hop else ""
    out = Path("runs") / tag
    if rescore:  # report from the finished run folder, without re-running anything
        from stem_jax.data.registry import DatasetSpec, load_dataset
        from stem_jax.eval.scoring import score_predictions

        questions = sample_per_hop(list(load_dataset(DatasetSpec(name="metaqa", split=split)).questions), per_hop or None, seed)
        return out, None, score_predictions(out / "predictions.jsonl", {q.qid for q in questions}), questions
    engine = Engine.open("metaqa", config=apply_overrides(StemConfig(), overrides), planner=planner, split=split,
                         log=print)
    questions = sample_per_hop(list(engine.dataset.questions), per_hop or None, seed)
    began = time.perf_counter()
    summary = engine.evaluate(out, questions=questions, method="safe", show_progress=False)
    return out, time.perf_counter() - began, summary, questions


def variant_k(variant: str, overrides: dict[str, str], default: int) -> int:
    """The k_retrieval a variant ran with (``/kN`` suffix, else the override, else the default)."""
    for ablation in variant.split("/")[1:]:
        if ablation.startswith("k"):
            return int(ablation[1:])
    return int(overrides.get("safe.k_retrieval", default))


def read(out: Path) -> list[dict]:
    with (out / "predictions.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def latency(records: list[dict]) -> dict[str, float]:
    per_question = [sum(r["ms"].get(s, 0.0) for s in RETRIEVAL_STAGES) for r in records]
    mean = statistics.fmean(per_question) if per_question else 0.0
    return {"median_ms": float(np.median(per_question)), "p95_ms": float(np.percentile(per_question, 95)),
            "mean_ms": mean, "questions_per_s": 1000.0 / mean if mean else 0.0,
            **{f"{s}_ms_mean": statistics.fmean(r["ms"].get(s, 0.0) for r in records) for s in RETRIEVAL_STAGES}}


def loss_attribution(records: list[dict], types_of: dict[str, set[str]], k_retrieval: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for hop in sorted({r["hops"] for r in records}):
        rows = [r for r in records if r["hops"] == hop and r["ground_truth"]]
        counts = defaultdict(int)
        for r in rows:
            hit = strict_metrics(r["prediction"], r["ground_truth"])["hit"] > 0
            counts["questions"] += 1
            counts["hit"] += hit
            topic_found = r["question_topic"] in (r.get("anchor_candidates") or [])
            pseudo = [UNPARAPHRASE.get(rel, rel) for rel in (r.get("pseudo_relations") or [[]])[0]]
            aligned = any(rel == pseudo for rel in (r.get("qg_relations") or []))
            answer_type = next((t for t, rel in zip(r.get("answer_types") or [], r.get("qg_relations") or [],
                                                    strict=False) if rel == pseudo), None)
            typed = answer_type is None or any(answer_type in types_of.get(a, set()) for a in r["ground_truth"])
            counts[f"more gold answers than k_retrieval ({k_retrieval})"] += len(r["ground_truth"]) > k_retrieval
            if hit:
                continue
            if not topic_found:
                counts["lost: topic entity not in SimEnt"] += 1
            elif not aligned:
                counts["lost: ADJ dropped the pseudo graph's relations"] += 1
            elif not typed:
                counts["lost: no gold answer has the answer node's derived type"] += 1
            elif not hit:
                counts["lost: matching (aligned, typed, still no hit)"] += 1
        out[f"{hop}-hop"] = dict(counts)
    return out


def margin_sweep(records: list[dict], margins: list[float]) -> list[list]:
    rows = []
    for margin in margins:
        per_hop = defaultdict(lambda: defaultdict(list))
        for r in records:
            if not r["ground_truth"]:
                continue
            if r["scores"]:
                best = 1.0 / r["scores"][0] - 1.0
                kept = [p for p, s in zip(r["prediction"], r["scores"], strict=True) if 1.0 / s - 1.0 <= best + margin + 1e-9]
            else:
                kept = []
            m = strict_metrics(kept, r["ground_truth"])
            for key in ("hit", "hit_at_1", "f1"):
                per_hop[r["hops"]][key].append(m[key])
        row = ["all" if margin == float("inf") else margin]
        for hop in sorted(per_hop):
            row += [round(100 * statistics.fmean(per_hop[hop][k]), 1) for k in ("hit", "hit_at_1", "f1")]
        rows.append(row)
    return rows


def main_script(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=["test", "dev"])
    parser.add_argument("--sample", type=int, default=None, help="seeded sample of N questions per hop (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--planners", default="oracle,pattern",
                        help="variants: a planner name, optionally +para (paraphrased relations) and /noadj (w/o ADJ) "
                             "or /kN (k_retrieval = N)")
    parser.add_argument("--rescore", action="store_true", help="only rebuild the report from finished run folders")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. safe.k_retrieval=20")
    args = parser.parse_args(argv)
    from stem_jax.config import StemConfig
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.kg.index import build_index
    from stem_jax.methods.safe.schema import derive_schema

    cfg = StemConfig().safe
    dataset = load_dataset(DatasetSpec(name="metaqa", split=args.split, limit=1))
    index = build_index(dataset.triples)
    schema = derive_schema(index, containment=cfg.containment, min_support=cfg.min_support,
                           min_confidence=cfg.min_confidence, min_share=cfg.min_share)
    types_of = {index.entities[e]: {schema.type_names[c] for c in np.flatnonzero(row)}
                for e, row in enumerate(schema.entity_types)}
    overrides = dict(item.split("=", 1) for item in args.overrides)
    if args.split == "dev":
        overrides["safe.answer_margin"] = "-1"  # keep every answer; the cut is swept offline below
    flags = [f"--{k}={v}" for k, v in overrides.items()]
    began = time.perf_counter()
    payload: dict = {"meta": run_metadata(), "split": args.split, "sample_per_hop": args.sample, "seed": args.seed,
                     "flags": flags,
                     "safe_config": cfg.__dict__, "variants": {}}
    lines = [f"# SAFE on MetaQA-partial {args.split}" + (f" (seeded sample: {args.sample} questions per hop, seed "
                                                         f"{args.seed})" if args.sample else " (full split)"),
             "", f"commit {payload['meta'].get('commit')}, {payload['meta'].get('machine')}; flags {' '.join(flags) or '-'}",
             ""]
    name = f"safe-metaqa-{args.split}" + (f"-sample{args.sample}" if args.sample else "")
    previous = {}
    if args.rescore and (RESULTS / f"{name}.json").exists():  # keep the wall times the runs were measured with
        previous = json.loads((RESULTS / f"{name}.json").read_text()).get("variants", {})
    for planner in args.planners.split(","):
        out, wall, metrics, questions = run_variant(args.split, planner, args.sample, args.seed, overrides,
                                                        args.rescore)
        if wall is None:
            wall = previous.get(planner, {}).get("wall_seconds")
        wanted = {q.qid for q in questions}
        records = [r for r in read(out) if r["id"] in wanted]
        by_id = {q.qid: q for q in questions}
        for r in records:
            question = by_id.get(r["id"])
            r["question_topic"] = question.topic_entities[0] if question and question.topic_entities else None
        variant = {"run": str(out), "wall_seconds": wall, "metrics": metrics.get("groups", metrics),
                   "latency": latency(records), "loss": loss_attribution(records, types_of, variant_k(planner, overrides, cfg.k_retrieval)),
                   "records": len(records)}
        if args.split == "dev":
            margins = [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, float("inf")]
            variant["margin_sweep"] = margin_sweep(records, margins)
        payload["variants"][planner] = variant
        wall_text = f"wall {wall:.0f}s" if wall is not None else "rescored from the run folder"
        lines += [f"## planner {planner} ({len(records)} questions, {wall_text})", ""]
        rows = []
        for hop in ("1-hop", "2-hop", "3-hop"):
            group = (metrics.get("groups") or {}).get(hop) or metrics.get(hop) or {}
            mean = group.get("mean", group)
            rows.append([hop, group.get("n", ""), *(round(100 * mean.get(k, float("nan")), 1)
                                                        for k in ("hit", "hit_at_1", "f1", "coverage"))])
        lines += [markdown_table(["hops", "questions", "Hit", "Hit@1", "F1", "coverage"], rows), ""]
        lat = variant["latency"]
        lines += [f"retrieval (value retrieval + ADJ + matching) per question: median {lat['median_ms']:.1f} ms, "
                  f"p95 {lat['p95_ms']:.1f} ms, mean {lat['mean_ms']:.1f} ms = {lat['questions_per_s']:.1f} "
                  f"questions/s (stage means: value {lat['value_ms_mean']:.1f}, ADJ {lat['adj_ms_mean']:.1f}, "
                  f"match {lat['match_ms_mean']:.1f} ms)", ""]
        keys = sorted({k for v in variant["loss"].values() for k in v})
        lines += ["loss attribution (questions):", "",
                  markdown_table(["hops", *keys], [[h, *(v.get(k, 0) for k in keys)] for h, v in variant["loss"].items()]),
                  ""]
        if args.split == "dev":
            lines += ["answer-margin sweep (Hit / Hit@1 / F1 per hop; answers within margin of the best kept):", "",
                      markdown_table(["margin", "1h Hit", "1h H@1", "1h F1", "2h Hit", "2h H@1", "2h F1", "3h Hit",
                                      "3h H@1", "3h F1"], variant["margin_sweep"]), ""]
    payload["experiment_wall_seconds"] = time.perf_counter() - began
    paths = write_report(RESULTS, name, payload, "\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main_script(sys.argv[1:]))

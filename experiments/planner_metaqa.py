"""Planners on MetaQA-partial: schema P/R/F1, strategy accuracy, planning speed, end-to-end Hit@1/F1.

    STEM_DATA_DIR=../shared/data python experiments/planner_metaqa.py --e2e-limit 300

Needs (built once, resumable):
    stem-jax index --dataset metaqa          # KG embedding caches (~1 h on 2 busy CPU cores)
    stem-jax train-planner --dataset metaqa  # the pattern planner (~1 min)

What it does, all on the MetaQA *test* split (the planner trained on MetaQA dev, split train/val by
qid hash) and on the hand-written paraphrases in experiments/data/metaqa_paraphrases.tsv:

1. Planner quality against the oracle (stem_jax/eval/plan_quality.py) for the Flax head (mlp)
   and the nearest-neighbour baseline (knn) on the full test split: structural and
   relation-level schema P/R/F1 (eqs. 45-47), template accuracy, strategy accuracy overall and
   per answer count (Table 15), with the strategy baselines.
2. Planning speed: questions/s of the whole planner (MiniLM encoding of the masked question +
   head + beam instantiation) on 2048 test questions, uncached, and of the head alone.
3. End to end (plan -> anchor -> trace -> answers, LLM-free) on the first ``--e2e-limit``
   questions per hop (the CLI's ``--limit``): oracle vs pattern (B=4, B=1) with
   ``engine.relation_bonus`` false and true; the pattern plans go through a TensorStore plan
   store (stem_jax/plan/store.py) and are read back from it. The same for the paraphrases.

Writes experiments/results/planner-metaqa.{json,md}. Each end-to-end row can be re-made with
``stem-jax eval --dataset metaqa --limit N --planner {oracle,pattern} --planner.beam=B
--engine.relation_bonus={false,true}``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from paper_common import metaqa_paraphrases, parse_or_render, write_rendered

MIN_PROB = 0.3  # confidence-pruned beam: a round value fixed before looking at any pruned result, not tuned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--e2e-limit", type=int, default=300, help="questions per hop for the end-to-end rows")
    parser.add_argument("--quality-limit", type=int, default=None, help="questions per hop for planner quality (all)")
    parser.add_argument("--speed-questions", type=int, default=2048)
    parser.add_argument("--skip-e2e", action="store_true")
    args = parse_or_render(parser, "planner-metaqa", render_markdown)

    from stem_jax.config import EncoderConfig, StemConfig, apply_overrides, as_dict, default_cache_dir
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.encoder import get_encoder
    from stem_jax.encoder.cache import open_or_build, texts_fingerprint
    from stem_jax.eval.plan_quality import PlanQuality, strategy_majority_baseline
    from stem_jax.eval.report import run_metadata
    from stem_jax.plan.oracle import OraclePlanner
    from stem_jax.plan.pattern import PatternPlanner
    from stem_jax.plan.question_text import mask_topics, topic_names, unique_texts
    from stem_jax.plan.templates import template_of

    began = time.perf_counter()
    cache = default_cache_dir()
    encoder = get_encoder(EncoderConfig())
    test, index, paraphrases = metaqa_paraphrases(args.quality_limit)
    planner_dir = cache / "metaqa" / "planners" / f"pattern-{EncoderConfig().name}"  # train-planner's default
    planner = PatternPlanner.load(planner_dir, encoder=encoder, index=index)
    oracle = OraclePlanner()

    def cached_embed(texts: list[str]) -> np.ndarray:
        folder = cache / "metaqa" / "question-texts" / f"masked-{texts_fingerprint(texts)[:16]}.zarr"
        return open_or_build(folder, texts, encoder, 4096, progress=False).array.astype(np.float32)

    import subprocess

    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True, check=False, cwd=Path(__file__).parent).stdout.strip())
    payload: dict = {"meta": {**run_metadata(), "working_tree_dirty": dirty},
                     "command": "python " + " ".join(sys.argv), "planner_dir": str(planner_dir),
                     "training_report": {k: v for k, v in planner.report.items() if k != "history"}}

    # ---- 1. planner quality -------------------------------------------------------------------
    def embed_questions(questions) -> np.ndarray:
        distinct, inverse = unique_texts([mask_topics(q.text, topic_names(q, None))[0] for q in questions])
        return cached_embed(distinct)[inverse]

    def quality(questions, method: str, type_filter: bool) -> dict:
        probs, breadth = planner.score_embeddings(embed_questions(questions), method)
        planner.beam, planner.type_filter = 4, type_filter
        beams = planner.beams_from_scores(questions, probs, breadth)
        acc = PlanQuality()
        for q, b in zip(questions, beams, strict=True):
            acc.add(q, oracle.plan(q), [e.schema for e in b], topic_names(q, None))
        return acc.summary()

    def template_majority(questions) -> float:
        """Strategy accuracy of the per-template training majority, given the gold template."""
        keys = {t: i for i, t in enumerate(planner.templates)}
        right = []
        for q in questions:
            gold = oracle.plan(q)[0]
            t = keys.get(template_of(gold, list(q.topic_entities)))
            guess = "Breadth" if t is not None and planner.prior_breadth[t] >= 0.5 else "Precision"
            right.append(guess == gold.strategy)
        return float(np.mean(right))

    payload["quality"] = {}
    for name, questions in (("test", test.questions), ("paraphrases", paraphrases)):
        payload["quality"][name] = {
            "questions": len(questions),
            **{f"{m}{'+type' if f else ''}": quality(questions, m, f) for m in ("mlp", "knn") for f in (False, True)},
            "strategy_baselines": {**strategy_majority_baseline(questions),
                                   "template_majority_given_gold_template": template_majority(questions)},
        }
        print(f"quality on {name}: done [{time.perf_counter() - began:.0f}s]", flush=True)

    # ---- 2. planning speed ----------------------------------------------------------------------
    sample = test.questions[: args.speed_questions]
    planner.beam, planner.embed_fn = 4, None
    planner.plan_batch(sample)  # first call compiles the encoder's and the head's shapes; time the second
    t0 = time.perf_counter()
    planner.plan_batch(sample)
    full = time.perf_counter() - t0
    x = embed_questions(sample)
    t0 = time.perf_counter()
    probs, breadth = planner.score_embeddings(x, "mlp")
    planner.beams_from_scores(sample, probs, breadth)
    head = time.perf_counter() - t0
    t0 = time.perf_counter()
    planner.score_embeddings(x, "knn")
    knn = time.perf_counter() - t0
    planner.plan_batch(paraphrases)
    t0 = time.perf_counter()
    planner.plan_batch(paraphrases)
    para = time.perf_counter() - t0
    payload["speed"] = {"questions": len(sample), "pattern_mlp_with_encoding_qps": len(sample) / full,
                        "paraphrases_with_encoding_qps": len(paraphrases) / para,
                        "distinct_wordings_in_sample": len(unique_texts(
                            [mask_topics(q.text, topic_names(q, None))[0] for q in sample])[0]),
                        "pattern_mlp_head_and_beam_only_qps": len(sample) / head,
                        "pattern_knn_scoring_only_qps": len(sample) / knn}
    print(f"speed: {payload['speed']}", flush=True)

    # ---- 3. end to end --------------------------------------------------------------------------
    if not args.skip_e2e:
        from stem_jax.kg.embeddings import build_kg_embeddings, cache_folder
        from stem_jax.methods.stem import StemPipeline as Evaluator
        from stem_jax.methods.stem import evaluate
        from stem_jax.plan.base import SingleQuestionPlanner
        from stem_jax.plan.store import write_plan_store

        e2e = load_dataset(DatasetSpec(name="metaqa", split="test", limit=args.e2e_limit))
        embeddings = build_kg_embeddings(index, encoder, cache_folder(cache, "metaqa", index, encoder),
                                         chunk_rows=4096, progress=False)
        payload["e2e"] = {"limit_per_hop": args.e2e_limit, "rows": []}
        runs = Path("runs") / "planner-metaqa"
        shutil.rmtree(runs, ignore_errors=True)  # evaluate() resumes run folders; start from scratch
        for set_name, questions in (("test", e2e.questions), ("paraphrases", paraphrases)):
            stores = {}
            for beam, min_prob in ((4, 0.0), (1, 0.0), (4, MIN_PROB)):
                planner.beam, planner.min_prob, planner.embed_fn = beam, min_prob, cached_embed
                planner.method, planner.type_filter = "mlp", True
                label = f"B{beam}" + (f"-p{min_prob}" if min_prob else "")
                store_path = runs / f"plans-{set_name}-pattern-mlp-{label}"
                t0 = time.perf_counter()
                stores[label] = write_plan_store(store_path, questions, planner, index, beam=4, chunk_rows=512,
                                                 planner_id=f"pattern-mlp-type-{label}")
                print(f"plan store {store_path} [{time.perf_counter() - t0:.0f}s]", flush=True)
            for bonus in (False, True):
                config = apply_overrides(StemConfig(), {"engine.relation_bonus": str(bonus).lower()})
                for label, plan in (("oracle", SingleQuestionPlanner(oracle.plan, "oracle").fn),
                                    ("pattern B=4", stores["B4"].as_planner()),
                                    ("pattern B=1", stores["B1"].as_planner()),
                                    (f"pattern B=4 p>={MIN_PROB}", stores[f"B4-p{MIN_PROB}"].as_planner())):
                    out = runs / f"{set_name}-{label.replace(' ', '').replace('=', '').replace('>', '')}-bonus{int(bonus)}"
                    evaluator = Evaluator(e2e, index, embeddings, encoder, config,
                                          cache_dir=cache / "metaqa" / "schema-texts")
                    t0 = time.perf_counter()
                    summary = evaluate(evaluator, questions, plan, out, show_progress=False, log=lambda _: None)
                    row = {"set": set_name, "planner": label, "relation_bonus": bonus,
                           "seconds": time.perf_counter() - t0, "plan_skips": summary["plan_skips"],
                           "groups": {g: {"n": s["n"], **{k: s["mean"][k] for k in ("hit_at_1", "f1", "hit")}}
                                      for g, s in {**summary["groups"], "all": summary["overall"]}.items()}}
                    payload["e2e"]["rows"].append(row)
                    print(f"e2e {set_name} {label} bonus={bonus}: "
                          f"{ {g: round(100 * v['hit_at_1'], 1) for g, v in row['groups'].items()} } "
                          f"[{row['seconds']:.0f}s]", flush=True)
        payload["e2e"]["config"] = as_dict(StemConfig())
    payload["seconds"] = time.perf_counter() - began
    return write_rendered(args.out, "planner-metaqa", payload, render_markdown, indent=2)


def render_markdown(payload: dict, markdown_table) -> str:
    meta = payload["meta"]
    lines = ["# Planners on MetaQA-partial (test split; trained on MetaQA dev)\n",
             f"Command: `{payload['command']}`  ",
             f"Machine: {meta['machine']}, {meta['cpu_count']} CPUs, jax {meta['jax']} ({meta['backend']}), "
             f"commit {meta['commit']}{' + uncommitted changes' if meta.get('working_tree_dirty') else ''}, "
             f"{meta['time_utc']}\n"]
    tr = payload["training_report"]
    lines.append(f"Training: {tr['train_questions']} questions, {tr['templates']} templates; validation "
                 f"({tr['val_questions']} questions, qid hash) template top-1 mlp {tr['mlp']['template']['top1']:.3f}, "
                 f"knn {tr['knn']['template']['top1']:.3f}.\n")
    lines.append("## Planner quality vs the oracle (top-1 beam; percent)\n")
    lines.append("Structural = canonical (head, relation, tail) triples with question entities and DFS-numbered "
                 "placeholders; relation = multiset of relation names. Strategy is compared with the oracle's rule "
                 "(one gold answer -> Precision).\n")
    rows = []
    for set_name, q in payload["quality"].items():
        for method in ("mlp", "mlp+type", "knn", "knn+type"):
            for group, s in q[method].items():
                if group == "skipped":
                    continue
                rows.append([set_name, method, group, s["n"], 100 * s["structural_precision"], 100 * s["structural_recall"],
                             100 * s["structural_f1"], 100 * s["relation_f1"], 100 * s["template_top1"],
                             100 * s["template_in_beam"], 100 * s.get("strategy_correct", 0),
                             100 * s.get("strategy_ans_eq_1_precision", float("nan")),
                             100 * s.get("strategy_ans_ge_2_breadth", float("nan"))])
    lines.append(markdown_table(["set", "method", "hops", "n", "struct P", "struct R", "struct F1", "rel F1",
                                 "template top-1", "template in B=4", "strategy acc", "Ans=1: Precision",
                                 "Ans>=2: Breadth"], rows))
    lines.append("\nStrategy baselines (accuracy, percent):\n")
    lines.append(markdown_table(["set", "always Breadth", "always Precision", "template majority (gold template)"],
                                [[s, 100 * q["strategy_baselines"]["always_breadth"],
                                  100 * q["strategy_baselines"]["always_precision"],
                                  100 * q["strategy_baselines"]["template_majority_given_gold_template"]]
                                 for s, q in payload["quality"].items()]))
    sp = payload["speed"]
    lines.append(f"\n## Planning speed ({sp['questions']} test questions, CPU)\n")
    lines.append(markdown_table(["what", "questions/s"], [
        [f"pattern (mlp, type filter): MiniLM encoding of the masked question + head + beam "
         f"({sp['distinct_wordings_in_sample']} distinct masked wordings among them, encoded once each)",
         sp["pattern_mlp_with_encoding_qps"]],
        ["the same on the paraphrases (every wording distinct)", sp["paraphrases_with_encoding_qps"]],
        ["pattern (mlp): head + beam only (embeddings cached)", sp["pattern_mlp_head_and_beam_only_qps"]],
        ["pattern (knn): scoring only (embeddings cached)", sp["pattern_knn_scoring_only_qps"]],
    ]))
    if "e2e" in payload:
        lines.append(f"\n## End to end, LLM-free (first {payload['e2e']['limit_per_hop']} test questions per hop; "
                     "paraphrases: all; percent)\n")
        lines.append("Pattern plans: the Flax head with the type filter, written to a TensorStore plan store and read "
                     "back. Answers of all beams are unioned and ranked by cumulative tracing score S (the LLM-free "
                     "default; the planner's beam probability is not part of the ranking), so a wrong beam's answers "
                     f"can outrank the right one's: B=1 and a confidence-pruned beam (p >= {MIN_PROB}, a round value "
                     "fixed before any pruned run, not tuned) are shown next to B=4. Paper defaults otherwise "
                     "(theta=0.6, lambda=1.5, tau=0.5), no guidance graph.\n")
        rows = []
        for r in payload["e2e"]["rows"]:
            for group, g in r["groups"].items():
                rows.append([r["set"], r["planner"], str(r["relation_bonus"]).lower(), group, g["n"],
                             100 * g["hit_at_1"], 100 * g["f1"], 100 * g["hit"]])
        lines.append(markdown_table(["set", "planner", "relation_bonus", "hops", "n", "Hit@1", "F1", "Hit"], rows))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

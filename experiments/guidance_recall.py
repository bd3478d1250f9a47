"""Recall of gold-evidence entities inside the Triple-GNN guidance set: MetaQA-partial test, per hop, K'=1..8.

Command (from the repo root; needs the MetaQA index, `stem-jax index --dataset metaqa`, and a trained GNN,
`stem-jax train-gnn --dataset metaqa --steps 1000 --val-every 100 --ckpt-every 100 --out runs/gnn-metaqa-1000`):

    STEM_DATA_DIR=../shared/data python experiments/guidance_recall.py --gnn-checkpoint runs/gnn-metaqa-1000

Add ``--subset N`` for a deterministic stratified subset (per hop, the N questions with the lowest
sha256(qid)). Gold evidence = endpoints of the oracle's gold-path triples that reach an answer (the
topic entity included); K = |T|·K' with |T| the oracle schema's triple count (= hops). GNN outputs
(top engine.guidance entities per question) are cached in TensorStore under
$STEM_CACHE_DIR/metaqa/gnn-guidance, keyed exactly as `stem-jax ablate-guidance` keys them, so the
ablation on the same questions reuses them. Its run time is in the JSON.
Writes experiments/results/guidance-recall-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from stem_jax.config import StemConfig, as_dict, default_cache_dir
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.sampling import sample_per_hop
from stem_jax.encoder import get_encoder
from stem_jax.engine import gnn_example_factory
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.gnn.infer import load_checkpoint
from stem_jax.gnn.provider import GNNGuidance
from stem_jax.gnn.recall import recall_by_hop
from stem_jax.kg.embeddings import build_kg_embeddings, cache_folder
from stem_jax.kg.index import build_index
from stem_jax.kg.subgraph import khop_subgraph
from stem_jax.methods.stem.plan import plan
from stem_jax.methods.stem.resources import StemResources
from stem_jax.plan.oracle import OraclePlanner

K_PRIMES = tuple(range(1, 9))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gnn-checkpoint", type=Path, required=True)
    parser.add_argument("--subset", type=int, default=None)
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = parser.parse_args(argv)
    began = time.perf_counter()
    config = StemConfig()
    dataset = load_dataset(DatasetSpec(name="metaqa", split=args.split))
    dataset.questions = sample_per_hop(dataset.questions, args.subset, rule="lowest_hash")
    index = build_index(dataset.triples)
    encoder = get_encoder(config.encoder)
    root = default_cache_dir()
    embeddings = build_kg_embeddings(index, encoder, cache_folder(root, "metaqa", index, encoder),
                                     chunk_rows=config.encoder.chunk_rows, progress=False)
    spec, params, info = load_checkpoint(args.gnn_checkpoint)
    factory = gnn_example_factory(config, dataset, index, embeddings, encoder)
    provider = GNNGuidance(spec, params, info, factory, k_prime=config.guidance.k_prime,
                           width=config.engine.guidance, cache_dir=root / "metaqa" / "gnn-guidance")
    resources = StemResources(dataset, index, embeddings, encoder, config)  # only to plan the runs, as eval does
    runs, skipped = plan(resources, dataset.questions, OraclePlanner().plan)
    pairs, _ = provider.queries(dataset.questions, runs)
    t0 = time.perf_counter()
    table = provider.table(pairs, show_progress=True)
    gnn_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    inside = [khop_subgraph(index, factory.seeds(q), factory.radius(q, s), config.subgraph.hub_cap).nodes
              for q, s in pairs]
    subgraph_seconds = time.perf_counter() - t0
    results = recall_by_hop(pairs, table.ids, index, K_PRIMES, inside=inside)

    head = ["hops", "questions", "gold entities (mean / median)", "in subgraph"] + [f"K'={k}" for k in K_PRIMES]
    rows, norm_rows = [], []
    for hop, r in results.items():
        base = [hop, r["questions"] - r["without_gold_evidence"],
                f"{r['gold_entities_mean']:.1f} / {r['gold_entities_median']:.0f}", round(100 * r["subgraph_recall"], 1)]
        rows.append(base + [round(100 * r["recall"][str(k)], 1) for k in K_PRIMES])
        norm_rows.append(base + [round(100 * r["recall_normalised"][str(k)], 1) for k in K_PRIMES])
    train_file = Path(args.gnn_checkpoint) / "train-gnn.json"
    train = json.loads(train_file.read_text()) if train_file.exists() else {}
    scope = (f"deterministic stratified subset, {args.subset} questions per hop (lowest sha256(qid))"
             if args.subset else "the whole split")
    text = (f"MetaQA-partial {args.split} ({scope}), oracle schema graphs, Triple-GNN {args.gnn_checkpoint} "
            f"(L={spec.layers}, d={spec.d_gnn}, step {info['step']}).\n\n"
            "Recall (%) of gold-evidence entities inside the guidance set of K = |T|·K' entities:\n\n"
            + markdown_table(head, rows)
            + "\n\nThe same hits divided by min(K, |gold|), i.e. by what K entities can hold at most:\n\n"
            + markdown_table(head, norm_rows)
            + f"\n\n`in subgraph`: share of gold entities inside the question's k-hop subgraph (hub cap "
            f"{config.subgraph.hub_cap}), the ceiling for any K. Questions without gold evidence in the KG are "
            "left out (counted in the JSON).")
    print(text)
    payload = {"meta": run_metadata(), "command": "python experiments/guidance_recall.py " + " ".join(sys.argv[1:]),
               "split": args.split, "subset_per_hop": args.subset, "questions": len(dataset.questions),
               "queries": len(pairs), "plan_skips": skipped, "k_primes": list(K_PRIMES), "results": results,
               "gnn": {k: v for k, v in info.items()}, "gnn_cache": str(table.path),
               "gnn_rows_computed_now": table.computed_rows, "gnn_seconds": gnn_seconds,
               "subgraph_seconds": subgraph_seconds, "wall_seconds": time.perf_counter() - began,
               "training": {k: train.get(k) for k in ("steps_total", "wall_seconds_this_run", "steps_per_second_steady",
                                                      "steps_per_second_overall", "compiled_shapes", "first_loss",
                                                      "last_loss", "val", "train", "spec", "train_questions",
                                                      "command", "meta")},
               "config": as_dict(config)}
    paths = write_report(args.out, f"guidance-recall-metaqa-{args.split}", payload, text)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    assert np.isfinite(list(results.values())[0]["recall"]["4"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

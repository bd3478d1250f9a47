"""Triple-GNN inference throughput on MetaQA-partial test: the per-question path vs the batched one.

Command (from the repo root):

    STEM_DATA_DIR=../shared/data nice python experiments/gnn_inference_bench.py --preset small --sample 3000

``--sample N`` takes every (38851 // N)-th test question (the split's hop mix); ``--sample 0`` is
the whole split. ``--paths old,new`` picks what runs: ``old`` is the inference path before this
script (one ``ExampleFactory.for_plan`` subgraph per question, power-of-two ``pad_batch``
batches of <= 64 graphs, ``select_top`` per graph), ``new`` is ``GNNGuidance.table`` now
(``ExampleFactory.for_plans``: one vectorised k-hop expansion for 1024 questions at a time,
fixed-shape bins, batched top-K). Both run the same model on the same questions and are compared
row by row (largest probability difference, rows whose top-``width`` ids differ).

Parameters: ``--checkpoint RUN`` loads a trained Triple-GNN; otherwise random parameters of the
preset (throughput does not depend on the values). Schema features: random unit vectors for the
KG's entities and relations (float16, as the cache stores them) and the hashing encoder for
placeholders, so the script needs no embedding cache; the features change no shape.
The CPU is shared: the JSON records the load average before and after each path, and timings
taken at a load average above the core count are slower than on an idle machine.
Writes experiments/results/gnn-inference-<preset>[-<label>].{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from pathlib import Path

import jax
import numpy as np
from paper_common import publish

from stem_jax.config import SubgraphConfig
from stem_jax.data.registry import DatasetSpec
from stem_jax.encoder import HashingEncoder
from stem_jax.engine import load_kg
from stem_jax.eval.report import markdown_table, run_metadata
from stem_jax.gnn.data import ExampleFactory
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.gnn.guidance import select_top
from stem_jax.gnn.infer import (
    MAX_BATCH_EDGES,
    MAX_BATCH_GRAPHS,
    forward_fn,
    iter_predict,
    load_checkpoint,
    reach_forward_fn,
)
from stem_jax.gnn.model import PRESETS, ModelSpec, init_params
from stem_jax.gnn.provider import GNNGuidance
from stem_jax.plan.oracle import OraclePlanner

RESULTS = Path(__file__).resolve().parent / "results"
WIDTH = 64  # engine.guidance default: entities kept per query


def old_path(factory: ExampleFactory, spec: ModelSpec, params, pairs, chunk_rows: int = 1024) -> tuple:
    """The inference code before the batched path (provider.compute as it was), chunk by chunk."""
    ids = np.full((len(pairs), WIDTH), -1, np.int32)
    probs = np.zeros((len(pairs), WIDTH), np.float32)
    build = device = 0.0
    relation_emb = factory.featurizer.relation_matrix()
    for lo in range(0, len(pairs), chunk_rows):
        t0 = time.perf_counter()
        examples, where = [], []
        for row in range(lo, min(len(pairs), lo + chunk_rows)):
            example = factory.for_plan(*pairs[row])
            if example is not None:
                examples.append(example)
                where.append(row)
        t1 = time.perf_counter()
        build += t1 - t0
        for members, batch_probs in iter_predict(params, spec, examples, relation_emb,
                                                 max_edges=MAX_BATCH_EDGES, max_graphs=MAX_BATCH_GRAPHS):
            for i, p in zip(members, batch_probs, strict=True):
                top, top_p = select_top(p, examples[i].entities, WIDTH)
                ids[where[i], : len(top)] = top
                probs[where[i], : len(top)] = top_p
        device += time.perf_counter() - t1
    return ids, probs, {"host_build_seconds": build, "predict_seconds": device,
                        "compiled_shapes": forward_fn(spec)._cache_size()}


def new_path(factory: ExampleFactory, spec: ModelSpec, params, pairs) -> tuple:
    provider = GNNGuidance(spec, params, {"params_sha": "bench"}, factory, k_prime=4, width=WIDTH, cache_dir=None)
    build = [0.0]
    original = factory.for_plans

    def timed(chunk, **kwargs):  # host time of the vectorised subgraph build, inside the provider's chunks
        t0 = time.perf_counter()
        out = original(chunk, **kwargs)
        build[0] += time.perf_counter() - t0
        return out

    factory.for_plans = timed
    try:
        table = provider.table(pairs, show_progress=False)
    finally:
        factory.for_plans = original
    stats = dict(provider.batch_stats)
    # with prefetch the build of one chunk overlaps the forward of the one before: the two need not add up
    stats.update(host_build_seconds=build[0], predict_seconds=table.seconds - build[0], method=provider.method,
                 compiled_shapes=forward_fn(spec, "receiver")._cache_size()
                 + reach_forward_fn(spec.layers)._cache_size())
    return table.ids, table.probs, stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--checkpoint", type=Path, default=None, help="train-gnn run folder (else random params)")
    parser.add_argument("--sample", type=int, default=3000, help="questions (every k-th of the split); 0 = all")
    parser.add_argument("--paths", default="old,new")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")

    dataset, index = load_kg(DatasetSpec(name="metaqa", split="test"))
    questions = dataset.questions
    if args.sample:
        questions = questions[:: max(1, len(questions) // args.sample)][: args.sample]
    rng = np.random.default_rng(0)

    def table(n: int, d: int = 384):
        a = rng.standard_normal((n, d)).astype(np.float32)
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        return types.SimpleNamespace(array=a.astype(np.float16))

    embeddings = types.SimpleNamespace(entities=table(index.num_entities), relations=table(index.num_relations))
    featurizer = SchemaFeaturizer(index, embeddings, HashingEncoder(dim=384), dataset.entity_names)
    factory = ExampleFactory(index, featurizer, SubgraphConfig(), dataset.entity_names)
    planner = OraclePlanner()
    pairs = [(q, planner.plan(q, index)[0]) for q in questions]
    if args.checkpoint is not None:
        spec, params, info = load_checkpoint(args.checkpoint)
        params_from = f"{args.checkpoint} step {info['step']}"
    else:
        preset = PRESETS[args.preset]
        spec = ModelSpec(layers=preset.layers, d_gnn=preset.d_gnn, d_pem=384, num_relations=index.num_relations)
        params = init_params(spec, jax.random.key(0))
        params_from = "random (init_params, key 0)"

    results, outputs = {}, {}
    for name in paths:
        load_before = os.getloadavg()[0]
        began = time.perf_counter()
        ids, probs, stats = (old_path if name == "old" else new_path)(factory, spec, params, pairs)
        wall = time.perf_counter() - began
        outputs[name] = (ids, probs)
        results[name] = {**stats, "wall_seconds": wall, "questions_per_second": len(pairs) / wall,
                         "load_average_before": load_before, "load_average_after": os.getloadavg()[0]}
        print(name, {k: v for k, v in results[name].items() if k != "shapes"}, flush=True)
    agreement = None
    if "old" in outputs and "new" in outputs:
        (a_ids, a_p), (b_ids, b_p) = outputs["old"], outputs["new"]
        agreement = {"max_abs_probability_difference": float(np.abs(a_p - b_p).max()),
                     "rows_with_different_top_ids": int((a_ids != b_ids).any(axis=1).sum()),
                     "rows": len(pairs)}

    hops = {h: sum(q.hops == h for q in questions) for h in (1, 2, 3)}
    rows = [[name, round(r["wall_seconds"], 1), round(r["questions_per_second"], 1),
             round(r["host_build_seconds"], 1), round(r["predict_seconds"], 1), r["compiled_shapes"],
             r.get("batches", "-"), f"{r['load_average_before']:.1f} / {r['load_average_after']:.1f}"]
            for name, r in results.items()]
    md = (f"Triple-GNN inference, MetaQA-partial test, {len(pairs)} questions ({hops}), preset {args.preset} "
          f"(L={spec.layers}, d={spec.d_gnn}), params {params_from}, top {WIDTH} per question, subgraph hub cap "
          f"{factory.subgraph.hub_cap}, {jax.default_backend()} ({jax.devices()[0].device_kind}).\n\nCommand: `python experiments/gnn_inference_bench.py "
          f"{' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
          + markdown_table(["path", "wall s", "questions/s", "host build s", "predict + top-K s", "compiled shapes",
                            "batches", "load avg before / after"], rows))
    if "new" in results:
        r = results["new"]
        md += (f"\n\nnew path padding: {r['real_nodes']} real / {r['padded_nodes']} padded nodes, "
               f"{r['real_edges']} real / {r['padded_edges']} padded edges; shapes {r['shapes']}")
    if agreement:
        md += (f"\n\nold vs new: largest probability difference {agreement['max_abs_probability_difference']:.2e}, "
               f"rows whose top-{WIDTH} ids differ: {agreement['rows_with_different_top_ids']} of {agreement['rows']}")
    payload = {"meta": run_metadata(), "argv": sys.argv[1:] if argv is None else argv, "preset": args.preset,
               "spec": spec.as_dict(), "params": params_from, "questions": len(pairs), "hops": hops,
               "results": results, "agreement": agreement, "cpu_count": os.cpu_count()}
    name = f"gnn-inference-{args.preset}" + (f"-{args.label}" if args.label else "")
    return publish(name, payload, md)


if __name__ == "__main__":
    raise SystemExit(main())

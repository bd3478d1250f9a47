"""Train the pretrained path planner shipped in stem_jax/plan/models/ on every question set in $STEM_DATA_DIR.

    python experiments/train_pretrained_planner.py                       # the shipped model, all families
    python experiments/train_pretrained_planner.py --exclude metaqa --out runs/pretrained-no-metaqa
    python experiments/train_pretrained_planner.py --leave-one-out runs/pretrained-lofo   # one model per left-out family

Families: freebase (webqsp-r train + relation-paths.jsonl, cwq-e train), metaqa (dev, the split MetaQA trains
on here, sampled per hop), wc2014 (train, sampled per question file), demo (train). Each question set is
hash-split 90/10 (by id): the 10% fit the softmax temperature. The KG preparation (indexes, candidate paths,
embeddings) is done once and shared by every model the run trains.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

FAMILIES = ("freebase", "metaqa", "wc2014", "demo")


def load_parts(data_dir: Path, *, per_hop: int, cwq_limit: int, log=print) -> list:
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.data.sampling import sample_per_hop
    from stem_jax.data.splits import hash_split
    from stem_jax.plan.oracle import metaqa_gold_path
    from stem_jax.plan.pretrained import KGPart
    from stem_jax.plan.training import extra_pairs

    parts = []

    def part(name, family, spec, sample=None, pairs=False):
        began = time.perf_counter()
        dataset = load_dataset(spec)
        questions = sample(dataset.questions) if sample else dataset.questions
        train, val = hash_split(questions, 0.1)
        parts.append(KGPart(name, family, dataset, train, val, extra_pairs(dataset) if pairs else []))
        log(f"loaded {name}: {len(train)} + {len(val)} questions [{time.perf_counter() - began:.1f}s]")

    part("webqsp-r", "freebase", DatasetSpec(name="files", split="train", data_dir=data_dir / "webqsp-r"), pairs=True)
    part("cwq-e", "freebase", DatasetSpec(name="files", split="train", data_dir=data_dir / "cwq-e"),
         sample=lambda qs: sample_per_hop(qs, cwq_limit, group=lambda q: 0))
    # MetaQA states its gold path as a question type: written out, it marks the right path among those that merely
    # reach the answers (the partial KB's people often both direct and write)
    part("metaqa", "metaqa", DatasetSpec(name="metaqa", split="dev", data_dir=data_dir),
         sample=lambda qs: [dataclasses.replace(q, gold_path=metaqa_gold_path(q.qtype)) if q.qtype else q
                            for q in sample_per_hop(qs, per_hop)])
    part("wc2014", "wc2014", DatasetSpec(name="wc2014", split="train", data_dir=data_dir),
         sample=lambda qs: sample_per_hop(qs, per_hop, group=lambda q: q.qtype))
    part("demo", "demo", DatasetSpec(name="demo", split="train"))
    return parts


def save_branch_model(branch_parts: list, exclude: str | None, out: Path) -> None:
    """The constraint-branch model of the families other than ``exclude``, stored in ``out/branches`` (a stale one
    removed when none is kept)."""
    import shutil

    from stem_jax.plan.branch_planner import BRANCHES_FOLDER
    from stem_jax.plan.pretrained import train_multi_kg_branch_model

    shutil.rmtree(out / BRANCHES_FOLDER, ignore_errors=True)
    model = train_multi_kg_branch_model(branch_parts, exclude_family=exclude)
    if model is not None:
        model.save(out / BRANCHES_FOLDER)
        print(f"saved {out / BRANCHES_FOLDER} (excluded: {exclude}; threshold {model.threshold}, mentions "
              f"{model.mention_threshold}; trained on {json.dumps(model.report['trained_on'])})", flush=True)


def main() -> int:
    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.encoder import get_encoder
    from stem_jax.plan.path_ranker import PathRankerConfig
    from stem_jax.plan.pretrained import (
        MAX_HOPS,
        model_folder,
        prepare_branch_parts,
        prepare_parts,
        train_multi_kg_ranker,
    )
    from stem_jax.plan.training import masked_question_embedder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("STEM_DATA_DIR", "data")))
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("STEM_CACHE_DIR", ".cache")))
    parser.add_argument("--out", type=Path, default=None, help="default: the package's model folder")
    parser.add_argument("--exclude", choices=FAMILIES, default=None, help="leave this family out")
    parser.add_argument("--leave-one-out", type=Path, default=None,
                        help="also write one model per family left out, to DIR/<family>/")
    parser.add_argument("--per-hop", type=int, default=300, help="MetaQA questions per hop, WorldCup2014 per file")
    parser.add_argument("--cwq-limit", type=int, default=1000, help="cwq-e training questions (seeded sample)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--max-candidates", type=int, default=64, help="candidate paths per training question")
    parser.add_argument("--no-full", action="store_true", help="only the leave-one-out models")
    parser.add_argument("--only", default=None, help="comma-separated families: the leave-one-out models to write")
    parser.add_argument("--shortest-targets", action=argparse.BooleanOptionalAction, default=True,
                        help="credit a path only when no shorter candidate reaches the answers as well")
    parser.add_argument("--end-names", type=int, default=3,
                        help="entity names a step's text lists (0: the relation's text alone)")
    parser.add_argument("--end-names-weight", type=float, default=1.0,
                        help="weight of the named text beside the relation's own text")
    parser.add_argument("--skip-mirrors", action=argparse.BooleanOptionalAction, default=True,
                        help="leave out paths through a relation stored as another's exact reverse")
    parser.add_argument("--branches", action=argparse.BooleanOptionalAction, default=True,
                        help="also train the constraint-branch model stored beside each ranker (branches/)")
    parser.add_argument("--branches-only", action="store_true",
                        help="keep the rankers already in the output folders; train and store only the branch models")
    args = parser.parse_args()

    began = time.perf_counter()
    parts = load_parts(args.data_dir, per_hop=args.per_hop, cwq_limit=args.cwq_limit)
    config = StemConfig()
    encoder = get_encoder(EncoderConfig())
    jobs = [] if args.no_full else [(args.exclude, args.out or model_folder())]
    if args.leave_one_out:
        jobs += [(family, args.leave_one_out / family) for family in FAMILIES
                 if not args.only or family in args.only.split(",")]
    branch_parts = prepare_branch_parts(parts, encoder.encode) if args.branches or args.branches_only else []
    if args.branches_only:
        for exclude, out in jobs:
            save_branch_model(branch_parts, exclude, Path(out))
        print(f"done in {time.perf_counter() - began:.0f}s")
        return 0
    ranker_config = dataclasses.replace(PathRankerConfig(), max_hops=MAX_HOPS, epochs=args.epochs,
                                         max_candidates=args.max_candidates, extra_negatives=31,
                                         shortest_targets=args.shortest_targets, skip_mirrors=args.skip_mirrors,
                                         end_names=args.end_names, end_names_weight=args.end_names_weight)
    prepared = prepare_parts(parts, ranker_config,
                             lambda p: masked_question_embedder(args.cache_dir, p.dataset.name, encoder, config),
                             encoder.name)
    command = "python experiments/train_pretrained_planner.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in (("per_hop", args.per_hop), ("cwq_limit", args.cwq_limit),
                                                    ("epochs", args.epochs),
                                                    ("max_candidates", args.max_candidates)))
    command += ("" if args.shortest_targets else " --no-shortest-targets") + (
        "" if args.skip_mirrors else " --no-skip-mirrors") + f" --end-names {args.end_names} --end-names-weight {args.end_names_weight}"
    for exclude, out in jobs:
        ranker = train_multi_kg_ranker(prepared, ranker_config, exclude_family=exclude)
        ranker.report["command"] = command + (f" --exclude {exclude}" if exclude else "")
        ranker.save(Path(out))
        if args.branches:
            save_branch_model(branch_parts, exclude, Path(out))
        size = sum(f.stat().st_size for f in Path(out).iterdir())
        print(f"saved {out} (excluded: {exclude}; {size / 1e6:.2f} MB; temperature {ranker.temperature}; "
              f"{ranker.report['seconds']:.0f}s)", flush=True)
        print(json.dumps(ranker.report["families"]))
    print(f"done in {time.perf_counter() - began:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

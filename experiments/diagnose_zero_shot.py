"""Where a path planner's top plan goes wrong, per question: is the right path a candidate, where does it rank, what
wins instead (same relations the other way round? another length? another relation?).

    STEM_DATA_DIR=... python experiments/diagnose_zero_shot.py --model LOFO/metaqa --dataset metaqa --hops 1 --limit 200

A candidate is right when its end set hits a gold answer ("reaches"); the gold path is the dataset's (MetaQA: its
question type written out; WorldCup2014: the path in the question file), when given. Prints counts and examples.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from stem_jax.config import StemConfig
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.encoder import get_encoder
    from stem_jax.kg.index import build_index
    from stem_jax.plan import pretrained
    from stem_jax.plan.oracle import metaqa_gold_path
    from stem_jax.plan.relation_paths import path_key
    from stem_jax.plan.training import masked_question_embedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--split", default="test")
    parser.add_argument("--hops", type=int, default=None)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--examples", type=int, default=12)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    spec = DatasetSpec(name=args.dataset, split=args.split, data_dir=args.data_dir,
                       **({"hops": (args.hops,)} if args.hops else {}))
    dataset = load_dataset(spec)
    questions = dataset.questions[: args.limit]
    if args.dataset == "metaqa":
        questions = [dataclasses.replace(q, gold_path=metaqa_gold_path(q.qtype)) if q.qtype else q for q in questions]
    index = build_index(dataset.triples)
    config = StemConfig()
    encoder = get_encoder(config.encoder)
    ranker = pretrained.load_pretrained(index=index, names=dataset.entity_names, encoder=encoder, beam=4,
                                        min_prob=0.0, folder=args.model)
    cache = Path(os.environ.get("STEM_CACHE_DIR", ".cache"))
    ranker.embed_fn = masked_question_embedder(cache, dataset.name, encoder, config)
    counts: collections.Counter = collections.Counter()
    wins: collections.Counter = collections.Counter()
    ranks: list[int] = []
    examples = []
    for q, (cands, probs, _) in zip(questions, ranker.score(questions), strict=True):
        counts["questions"] += 1
        if not cands:
            counts["no candidates"] += 1
            continue
        gold = {index.entity_ids[a] for a in q.answers if a in index.entity_ids}
        reach = np.asarray([bool(set(c.ends.tolist()) & gold) for c in cands])
        order = np.argsort(-probs, kind="stable")
        top = cands[order[0]]
        gkey = path_key(q.gold_path) if q.gold_path else None
        keys = [path_key(c.path) for c in cands]
        grank = next((r for r, i in enumerate(order.tolist()) if keys[i] == gkey), None) if gkey else None
        counts["top reaches an answer"] += int(reach[order[0]])
        counts["some candidate reaches"] += int(reach.any())
        if gkey:
            counts["gold path is a candidate"] += int(grank is not None)
            counts["top is the gold path"] += int(grank == 0)
            if grank is not None:
                ranks.append(grank)
        if reach[order[0]]:
            continue
        gold_path = q.gold_path or next((cands[i].path for i in order.tolist() if reach[i]), None)
        why = "no right candidate"
        if gold_path is not None:
            grels = [s.relation for s in gold_path]
            trels = [s.relation for s in top.path]
            if len(top.path) != len(gold_path):
                why = f"length {len(top.path)} instead of {len(gold_path)}"
                if set(trels) <= set(grels) or set(grels) <= set(trels):
                    why += " (same relations)"
            elif trels == grels:
                why = "same relations, other direction"
            elif sorted(trels) == sorted(grels):
                why = "same relations, other order"
            else:
                why = "other relation"
        wins[why] += 1
        if len(examples) < args.examples:
            examples.append({"q": q.text, "gold": gkey, "gold_rank": grank, "top": path_key(top.path),
                             "p": round(float(probs[order[0]]), 3), "ends": len(top.ends), "why": why})
    out = {"counts": dict(counts), "why_top_misses": dict(wins.most_common()),
           "gold_rank_histogram": dict(collections.Counter(min(r, 10) for r in ranks)), "examples": examples}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

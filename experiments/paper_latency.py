"""Latency by answer count and by strategy (paper Tables 14/16 analogue): one question per call.

Command (repo root; needs the MetaQA index):

    STEM_DATA_DIR=../shared/data nice python experiments/paper_latency.py --subset 30

``stem_jax.Engine.retrieve([question])`` one question at a time (the serving case) on a stratified
``--subset`` per hop of MetaQA-partial test, oracle planner, no guidance, small compiled batches
(``--engine.batch_precision=8 --engine.batch_breadth=8``). A first pass compiles every shape; the
second pass is timed (wall ms per question, and the engine's per-stage ms). Grouped by the gold
answer count (Table 14) and by the strategies traced (Table 16). Predictions records of batch runs
only hold per-chunk shares of the batch time, so they cannot give per-question latency.
Writes experiments/results/paper-latency-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from paper_common import Base, answer_bucket, save, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=30)
    args = parser.parse_args(argv)
    base = Base(subset=args.subset, overrides={"engine.batch_precision": "8", "engine.batch_breadth": "8"})
    engine = base.engine("oracle")
    questions = list(base.dataset.questions)
    engine.retrieve(questions)  # plan + compile every shape once
    method = engine.method("stem")
    samples = []
    for question in questions:
        method.forget([question.qid])  # plan it again inside the timed call
        began = time.perf_counter()
        answer = engine.retrieve([question])[0]
        wall = 1000 * (time.perf_counter() - began)
        record = answer.record
        samples.append({"id": question.qid, "hops": question.hops, "answers": answer_bucket(record),
                        "strategy": "+".join(record.get("strategies", [])) or "none", "wall_ms": wall,
                        "stage_ms": dict(answer.stage_ms)})
    rows, payload = [], {}
    for by in ("answers", "strategy", "hops"):
        groups = defaultdict(list)
        for s in samples:
            groups[str(s[by])].append(s)
        payload[by] = {}
        for group, members in sorted(groups.items()):
            walls = sorted(m["wall_ms"] for m in members)
            stages = defaultdict(list)
            for m in members:
                for stage, ms in m["stage_ms"].items():
                    stages[stage].append(ms)
            stats = {"n": len(members), "wall_ms_mean": statistics.fmean(walls), "wall_ms_p50": walls[len(walls) // 2],
                     **{f"{k}_ms_mean": statistics.fmean(v) for k, v in stages.items()}}
            payload[by][group] = stats
            rows.append([by, group, len(members), round(stats["wall_ms_mean"], 1), round(stats["wall_ms_p50"], 1)]
                        + [round(stats.get(f"{k}_ms_mean", 0.0), 1) for k in ("plan", "anchor", "trace", "answer")])
    markdown = table(["by", "group", "questions", "wall ms mean", "wall ms p50", "plan ms", "anchor ms", "trace ms",
                      "answer ms"], rows)
    print(markdown)
    save("paper-latency-metaqa", {"subset_per_hop": args.subset, "groups": payload, "samples": samples},
         f"MetaQA-partial test, stratified {args.subset} per hop, oracle planner, no guidance, one question per call "
         f"(warm; shared CPU, so absolute ms are noisy)\n\n{markdown}",
         f"python experiments/paper_latency.py --subset {args.subset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

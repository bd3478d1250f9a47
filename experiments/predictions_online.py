"""Predictions of questions answered online, as `serve` and `bench stages` answer them, for an identity check.

Command (repo root; the KG indexed, its pattern planner and answer scorer trained in the cache):

    STEM_DATA_DIR=../shared/data python experiments/predictions_online.py --out runs/online-webqsp-r \\
        --batch 1 -- --dataset files --data-dir ../shared/data/webqsp-r --split dev --planner pattern

`stem-jax eval` plans and encodes a whole split before it traces (``StemMethod.prepare``), so the online path
(each batch planned, its schema texts encoded and its answers ranked when it arrives, the encoder's memo off, as
``bench stages --no-encoder-memo`` runs) is not what an eval compares. This script opens the engine with the
``stem-jax bench stages`` flags after ``--``, answers the split in batches of ``--batch`` questions with
``Engine.method("stem").retrieve``, forgetting each batch's plans afterwards, and writes ``predictions.jsonl``
(the eval's records) and ``metrics.json`` (Hit / Hit@1 / F1 over every question) into ``--out``, so
``experiments/predictions_identity_runs.py`` compares two such folders. Run it with another commit's source first
on ``PYTHONPATH`` for the other side. Costs about a minute per 100 questions on a loaded 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and str(ROOT) not in sys.path:  # a PYTHONPATH checkout (the other commit) comes first
    sys.path.append(str(ROOT))

from stem_jax.cli.args import config_from_args  # noqa: E402
from stem_jax.cli.engine_args import open_engine  # noqa: E402
from stem_jax.cli.main import build_parser  # noqa: E402
from stem_jax.eval.metrics import strict_metrics  # noqa: E402
from stem_jax.eval.records import make_records  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=1, help="questions per retrieve call (default 1)")
    parser.add_argument("--limit", type=int, default=None, help="the first N questions of the split")
    parser.add_argument("engine_flags", nargs=argparse.REMAINDER, help="-- then `stem-jax bench stages` flags")
    args = parser.parse_args()
    flags = [f for f in args.engine_flags if f != "--"]
    engine_args = build_parser().parse_args(["bench", "stages", *flags])
    engine = open_engine(engine_args, config_from_args(engine_args), log=lambda _: None)
    if hasattr(engine.encoder, "memo_size"):
        engine.encoder.memo_size = 0  # every question encoded afresh, as `bench stages --no-encoder-memo`
    method = engine.method("stem")
    questions = engine.dataset.questions[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    totals = {"hit": 0.0, "hit_at_1": 0.0, "f1": 0.0}
    with open(args.out / "predictions.jsonl", "w") as f:
        for first in range(0, len(questions), args.batch):
            batch = questions[first : first + args.batch]
            records = make_records(method.context, batch, method.retrieve(batch), "stem")
            method.forget([q.qid for q in batch])  # the next time, planned and encoded afresh
            for record in records:
                if record["ground_truth"]:  # a question without gold answers counts as a miss
                    metrics = strict_metrics(record["prediction"], record["ground_truth"])
                    for key in totals:
                        totals[key] += metrics[key]
                f.write(json.dumps({k: v for k, v in record.items() if k != "ms"}) + "\n")
    mean = {k: v / max(len(questions), 1) for k, v in totals.items()}
    (args.out / "metrics.json").write_text(json.dumps({"all_questions": {"mean": mean}, "batch": args.batch,
                                                       "questions": len(questions)}, indent=1))
    print(f"{len(questions)} questions in batches of {args.batch}: {mean}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

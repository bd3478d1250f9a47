"""Hit@1 and F1 with the encoder's online matmuls in bfloat16 against float32, on the same questions.

    STEM_DATA_DIR=../shared/data python experiments/encoder_precision_accuracy.py [--per-hop 300]

For each KG (the demo KG's test split, MetaQA test ``--per-hop`` questions of each hop taken at an even stride,
WorldCup2014 test P1 + P2 + C, webqsp-r dev without and with the Triple-GNN guidance of ``runs/gnn-webqsp-r``
when that checkpoint is there) and each ``encoder.dot_dtype``: one engine (pattern planner, defaults otherwise)
whose schema-text table is encoded online (no disk cache), as a served question's is, so both the question
and every schema text go through the dtype under test; KG tables are the float32 caches either way. Records
per hop group Hit@1 and F1 of both, their difference, and the share of questions whose ranked answers are
identical. Writes ``experiments/results/encoder-precision-accuracy.{json,md}``. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from online_setting_accuracy import main as compare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    defaults = {"field": "encoder.dot_dtype", "values": "float32,bfloat16", "name": "encoder-precision-accuracy",
                "per_hop": 300, "datasets": "demo,metaqa,wc2014,webqsp-r,webqsp-r+gnn"}
    return compare(argv, script="experiments/encoder_precision_accuracy.py", defaults=defaults,
                   about="The question and every schema text encoded online with the encoder's matmuls in float32 "
                         "or bfloat16; KG tables are the float32 caches in both.")

if __name__ == "__main__":
    raise SystemExit(main())

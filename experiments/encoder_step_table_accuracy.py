"""Hit@1 and F1 with the KG's schema-step table read online against every schema text encoded, same questions.

    STEM_DATA_DIR=../shared/data python experiments/encoder_step_table_accuracy.py [--per-hop 1000]

For each KG (the demo KG's test split, MetaQA test ``--per-hop`` questions of each hop taken at an even stride
(0: every question), WorldCup2014 test P1 + P2 + C) and ``encoder.step_table_max`` 0 (no table: every schema text
encoded) and the default (the KG's step table, stem_jax/kg/step_table.py): one engine (pattern planner,
defaults otherwise) whose schema-text table is made online (no disk cache of the split's texts), as a served
question's is, so every schema text is either encoded by the online forward (bfloat16 matmuls) or read from the
step table (float32 forwards stored as float16). Records per hop group Hit@1 and F1 of both, their difference,
and the share of questions whose ranked answers are identical. Writes
``experiments/results/encoder-step-table-accuracy.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from online_setting_accuracy import main as compare  # noqa: E402

from stem_jax.config import StemConfig  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    defaults = {"field": "encoder.step_table_max", "values": f"0,{StemConfig().encoder.step_table_max}",
                "labels": "encoded,step table", "name": "encoder-step-table-accuracy"}
    return compare(argv, script="experiments/encoder_step_table_accuracy.py", defaults=defaults,
                   about="Every schema text encoded (encoder.step_table_max=0) or, with the default, those naming "
                         "an entity read from the KG's step table; questions encoded in both.")

if __name__ == "__main__":
    raise SystemExit(main())

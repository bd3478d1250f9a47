"""Hit@1 and F1 with the distilled question student against MiniLM question vectors, on the same questions.

    STEM_DATA_DIR=../shared/data python experiments/encoder_question_accuracy.py [--per-hop 1000] \
        [--datasets demo,metaqa,wc2014,webqsp-r]

``online_setting_accuracy.py`` over ``encoder.question_encoder`` = minilm, student: per KG one engine (pattern
planner, defaults otherwise, schema texts made online) whose template classifier reads its question vectors from
``encoder.encode_questions``, which the pattern planner reads; KG rows and schema texts are MiniLM's in both. A path
ranker's question side (webqsp-r, cwq-e) is left as it is: its tuned tower runs its own MiniLM layers, and a
frozen one shares its encode with the relation texts. Writes ``experiments/results/encoder-question-accuracy.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from online_setting_accuracy import main as compare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    defaults = {"field": "encoder.question_encoder", "values": "minilm,student", "name": "encoder-question-accuracy",
                "per_hop": 1000, "datasets": "demo,metaqa,wc2014,webqsp-r"}
    return compare(argv, script="experiments/encoder_question_accuracy.py", defaults=defaults,
                   about="The planner's question vectors from MiniLM (bfloat16 matmuls, today's online forward) or "
                         "from the distilled one-layer student; KG rows and schema texts are MiniLM's in both.")


if __name__ == "__main__":
    raise SystemExit(main())

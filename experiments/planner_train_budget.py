"""train-planner's cost on many distinct wordings: text encodings and optimiser steps (issue 21 item 7).

    python experiments/planner_train_budget.py

A synthetic training set with the issue's count of distinct masked wordings (3,563: random word
strings, one topic each, four relations; 3,200 train / 363 validation), the hashing encoder, so the
time is the head's training and the counts are what a MiniLM run would encode. Validation accuracy of
random word strings means nothing here; MetaQA's is in the commit messages and the report.

The figures of the change that set train-planner's budget (82ceafe): experiments/results/planner-train-budget.md.
"""

from __future__ import annotations

import argparse
import random
import time

from stem_jax.config import EncoderConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.encoder import get_encoder
from stem_jax.plan.pattern import train_pattern_planner

WORDINGS = 3563
WORDS = ("who what which film movie director person wrote starred acted made released year genre language the of "
         "in by was is did").split()
RELATIONS = ("directed_by", "written_by", "starred_actors", "has_genre")


def questions(n: int = WORDINGS, seed: int = 0) -> list[Question]:
    rng = random.Random(seed)
    seen: set[str] = set()
    out = []
    while len(seen) < n:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 10)))
        if text in seen:
            continue
        seen.add(text)
        i = len(seen)
        out.append(Question(qid=f"q{i}", text=f"{text} Film{i % 50}", topic_entities=(f"Film{i % 50}",),
                            answers=("x",), hops=1, gold_path=(PathStep(RELATIONS[i % 4], True),)))
    return out


def main(argv: list[str] | None = None) -> None:
    # no options: the parser gives `--help` (tests/experiments/test_experiments_paths.py) instead of starting the run
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    qs = questions()
    encoder = get_encoder(EncoderConfig(name="hashing"))
    encoded: list[int] = []

    def embed(texts: list[str]):
        encoded.append(len(texts))
        return encoder.encode(texts)

    began = time.perf_counter()
    report = train_pattern_planner(qs[:3200], qs[3200:], encoder, embed=embed, log=lambda _: None).report
    print(f"texts encoded {encoded} (train, validation), copies {report['augmented_wordings']}, "
          f"epochs {len(report['history'])}, training {report['train_seconds']:.1f} s, "
          f"total {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()

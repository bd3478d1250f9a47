"""train-planner's cost on many distinct wordings: text encodings and optimiser steps (issue 21 item 7).

    python experiments/planner_train_budget.py            # ~30 s now; ~2 min with the code before 82ceafe

A synthetic training set with the issue's count of distinct masked wordings (3,563: random word
strings, one topic each, four relations; 3,200 train / 363 validation), the hashing encoder, so the
time is the head's training and the counts are what a MiniLM run would encode. Validation accuracy of
random word strings means nothing here; MetaQA's is in the commit messages and the report.

Measured on this shared 2-core machine (load 6-12), default TrainConfig:

| code | texts encoded | word-dropout copies | epochs | training s |
|---|---|---|---|---|
| before 82ceafe (8 copies each, every epoch, per-step dispatch) | 23,493 | 20,293 | 100 | 101.3 |
| 82ceafe (8,192 copies in all, at most 3,000 steps, scanned epochs) | 8,244 | 5,063 | 90 | 25.0 |

MetaQA (526 wordings: within both budgets, 8 copies and 100 epochs either way), train-planner with a
fresh --cache-dir, back to back: 58.3 s -> 44.8 s wall (training 18.5 -> 14.0 s, 3,859 -> 3,455
texts encoded), template top-1 0.996 (mlp) / 1.0 (knn) both; eval --limit 300 per hop, test: Hit@1
97.89 both (Hit 98.11 -> 98.0, one 3-hop question); dev: Hit 99.0 / Hit@1 98.67 both.
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

"""train-planner's cost follows the distinct wordings within fixed budgets.

Without budgets every distinct wording got ``augment`` (8) word-dropout copies however many wordings there
were, each copy was encoded even when it repeated another text, and every epoch ran whatever the data
size (a KG with 3,563 distinct wordings: 25k copies, 484 s). Copies are capped in all
(``augment_budget``), repeated texts are encoded once, and epochs are cut to ``max_steps`` steps.
"""

from __future__ import annotations

import numpy as np

from stem_jax.config import EncoderConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.encoder import get_encoder
from stem_jax.plan.pattern import TrainConfig, augment_copies, train_epochs, train_pattern_planner


def test_copies_and_epochs_shrink_with_many_wordings_and_stay_for_few():
    config = TrainConfig()
    assert augment_copies(526, config) == 8  # MetaQA: unchanged
    assert augment_copies(3563, config) == 2 and augment_copies(10**6, config) == 1
    assert train_epochs(526 * 7, config) == 100  # MetaQA: 15 steps an epoch, 100 epochs
    assert train_epochs(40_000, config) == config.max_steps // 157
    assert train_epochs(10**7, config) == 1


def _questions(n_wordings: int) -> list[Question]:
    """``n_wordings`` distinct wordings of one 1-hop question type (numbers keep them distinct)."""
    out = []
    for i in range(n_wordings):
        topic = f"Film{i % 5}"
        out.append(Question(qid=f"q{i}", text=f"who is the director number {i} of the film {topic} in the list",
                            topic_entities=(topic,), answers=("Someone",), hops=1,
                            gold_path=(PathStep("directed_by", True),)))
    return out


def test_training_encodes_each_text_once_within_the_budgets():
    encoder = get_encoder(EncoderConfig(name="hashing"))
    seen: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        seen.extend(texts)
        return encoder.encode(texts)

    config = TrainConfig(epochs=50, augment=8, augment_budget=300, max_steps=20, batch_size=64, hidden=16)
    planner = train_pattern_planner(_questions(100), _questions(3), encoder, config=config, embed=embed,
                                    log=lambda _: None)
    report = planner.report
    assert report["distinct_wordings"] == 100 and report["copies_per_wording"] == 3
    assert report["augmented_wordings"] <= 300
    rows = report["distinct_wordings"] + report["augmented_wordings"]
    assert report["epochs"] == len(report["history"]) == 20 // -(-rows // 64)
    train_texts = seen[: report["encoded_texts"]]
    assert len(train_texts) == len(set(train_texts))  # nothing encoded twice
    assert report["history"][-1]["loss"] < report["history"][0]["loss"]
    assert report["mlp"]["template"]["top1"] == 1.0

"""Opaque entity ids (entity_names.tsv): every oracle caller names topics as the question text does.

The factory, pattern training and bench trace passed the dataset's names to ``OraclePlanner`` already;
train-gnn's examples, the LLM planner's few-shot examples, the synthetic P4 export and the demo built
a bare ``OraclePlanner()``, whose plans name the topic by its id (``Q5``) while the question says
``Film 3``. On the KG of tests/plan/test_opaque_ids_planners.py (48 questions, ids Q.., P..).
"""

from __future__ import annotations

from collections import Counter

import pytest
from test_opaque_ids_planners import write_opaque_kg
from test_vllm_planner import FakeLLM

from stem_jax.cli.main import main
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder.hashing import HashingEncoder
from stem_jax.plan.llm_planner import FewShotPool, examples_from_training
from stem_jax.plan.schema import is_placeholder, match_anchor
from stem_jax.plan.synthetic import path_assertions


@pytest.fixture(scope="module")
def kg(tmp_path_factory):
    root = tmp_path_factory.mktemp("opaque")
    folder = write_opaque_kg(root / "okg")
    dataset = load_dataset(DatasetSpec(name="files", data_dir=folder, split="train"))
    assert dataset.entity_names and len(dataset.questions) == 48
    return root, folder, dataset


def _constants(triples):
    return [n for t in triples for n in (t[0], t[2]) if not is_placeholder(n)]


class _TrainingStartedError(Exception):
    """Raised by the stand-in for training: carries what train-gnn would train on."""


def test_train_gnn_examples_anchor_their_topic_by_display_name(kg, monkeypatch):
    root, folder, dataset = kg

    def capture(factory, train_pairs, val_pairs, *args, **kwargs):
        raise _TrainingStartedError(factory, train_pairs, val_pairs)

    monkeypatch.setattr("stem_jax.gnn.train.train", capture)  # the examples are the point, not the training
    with pytest.raises(_TrainingStartedError) as caught:
        main(["train-gnn", "--dataset", "files", "--data-dir", str(folder), "--split", "train", "--encoder.name=hashing",
              "--cache-dir", str(root / "cache"), "--no-progress", "--out", str(root / "gnn")])
    factory, train_pairs, val_pairs = caught.value.args
    pairs = [*train_pairs, *val_pairs]
    assert len(train_pairs) > 30 and val_pairs  # no question skipped: each has a plan and a topic in the KG
    for question, plan in pairs:  # the factory anchors the subgraph radius at the topic's display name
        topic = dataset.entity_names[question.topic_entities[0]]
        assert topic in question.text and plan.constants() == [topic]
        assert match_anchor(plan, factory.display(question.topic_entities[0])) == topic  # bare oracle: None


def test_few_shot_examples_name_and_mask_topics_as_the_question(kg):
    _, _, dataset = kg
    names = dataset.entity_names
    examples = examples_from_training(dataset.questions, names)
    assert len(examples) == 48
    assert all(_constants(e.triples) and all(c in e.question for c in _constants(e.triples)) for e in examples)
    assert all(e.assertions[0].startswith(_constants(e.triples)[0]) for e in examples)
    # the pool masks each example's topic in its question: 48 questions, two wordings ("who directed <topic>",
    # "which person acted in <topic>"); with the ids (the bare oracle) nothing was masked and all 48 stayed apart
    pool = FewShotPool(examples, encoder=HashingEncoder(), k=2, names=names)
    assert len(pool.examples) == 2
    assert len(FewShotPool(examples_from_training(dataset.questions), encoder=HashingEncoder(), k=2).examples) == 48


def test_synthetic_path_assertions_show_display_names(kg):
    _, _, dataset = kg
    prompts = []

    def script(prompt, kind, attempt, j, **_):
        assert kind == "p4"
        prompts.append(prompt)
        return "Sentences:\n- fact about [ENT1]\n"

    stats = Counter()
    records = path_assertions(FakeLLM(script), dataset.questions[:4], stats=stats, names=dataset.entity_names)
    assert len(records) == 4 and not stats
    for record, prompt in zip(records, prompts, strict=True):
        (topic,) = _constants(record.triples)
        assert topic in record.question and f'("{topic}",' in prompt.split("Triples:\n")[-1]

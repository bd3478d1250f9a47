"""The candidate featurizer's array passes give what its plain per-binding, per-candidate reference gives, bit for
bit, on random KGs, runs and rankings (several topic entities, mentions, unbound and repeated bindings, empty runs)."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

from stem_jax.answer.features import CandidateFeaturizer, Candidates, TypeVocabulary
from stem_jax.data.types import Question
from stem_jax.kg.index import build_index, relation_text

WORDS = ["red", "river", "the", "of", "cup", "2008", "final", "blue", "team", "1998"]


def _featurizer(rng: np.random.Generator) -> CandidateFeaturizer:
    triples = [(f"e{rng.integers(30)}", f"d{rng.integers(3)}.t{rng.integers(3)}.r{rng.integers(5)}",
                f"e{rng.integers(30)}") for _ in range(150)]
    index = build_index(triples)
    names = {e: " ".join(rng.choice(WORDS, size=int(rng.integers(0, 4)))) for e in index.entities if rng.random() < 0.8}
    table: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:  # a fixed random vector per text
        return np.stack([table.setdefault(t, rng.normal(size=6)) for t in texts]) if texts else np.zeros((0, 6))

    featurizer = CandidateFeaturizer(index, names, TypeVocabulary.of(index, int(rng.integers(1, 12))), embed,
                                     max_candidates=int(rng.integers(1, 9)))
    mentions = {}

    def mentioned(question: Question) -> tuple[int, ...]:  # the linker's mentions, drawn at random
        return mentions.setdefault(question.text, tuple(rng.integers(0, index.num_entities, int(rng.integers(0, 3)))
                                                        .tolist()))

    featurizer.mentioned = mentioned
    return featurizer


def _run(rng: np.random.Generator, index, beam: int) -> tuple[types.SimpleNamespace, dict, tuple]:
    slots = int(rng.integers(2, 4))
    steps = np.asarray([[s - 1, s, int(rng.integers(-1, index.num_relations))] for s in range(1, slots)], np.int64)
    answer = int(rng.choice([-1, *range(1, slots)], p=None)) if rng.random() < 0.9 else -1
    rows = int(rng.integers(1, 12))  # row 0 holds the anchor
    nodes = rng.integers(-1, index.num_entities, (slots, rows))
    nodes[:, rng.random(rows) < 0.1] = -1
    via = np.where(rng.random((slots, rows)) < 0.2, -1, rng.integers(0, len(index.triples), (slots, rows)))
    scores = rng.normal(size=(slots, rows)).astype(np.float32)
    if rows and rng.random() < 0.2:
        scores[answer, 0] = -np.inf
    plan = types.SimpleNamespace(answer_slot=answer, steps=steps, constants=None)
    run = types.SimpleNamespace(plan=plan, beam=beam, beam_prob=float(rng.random()),
                                anchor_entity=int(rng.integers(0, index.num_entities)))
    return run, {"scores": scores}, (nodes, via)


def _inputs(rng: np.random.Generator, featurizer: CandidateFeaturizer):
    index = featurizer.index
    questions, runs, outputs, pruned, ranked = [], [], [], [], []
    for q in range(int(rng.integers(0, 6))):
        topics = tuple(index.entities[i] for i in rng.integers(0, index.num_entities, int(rng.integers(0, 4))))
        text = "what " + " ".join(rng.choice(WORDS, size=int(rng.integers(1, 6))))
        questions.append(Question(qid=str(q), text=text, topic_entities=topics, answers=()))
        made = [_run(rng, index, int(rng.integers(0, 4))) for _ in range(int(rng.integers(0, 6)))]
        runs.append([r for r, _, _ in made])
        outputs.append([o for _, o, _ in made])
        pruned.append([p for _, _, p in made])
        bound = [int(e) for _, _, (nodes, _) in made for e in nodes.ravel() if e >= 0]
        pool = list(dict.fromkeys(bound + rng.integers(0, index.num_entities, 4).tolist()))
        rng.shuffle(pool)
        ranked.append([(e, float(rng.random())) for e in pool[:int(rng.integers(0, len(pool) + 1))]])
    return questions, runs, outputs, ranked, pruned


def _same(one: Candidates, other: Candidates) -> list[str]:
    differ = [name for name in ("entities", "base") if len(getattr(one, name)) != len(getattr(other, name)) or
              not all(np.array_equal(x, y) for x, y in zip(getattr(one, name), getattr(other, name), strict=True))]
    return differ + [f.name for f in dataclasses.fields(Candidates) if f.name not in ("entities", "base")
                     and not np.array_equal(getattr(one, f.name), getattr(other, f.name))]


@pytest.mark.parametrize("seed", range(25))
def test_the_featurizer_equals_its_per_candidate_reference_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    featurizer = _featurizer(rng)
    for _ in range(3):
        questions, runs, outputs, ranked, pruned = _inputs(rng, featurizer)
        want = featurizer._reference_call(questions, runs, outputs, ranked, pruned)
        got = featurizer(questions, runs, outputs, ranked, pruned)
        assert _same(got, want) == []


def test_a_warmed_featurizer_embeds_no_relation_text_when_it_answers():
    rng = np.random.default_rng(7)
    featurizer = _featurizer(rng)
    assert featurizer.warm_up(chunk=3) == featurizer.index.num_relations
    assert set(featurizer._relation_rows) == set(range(featurizer.index.num_relations))
    embedded: list[str] = []
    embed = featurizer.embed
    featurizer.embed = lambda texts: embedded.extend(texts) or embed(texts)
    questions, runs, outputs, ranked, pruned = _inputs(rng, featurizer)
    featurizer(questions, runs, outputs, ranked, pruned)
    texts = {relation_text(r, None) for r in featurizer.index.relations}
    assert embedded and not set(embedded) & texts  # questions and phrases only
    assert featurizer.warm_up() == 0


@pytest.mark.parametrize("seed", range(12))
def test_a_featurizer_for_some_features_computes_those_as_the_full_one_and_skips_the_costly_others(seed):
    from stem_jax.answer.features import CONSTRAINT_FEATURES, MENTION_FEATURES, NUMERIC, feature_columns

    rng = np.random.default_rng(seed)
    full = _featurizer(rng)
    features = tuple(f for f in NUMERIC if rng.random() < 0.5)
    some = CandidateFeaturizer(full.index, full.names, full.vocabulary, full.embed, max_candidates=full.max_candidates,
                               features=features)
    some.mentioned = full.mentioned
    for _ in range(3):
        questions, runs, outputs, ranked, pruned = _inputs(rng, full)
        want = full(questions, runs, outputs, ranked, pruned)
        got = some(questions, runs, outputs, ranked, pruned)
        read = feature_columns(features)
        assert np.array_equal(got.numeric[..., read], want.numeric[..., read])
        groups = [("type_cos",), ("join_match", "neighbour_match"), ("path_cos",), CONSTRAINT_FEATURES,
                  MENTION_FEATURES]  # the costly ones, computed together
        skipped = [f for group in groups if not set(group) & set(features) for f in group]
        assert not got.numeric[..., feature_columns(skipped)].any()
        assert _same(dataclasses.replace(got, numeric=want.numeric), want) == []

"""The answer scorer's neighbour-name cues, computed for a question's candidates in array passes, equal the plain
per-candidate reference."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.answer.features import CandidateFeaturizer, TypeVocabulary
from stem_jax.kg.index import build_index

WORDS = ["red", "river", "the", "of", "cup", "2008", "final", "blue", "team"]


def _featurizer(seed: int) -> tuple[CandidateFeaturizer, np.random.Generator]:
    rng = np.random.default_rng(seed)
    triples = [(f"e{rng.integers(25)}", f"r{rng.integers(4)}", f"e{rng.integers(25)}") for _ in range(120)]
    triples += [("e0", "r0", "e0")]  # a self-loop
    index = build_index(triples)
    names = {e: " ".join(rng.choice(WORDS, size=int(rng.integers(0, 4)))) for e in index.entities
             if rng.random() < 0.8}
    featurizer = CandidateFeaturizer(index, names, TypeVocabulary.of(index, 8), lambda texts: np.zeros((len(texts), 4)))
    return featurizer, rng


def _cue_case(featurizer: CandidateFeaturizer, rng: np.random.Generator) -> tuple:
    """Random (candidate entities, join nodes, topic entities, cue words) of one question."""
    n = featurizer.index.num_entities
    return (rng.integers(0, n, int(rng.integers(0, 10))), set(rng.integers(0, n, int(rng.integers(0, 8))).tolist()),
            set(rng.integers(0, n, int(rng.integers(0, 3))).tolist()),
            set(rng.choice(WORDS, size=int(rng.integers(0, 4))).tolist()))


@pytest.fixture(params=range(12))
def random_cues(request, monkeypatch):
    """A random featurizer with random neighbour and join-degree caps."""
    import stem_jax.answer.features as module

    seed = request.param
    monkeypatch.setattr(module, "NEIGHBOURS", int(np.random.default_rng(seed).integers(1, 12)))
    monkeypatch.setattr(module, "JOIN_DEGREE", int(np.random.default_rng(seed + 1).integers(1, 12)))
    return _featurizer(seed)


def test_batched_cue_matches_equal_the_per_candidate_reference(random_cues):
    featurizer, rng = random_cues
    for _ in range(6):
        entities, joins, topics, cue = _cue_case(featurizer, rng)
        through, near = featurizer.cue_matches(entities, joins, topics, cue)
        for i, entity in enumerate(entities.tolist()):
            assert (through[i], near[i]) == featurizer._cue_matches(entity, joins, topics, cue)


def test_name_matches_for_many_entities_equal_one_at_a_time():
    featurizer, rng = _featurizer(3)
    entities = rng.integers(0, featurizer.index.num_entities, 40)
    cue = {"red", "cup", "2008"}
    got = featurizer.name_matches(entities, cue)
    assert got.tolist() == [featurizer._name_match(int(e), cue) for e in entities.tolist()]


def test_cue_matches_of_a_whole_batch_equal_the_per_candidate_reference(random_cues):
    featurizer, rng = random_cues
    inputs = [_cue_case(featurizer, rng) for _ in range(int(rng.integers(0, 7)))]
    got = featurizer.cue_matches_batch(*zip(*inputs, strict=True)) if inputs else []
    assert len(got) == len(inputs)
    for (through, near), (entities, joins, topics, cue) in zip(got, inputs, strict=True):
        for i, entity in enumerate(entities.tolist()):
            assert (through[i], near[i]) == featurizer._cue_matches(entity, joins, topics, cue)

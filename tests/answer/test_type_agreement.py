"""The answer scorer's type agreement: what the question asks for ("what country") against the texts of each
candidate's type-bag keys, in one array pass that equals the per-candidate reference."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.answer.features import CandidateFeaturizer, TypeVocabulary, answer_phrase, type_key_text
from stem_jax.kg.index import build_index


@pytest.mark.parametrize(("question", "phrase"), [
    ('What Country with the "National Council" as an Official body shares a border with Germany?', "country"),
    ("What kind of money is used in the location", "money"),
    ("what sports facility is used by both Houston Rockets and Aeros?", "sports facility"),
    ('The "Jade Emperor" deity is found in what sacred text(s)?', "sacred text"),
    ("Who founded New York University?", "person"),
    ("Where is Whistler Mountain?", "location place"),
    ("how many children does he have", ""),
])
def test_answer_phrase_is_what_the_question_asks_for(question, phrase):
    assert answer_phrase(question) == phrase


def test_type_key_text_reads_a_key_as_words():
    assert type_key_text("h:location.country") == "location country"
    assert type_key_text("t:film.film.directed_by") == "film directed by"


def _featurizer(seed: int) -> tuple[CandidateFeaturizer, np.random.Generator]:
    rng = np.random.default_rng(seed)
    triples = [(f"e{rng.integers(30)}", f"d{rng.integers(3)}.t{rng.integers(3)}.r{rng.integers(4)}",
                f"e{rng.integers(30)}") for _ in range(90)]
    index = build_index(triples)
    table: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:  # a fixed random vector per text
        return np.stack([table.setdefault(t, rng.normal(size=6)) for t in texts])

    return CandidateFeaturizer(index, None, TypeVocabulary.of(index, int(rng.integers(1, 12))), embed), rng


@pytest.mark.parametrize("seed", range(10))
def test_batched_type_cos_equals_the_per_candidate_reference(seed):
    featurizer, rng = _featurizer(seed)
    n, v = featurizer.index.num_entities, len(featurizer.vocabulary.keys)
    entities = rng.integers(0, n, int(rng.integers(1, 12)))
    types = np.zeros((len(entities), v), np.float32)
    for row, entity in enumerate(entities.tolist()):
        keys = featurizer.type_ids[featurizer.type_offsets[entity]:featurizer.type_offsets[entity + 1]]
        if len(keys):
            types[row, keys] = 1.0 / np.sqrt(len(keys))
    phrase = rng.normal(size=6).astype(np.float32)
    phrase /= np.linalg.norm(phrase)
    got = featurizer.type_cos(types, phrase)
    want = [featurizer._type_cos(int(e), phrase) for e in entities.tolist()]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

"""The path ranker's fine-tuned question side: the encoder's own forward, trained top layers, stored with the ranker."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stem_jax.data.types import PathStep, Question
from stem_jax.encoder.minilm import BertConfig, MiniLM
from stem_jax.encoder.tokenizer import pack, pack_batch
from stem_jax.kg.index import build_index
from stem_jax.plan.path_ranker import PathRanker, PathRankerConfig, train_path_ranker
from stem_jax.plan.question_tower import QuestionTower

CFG = BertConfig(vocab_size=97, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12)


def _tokenize(texts: list[str]) -> list[list[int]]:
    """[CLS]=1 ... [SEP]=2 with each word hashed into the rest of the vocabulary (deterministic)."""
    return [[1, *(3 + zlib.crc32(w.encode()) % (CFG.vocab_size - 3) for w in t.lower().split()), 2] for t in texts]


@pytest.fixture(scope="module")
def weights():
    zeros = jnp.zeros((1, 8), jnp.int32)
    return jax.device_get(MiniLM(CFG).init(jax.random.key(0), zeros, zeros, zeros))["params"]


def _tower(weights, split: int) -> QuestionTower:
    return QuestionTower(CFG, weights, split, _tokenize)


def test_untuned_tower_is_the_packed_encoder_forward(weights):
    rng = np.random.default_rng(0)
    words = ["who", "directed", "X", "the", "film", "born", "where", "of", "actors", "written"]
    texts = [" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(11)]
    ids = _tokenize(texts)
    rows = pack([len(r) for r in ids], 32)
    packed = np.asarray(MiniLM(CFG).apply({"params": weights}, *pack_batch(ids, rows, len(rows), 32)))
    expected = np.zeros((len(texts), CFG.hidden_size), np.float32)
    for r, members in enumerate(rows):
        expected[members] = packed[r, : len(members)]
    for split in range(CFG.num_hidden_layers):  # wherever the frozen part ends
        np.testing.assert_allclose(_tower(weights, split).encode(texts), expected, atol=2e-5)


def test_tuned_layers_round_trip_through_arrays(weights):
    tower = _tower(weights, 1)
    tower.tuned = jax.tree.map(lambda a: np.asarray(a) + 0.01, tower.tuned)
    again = _tower(weights, 1)
    again.load_arrays(tower.arrays())
    texts = ["who directed X", "where were the actors of X born"]
    np.testing.assert_array_equal(again.encode(texts), tower.encode(texts))


def _kg():
    triples = []
    for i in range(16):
        film = f"Film{i}"
        triples += [(film, "directed_by", f"Director{i % 5}"), (film, "written_by", f"Writer{i % 4}"),
                    (film, "has_genre", f"Genre{i % 3}")]
    return triples


def _questions(index, films):
    wordings = {"directed_by": "who directed {}", "written_by": "who wrote {}", "has_genre": "what genre is {}"}
    out = []
    for i in films:
        film = f"Film{i}"
        for relation, wording in wordings.items():
            ends = [index.entities[int(t)] for h, r, t in index.triples.tolist()
                    if index.entities[h] == film and index.relations[r] == relation]
            out.append(Question(qid=f"{film}/{relation}", text=wording.format(film), topic_entities=(film,),
                                answers=tuple(ends), gold_path=(PathStep(relation),)))
    return out


def test_tuning_trains_only_the_top_layers_and_the_saved_ranker_scores_the_same(weights, tmp_path):
    index = build_index(_kg())
    frozen = _tower(weights, 2)  # the relation side: the untouched encoder
    tuned = _tower(weights, 2)
    before = jax.tree.map(np.array, weights)
    config = PathRankerConfig(epochs=20, hidden=16, projection=8, tune_layers=1, tune_learning_rate=1e-3)
    ranker = train_path_ranker(_questions(index, range(12)), _questions(index, range(12, 16)), index,
                               encoder_name="tiny", embed=frozen.encode, config=config, log=lambda _: None, tower=tuned)
    assert ranker.tower is tuned
    moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()), tuned.tuned[0], before["layer_2"])
    assert max(jax.tree.leaves(moved)) > 0  # the top layer was trained ...
    jax.tree.map(np.testing.assert_array_equal, weights, before)  # ... and the encoder's own weights were not
    ranker.save(tmp_path)
    again = PathRanker.load(tmp_path, tower_factory=lambda split: _tower(weights, split), index=index,
                            embed_fn=frozen.encode)
    assert again.tower.split == 2
    questions = _questions(index, range(12, 16))
    for (c1, p1, b1), (c2, p2, b2) in zip(ranker.score(questions), again.score(questions), strict=True):
        assert [c.path for c in c1] == [c.path for c in c2]
        np.testing.assert_allclose(p1, p2, rtol=1e-5, atol=1e-7)
        assert b1 == pytest.approx(b2, abs=1e-6)


def test_relation_corrections_move_reached_relations_and_leave_unreached_ones(weights):
    index = build_index([*_kg(), ("Town", "located_in", "Country")])  # no training topic reaches located_in
    frozen = _tower(weights, 2)
    config = PathRankerConfig(epochs=10, hidden=16, projection=8, tune_relations=True)
    ranker = train_path_ranker(_questions(index, range(12)), [], index, encoder_name="tiny", embed=frozen.encode,
                               config=config, log=lambda _: None)
    original = dict(zip(["directed by", "located in"], frozen.encode(["directed by", "located in"]), strict=True))
    assert np.abs(ranker.relation_bank["directed by"] - original["directed by"]).max() > 1e-4
    np.testing.assert_allclose(ranker.relation_bank["located in"], original["located in"], atol=1e-6)


class _NoTemplates:
    """A template classifier that plans nothing (held-out top-1 0: the path ranker is trained)."""

    report = {"mlp": {"template": {"top1": 0.0}}}
    index = None

    def plan_batch(self, questions):
        return [[] for _ in questions]


@pytest.mark.parametrize("side", ["frozen", "tuned", "auto"])
def test_train_planner_trains_and_stores_the_asked_question_side(weights, tmp_path, monkeypatch, side):
    import json
    import types

    from stem_jax.config import StemConfig, apply_overrides
    from stem_jax.data.types import Dataset
    from stem_jax.plan import question_tower
    from stem_jax.plan.path_ranker import PATHS_FOLDER
    from stem_jax.plan.training import select_planner

    monkeypatch.setattr(question_tower, "minilm_tower",
                        lambda split=None, layers=1, encoder=None: _tower(weights, 3 - layers))
    index = build_index(_kg())
    train, val = _questions(index, range(8)), _questions(index, range(8, 16))
    config = apply_overrides(StemConfig(), {"planner.path_question": side, "planner.path_hops": "fixed"})
    frozen = _tower(weights, 2)
    selection = select_planner(Dataset("tiny", train + val, _kg()), train, val, _NoTemplates(), config, tmp_path,
                               encoder=types.SimpleNamespace(name="all-MiniLM-L6-v2:tiny"), embed=frozen.encode,
                               log=lambda _: None)
    assert selection["question_side"] in ({side} if side != "auto" else {"frozen", "tuned"})
    tuned = [k.split("@")[0].endswith("+tuned") for k in selection["beam_answer_hit"] if k != "templates"]
    assert any(tuned) == (side != "frozen") and all(tuned) == (side == "tuned")
    stored = json.loads((tmp_path / PATHS_FOLDER / "ranker.json").read_text())
    assert ("tower" in stored) == (selection["question_side"] == "tuned")

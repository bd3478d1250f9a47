"""The distilled question student: its jitted forward against a plain per-question reference, padding that changes
nothing, the weights file round trip, and the encoder option that routes only question encodes to it."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from minilm_weights import require_minilm_weights

from stem_jax.config import EncoderConfig, StemConfig, apply_overrides, field_problem
from stem_jax.encoder.bert import BertConfig
from stem_jax.encoder.student import load_student, reference_vectors, save_student, student_vectors

TINY = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=4, intermediate_size=24,
                  max_position_embeddings=32, type_vocab_size=2, layer_norm_eps=1e-12)


def _random_params(seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    h, inner = TINY.hidden_size, TINY.intermediate_size

    def normal(*shape, scale=0.5):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def dense(i, o):
        return {"kernel": normal(i, o), "bias": normal(o, scale=0.1)}

    def norm():
        return {"scale": 1 + normal(h, scale=0.1), "bias": normal(h, scale=0.1)}

    minilm = {"word": {"embedding": normal(TINY.vocab_size, h)}, "position": normal(TINY.max_position_embeddings, h),
              "token_type": normal(TINY.type_vocab_size, h), "embed_ln": norm()}
    layer = {"qkv": dense(h, 3 * h), "attn_out": dense(h, h), "attn_ln": norm(), "intermediate": dense(h, inner),
             "out": dense(inner, h), "out_ln": norm()}
    return minilm, {"layer": layer, "proj": dense(h, h)}


_jitted_vectors = jax.jit(lambda minilm, student, tokens, mask: student_vectors(minilm, student, TINY, tokens, mask))


def _padded(sequences, length):
    tokens = np.zeros((len(sequences), length), np.int32)
    mask = np.zeros_like(tokens)
    for r, seq in enumerate(sequences):
        tokens[r, : len(seq)], mask[r, : len(seq)] = seq, 1
    return tokens, mask


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), lengths=st.lists(st.integers(1, 12), min_size=1, max_size=5))
def test_student_forward_matches_plain_reference_on_random_params(seed, lengths):
    minilm, student = _random_params(seed)
    rng = np.random.default_rng(seed + 1)
    sequences = [rng.integers(0, TINY.vocab_size, n).tolist() for n in lengths]
    # one fixed [5, 16] shape (one compile): short rows padded, missing rows all padding
    tokens, mask = _padded(sequences + [[]] * (5 - len(sequences)), 16)
    got = np.asarray(_jitted_vectors(minilm, student, tokens, mask))[: len(sequences)]
    want = reference_vectors(minilm, student, TINY, sequences)
    np.testing.assert_allclose(got, want, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_question_vector_does_not_depend_on_its_row_padding_or_neighbours():
    minilm, student = _random_params(3)
    sequences = [[1, 5, 7, 2], [1, 9, 9, 9, 9, 9, 2]]
    alone = np.asarray(student_vectors(minilm, student, TINY, *_padded(sequences[:1], 4)))[0]
    padded = np.asarray(student_vectors(minilm, student, TINY, *_padded(sequences, 16)))[0]
    np.testing.assert_allclose(padded, alone, atol=1e-5)


def test_student_file_round_trips_as_float16(tmp_path):
    _, student = _random_params(0)
    save_student(student, tmp_path / "s.npz")
    back = load_student(tmp_path / "s.npz")
    assert back["layer"]["qkv"]["kernel"].dtype == np.float32
    np.testing.assert_allclose(back["proj"]["kernel"], student["proj"]["kernel"], rtol=1e-3, atol=1e-3)
    np.savez(tmp_path / "bad.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a question-student file"):
        load_student(tmp_path / "bad.npz")


def test_question_encoder_is_a_checked_config_field():
    assert EncoderConfig().question_encoder == "minilm"
    config = apply_overrides(StemConfig(), {"encoder.question_encoder": "student"})
    assert config.encoder.question_encoder == "student"
    assert field_problem("encoder.question_encoder", "tiny") is not None


@pytest.fixture(scope="module")
def minilm_dir():
    require_minilm_weights()
    from stem_jax.encoder import minilm_model_dir

    return minilm_model_dir()


QUESTIONS = ["which person directed the movies starred by X", "what year did X win super bowl",
             "who are movie co-directors of X", "X appears in which movies"]


def test_student_option_changes_question_vectors_only(minilm_dir):
    from stem_jax.encoder import MiniLMEncoder

    plain = MiniLMEncoder(minilm_dir, memo=0, question_encoder="minilm")
    fast = MiniLMEncoder(minilm_dir, memo=16, question_encoder="student")
    assert fast.name == plain.name  # caches and planners keyed by the encoder stay valid
    np.testing.assert_array_equal(plain.encode_questions(QUESTIONS), plain.encode(QUESTIONS))
    np.testing.assert_array_equal(fast.encode(QUESTIONS), plain.encode(QUESTIONS))  # schema texts etc.: MiniLM
    student = fast.encode_questions(QUESTIONS)
    assert student.shape == (len(QUESTIONS), plain.dim) and student.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(student, axis=1), 1.0, atol=1e-5)
    assert (student * plain.encode(QUESTIONS)).sum(axis=1).min() > 0.9  # close to MiniLM's, not equal
    # one question alone or in a batch, memo hit or miss: the same vector
    np.testing.assert_allclose(fast.encode_questions(QUESTIONS[1:2])[0], student[1], atol=1e-5)
    assert fast.memo_hits >= 1
    with pytest.raises(ValueError, match="question_encoder must be one of"):
        MiniLMEncoder(minilm_dir, question_encoder="tiny")

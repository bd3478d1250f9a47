"""The pattern planner reads its question vectors from the encoder's question encoder when it has one."""

import numpy as np

from stem_jax.data.types import Question
from stem_jax.encoder.hashing import HashingEncoder
from stem_jax.plan.pattern import PatternPlanner


class QuestionEncoderOfItsOwn(HashingEncoder):
    """Question vectors that differ from the text vectors, and a count of the calls each gets."""

    def __init__(self):
        super().__init__()
        self.calls = {"encode": 0, "encode_questions": 0}

    def encode(self, texts):
        self.calls["encode"] += 1
        return super().encode(texts)

    def encode_questions(self, texts):
        self.calls["encode_questions"] += 1
        return -super().encode(texts)


def _planner(encoder) -> PatternPlanner:
    return PatternPlanner(templates=(), params={}, config=None, bank=np.zeros((0, 1), np.float16),
                          bank_targets=np.zeros((0, 0), np.float32), bank_breadth=np.zeros(0, np.float32),
                          prior_breadth=np.zeros(0, np.float32), encoder_name=encoder.name, encoder=encoder)


def test_question_vectors_come_from_the_question_encoder_and_repeat_per_shared_wording():
    encoder = QuestionEncoderOfItsOwn()
    questions = [Question(qid=str(i), text=text, topic_entities=(topic,), answers=())
                 for i, (text, topic) in enumerate([("who directed [Kismet]", "Kismet"),
                                                    ("who directed [Juarez]", "Juarez"),
                                                    ("what genre is [Kismet]", "Kismet")])]
    vectors = _planner(encoder).embed(questions)
    assert encoder.calls == {"encode": 0, "encode_questions": 1}
    assert np.array_equal(vectors[0], vectors[1])  # the same masked wording
    text_planner = _planner(HashingEncoder())
    text_planner.embed_fn = HashingEncoder().encode  # the masked wordings' text vectors
    assert np.allclose(vectors, -text_planner.embed(questions))


def test_an_encoder_without_a_question_encoder_gives_its_text_vectors():
    encoder = HashingEncoder()
    questions = [Question(qid="q", text="who directed [Kismet]", topic_entities=("Kismet",), answers=())]
    through_fn = _planner(encoder)
    through_fn.embed_fn = encoder.encode
    assert np.array_equal(_planner(encoder).embed(questions), through_fn.embed(questions))

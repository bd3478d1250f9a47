"""An Engine shared by several threads gives exactly the serial answers.

The race it pins: each call prepares its questions (plans, then appends unseen schema-triple texts to
the pipeline's embedding table: rows dict and matrix); two threads appending at once both wrote
their rows at the same positions. The encoder is slowed down here so that the window is wide open
on every run (without the engine's lock this test fails on every run, not by chance).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}
THREADS = 4


def _open(cache) -> Engine:
    return Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=cache, limit=6)


def _answers(answers) -> list[tuple]:
    return [(a.question.qid, tuple(a.record["prediction"]), tuple(np.round(a.record.get("scores", []), 5)))
            for a in answers]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    engine = _open(cache)
    questions = engine.dataset.questions
    batches = [questions[i::THREADS * 2] for i in range(THREADS * 2)]
    expected = [_answers(engine.retrieve(batch)) for batch in batches]
    return cache, batches, expected


def _slow(encoder, seconds: float = 0.02):
    """Make the encoder take a while, so threads interleave inside the table append."""
    encode = encoder.encode

    def slow(texts, *args, **kwargs):
        time.sleep(seconds)
        return encode(texts, *args, **kwargs)

    encoder.encode = slow


def test_threads_calling_retrieve_get_the_serial_answers(serial):
    cache, batches, expected = serial
    engine = _open(cache)
    engine.retrieve(batches[0][:1])  # the first call builds the table; later calls append to it
    _slow(engine.encoder)
    got: dict[tuple[int, int], list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(worker: int) -> None:  # every thread asks every batch, in its own order (shared questions too)
        try:
            start.wait()
            for k in range(len(batches)):
                b = (k + 2 * worker) % len(batches)
                got[worker, b] = _answers(engine.retrieve(batches[b]))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    for worker in range(THREADS):
        assert [got[worker, b] for b in range(len(batches))] == expected


def test_threads_calling_ask_get_the_serial_answers(serial):
    cache, batches, expected = serial
    engine = _open(cache)
    _slow(engine.encoder)
    questions = [q for batch in batches for q in batch][: THREADS * 3]
    alone = {qid: (pred, scores) for batch in expected for qid, pred, scores in batch}
    got: list[tuple[str, tuple]] = []
    errors: list[BaseException] = []

    def work(mine) -> None:
        try:
            for q in mine:
                (qid, pred, scores), = _answers([engine.ask(q)])
                got.append((qid, (pred, scores)))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    rotated = [questions[2 * i:] + questions[: 2 * i] for i in range(THREADS)]  # shared questions, own order
    threads = [threading.Thread(target=work, args=(rotated[i],)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(got) == THREADS * len(questions)
    assert all(answer == alone[qid] for qid, answer in got)

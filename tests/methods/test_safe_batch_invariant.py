"""SAFE answers a question the same way whatever questions share its batch: scores included."""

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.engine import Engine
from stem_jax.methods.safe.adj import candidate_schema_edges, exact_nearest


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return Engine.open("demo", config=StemConfig(encoder=EncoderConfig(name="hashing")), planner="oracle",
                       cache_dir=tmp_path_factory.mktemp("cache"))


def _answers(engine, questions, chunk):
    method = engine.method("safe")
    method.pseudo.clear()  # plan again, as a fresh run
    out = {}
    for start in range(0, len(questions), chunk):
        for answer in engine.retrieve(questions[start : start + chunk], method="safe"):
            out[answer.question.qid] = answer.answers
    return out


def test_chunking_changes_no_score(engine):
    questions = [q for hops in (1, 2, 3) for q in engine.dataset.questions if q.hops == hops][:6]
    questions += [q for q in engine.dataset.questions if q.hops in (2, 3)][6:12]
    whole = _answers(engine, questions, len(questions))
    assert any(whole.values())
    assert _answers(engine, questions, 4) == whole
    assert _answers(engine, questions, 1) == whole


def test_an_exact_match_scores_one(engine):
    question = next(q for q in engine.dataset.questions if q.hops == 1)
    answers = engine.retrieve([question], method="safe")[0].answers
    assert answers and answers[0][1] == 1.0  # the topic's own name and an exact relation: distance 0


def test_exact_distances_do_not_depend_on_the_batch():
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(50, 16)).astype(np.float16).astype(np.float32)
    queries = keys[[3, 7, 11]]
    candidates = np.stack([np.arange(50)] * 3)
    together, ids = exact_nearest(queries, keys, candidates, 2)
    alone, alone_ids = exact_nearest(queries[1:2], keys, candidates[1:2], 2)
    assert together[1].tolist() == alone[0].tolist() and ids[1].tolist() == alone_ids[0].tolist()
    assert together[:, 0].tolist() == [0.0, 0.0, 0.0] and ids[:, 0].tolist() == [3, 7, 11]
    allowed = np.ones((3, 50), bool)
    allowed[0, 3] = False  # a disallowed exact match is not a candidate
    got, dist = candidate_schema_edges(queries, keys, allowed, 2)
    assert got[0, 0] != 3 and got[1, 0] == 7 and dist[1, 0] == 0.0

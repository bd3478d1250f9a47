"""A long-lived engine (a server): prepared runs kept across calls (bounded LRU) and a bounded step-text table,
neither changing an answer."""

import pytest

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    config = apply_overrides(StemConfig(), FAST)
    cache = tmp_path_factory.mktemp("cache")
    fresh = Engine.open("demo", config=config, planner="pattern", cache_dir=cache, limit=12)
    kept = Engine.open("demo", config=config, planner="pattern", cache_dir=cache, limit=12)
    return fresh, kept


def _texts(engine):
    return [q.text for q in engine.dataset.questions]


def _same(a, b):
    assert [x.answers for x in a] == [x.answers for x in b]
    assert [x.evidence for x in a] == [x.evidence for x in b]
    assert [x.record.get("plans") for x in a] == [x.record.get("plans") for x in b]


def test_kept_runs_answer_as_fresh_ones_and_stay_bounded(engines):
    fresh, kept = engines
    texts = _texts(fresh)
    kept.keep_prepared = 3
    stem = kept.method("stem")
    reference = fresh.retrieve(texts[:4])
    first = kept.retrieve(texts[:4])
    again = kept.retrieve(texts[:4])  # the batch itself is never evicted, even above the bound
    _same(reference, first)
    _same(reference, again)
    assert all(a.stage_ms.get("plan", 0.0) == 0.0 and a.stage_ms.get("encode", 0.0) == 0.0 for a in again)
    assert all(a.stage_ms["plan"] > 0 for a in first)
    for text in texts[4:]:  # one at a time: the LRU keeps the 3 used last
        _same(fresh.retrieve([text]), kept.retrieve([text]))
    assert len(stem._online) == 3
    assert set(stem._online) <= set(stem.runs)
    assert not any(q.qid in stem.runs for q, _ in (kept.question(t) for t in texts[:4]))
    # the engine without keep_prepared plans every call afresh, as `ask --warm` times it
    assert fresh.retrieve(texts[:1])[0].stage_ms["plan"] > 0


def test_a_text_asked_about_two_topics_is_two_questions(engines):
    _, kept = engines
    kept.keep_prepared = 8
    q = kept.dataset.questions[0]
    other = next(e for e in kept.index.entities if e not in q.topic_entities)
    text = q.text
    a, _ = kept.question(text, topic=kept.display(q.topic_entities[0]))
    b, _ = kept.question(text, topic=kept.display(other))
    assert a.qid != b.qid
    first, second = kept.retrieve([a, b])
    assert kept.retrieve([b])[0].answers == second.answers
    assert kept.retrieve([a])[0].answers == first.answers


def test_step_text_table_is_bounded_without_changing_answers(engines):
    fresh, kept = engines
    texts = _texts(fresh)
    kept.keep_prepared = 2
    stem = kept.method("stem")
    stem.max_online_texts = 4
    stem._compact_at = 4
    # the same wordings about other topics: new schema-step texts (they contain the topic's name)
    topics = [kept.display(e) for e in kept.index.entities[:: max(1, len(kept.index.entities) // 10)][:10]]
    questions = [kept.question(texts[i % len(texts)], topic=t)[0] for i, t in enumerate(topics)]
    reference = [fresh.retrieve([q])[0] for q in questions]
    for _ in range(2):
        got = [kept.retrieve([q])[0] for q in questions]
        _same(reference, got)
    assert stem.compactions > 0
    table = stem.pipeline.text_rows
    assert sorted(table.values()) == list(range(len(table)))  # rows stay contiguous
    assert len(stem.pipeline.text_emb) == len(table)
    used = {t for runs in stem.runs.values() for run in runs for t in run.plan.step_texts()}
    assert used <= set(table)
    assert len(table) - stem._base_rows <= max(4, stem._compact_at) + 64

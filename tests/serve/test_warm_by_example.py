"""Serve's warm-up by example: a bounded set of path-planner shapes, and one answer call per padded batch size."""

from __future__ import annotations

from types import SimpleNamespace

from stem_jax.data.types import Question
from stem_jax.plan.path_ranker import MAX_ROWS, MIN_ROWS, PathRanker, PathRankerConfig, candidate_bucket
from stem_jax.serve.warm import batch_sizes, planner_parts, warm_by_example


def test_batch_sizes_double_up_to_the_largest_batch():
    assert batch_sizes(1) == [1]
    assert batch_sizes(32) == [1, 2, 4, 8, 16, 32]
    assert batch_sizes(20) == [1, 2, 4, 8, 16, 20]


def test_the_path_planner_has_a_bounded_set_of_scoring_shapes():
    ranker = PathRanker(params={}, config=PathRankerConfig(max_paths=4096), encoder_name="x")
    shapes = ranker.scoring_shapes(32)
    assert {w for w, _ in shapes} == {1, 8, 64}
    assert all(MIN_ROWS <= rows <= MAX_ROWS for _, rows in shapes)
    assert max(rows for w, rows in shapes if w == 1) == candidate_bucket(4096)
    assert len(shapes) == len(set(shapes)) <= 30


def test_warm_up_answers_each_padded_batch_size_once_and_says_so():
    calls, lines = [], []
    questions = [Question(qid=str(i), text=f"q{i}", topic_entities=("a",), answers=()) for i in range(3)]
    engine = SimpleNamespace(planner=None, dataset=SimpleNamespace(questions=questions),
                             retrieve=lambda batch, method: calls.append(len(batch)))
    info = warm_by_example(engine, 4, log=lines.append)
    assert calls == [1, 2, 4]
    assert [b["questions"] for b in info["example_batches"]] == [1, 2, 4] and len(lines) == 3


def test_planner_parts_reach_the_wrapped_planners():
    inner = SimpleNamespace(name="ranker")
    mixed = SimpleNamespace(first=SimpleNamespace(name="templates"), second=inner)
    outer = SimpleNamespace(base=mixed)
    assert inner in list(planner_parts(outer))


def test_warm_up_embeds_the_answer_scorers_relation_texts_before_the_examples():
    lines, order = [], []
    scorer = SimpleNamespace(warm_up=lambda: order.append("scorer") or 7)
    engine = SimpleNamespace(planner=None, dataset=SimpleNamespace(questions=[]),
                             method=lambda name: SimpleNamespace(context=SimpleNamespace(answer_scorer=scorer)))
    info = warm_by_example(engine, 4, log=lines.append)
    assert order == ["scorer"] and info["answer_scorer_relations"] == 7
    assert lines[-1].startswith("  answer scorer: 7 relation texts")

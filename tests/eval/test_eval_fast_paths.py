"""The eval's host-side shortcuts give what the plain per-question code gives.

* :func:`path_walk_triples_many` (many gold-path walks of one path at once) equals a scan of every
  triple per walk, on random KGs with repeated topics, self-loops and parallel triples;
* :func:`gold_path_triple_ids` (a batch, by triple id) equals :func:`gold_path_triples` (strings) per question;
* :func:`make_records` equals a plain one-question-at-a-time record builder, coverage included;
* an eval scores the records it wrote in memory, and the report equals scoring predictions.jsonl.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from test_gold_path_walk import reference_walk  # every triple scanned per step

from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.eval.loop import evaluate_method
from stem_jax.eval.metrics import coverage_rate
from stem_jax.eval.records import MAX_EVIDENCE_LISTED, make_records
from stem_jax.eval.scoring import score_predictions
from stem_jax.kg.index import build_index
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.plan.oracle import gold_path_triple_ids, gold_path_triples, path_walk_triples_many


def random_kg(rng: np.random.Generator):
    n, r = int(rng.integers(3, 25)), int(rng.integers(1, 4))
    raw = [(f"e{rng.integers(n)}", f"r{rng.integers(r)}", f"e{rng.integers(n)}") for _ in range(int(rng.integers(1, 120)))]
    return build_index(raw)


@pytest.mark.parametrize("seed", range(25))
def test_many_walks_at_once_equal_each_walk_alone(seed):
    rng = np.random.default_rng(seed)
    index = random_kg(rng)
    length = int(rng.integers(1, 4))
    path = [(int(rng.integers(index.num_relations)), bool(rng.integers(2))) for _ in range(length)]
    steps = [PathStep(index.relations[rel], forward) for rel, forward in path]
    walks = int(rng.integers(1, 12))
    topics = rng.integers(index.num_entities, size=walks).tolist()  # topics repeat at random
    answers = [np.asarray(sorted(set(rng.choice(index.num_entities, size=int(rng.integers(1, index.num_entities + 1)),
                                                replace=False).tolist()))) for _ in range(walks)]
    got = path_walk_triples_many(index, topics, steps, answers)
    assert len(got) == walks
    for topic, wanted, ids in zip(topics, answers, got, strict=True):
        assert ids.dtype == np.int32
        assert ids.tolist() == reference_walk(index.triples, topic, path, set(wanted.tolist()))


def test_many_walks_edge_cases():
    index = build_index([("a", "r", "b"), ("b", "s", "c")])
    a = index.entity_ids["a"]
    assert path_walk_triples_many(index, [], [PathStep("r")], []) == []
    assert [x.size for x in path_walk_triples_many(index, [a, a], [PathStep("missing")], [np.asarray([1])] * 2)] == [0, 0]
    assert [x.size for x in path_walk_triples_many(index, [a], [], [np.asarray([1])])] == [0]


def random_case(seed: int, count: int) -> tuple[np.random.Generator, object, list[Question]]:
    """A random KG and ``count`` random questions over it, drawn from ``seed``, and the generator for more draws."""
    rng = np.random.default_rng(seed)
    index = random_kg(rng)
    return rng, index, random_questions(rng, index, count)


def random_questions(rng: np.random.Generator, index, count: int) -> list[Question]:
    """Questions with stored gold paths, constraints, a RoG graph, unknown topics and no answers."""
    names = list(index.entities)
    relations = list(index.relations)
    questions = []
    for i in range(count):
        topic = names[int(rng.integers(len(names)))]
        answers = tuple(names[int(k)] for k in rng.choice(len(names), size=int(rng.integers(0, 4)), replace=False))
        path = tuple(PathStep(relations[int(rng.integers(len(relations)))], bool(rng.integers(2)))
                     for _ in range(int(rng.integers(1, 4))))
        kind = int(rng.integers(6))
        if kind == 0:  # several topics, one path each
            other = names[int(rng.integers(len(names)))]
            questions.append(Question(f"q{i}", "t", (topic, other), answers,
                                      constraints=((topic, path), (other, path[:1]))))
        elif kind == 1:  # R in its own graph
            graph = tuple((names[int(rng.integers(len(names)))], relations[0], names[int(rng.integers(len(names)))])
                          for _ in range(6)) + ((topic, relations[0], answers[0] if answers else topic),)
            questions.append(Question(f"q{i}", "t", (topic,), answers, graph=graph))
        elif kind == 2:
            questions.append(Question(f"q{i}", "t", ("not-in-kg",), answers, gold_path=path))
        elif kind == 3:
            questions.append(Question(f"q{i}", "t", (topic,), answers + ("not-in-kg",), gold_path=path))
        else:
            questions.append(Question(f"q{i}", "t", (topic,), answers, gold_path=path))
    return questions


@pytest.mark.parametrize("seed", range(15))
def test_gold_ids_of_a_batch_equal_each_questions_gold_triples(seed):
    _, index, questions = random_case(100 + seed, 30)
    batch = gold_path_triple_ids(questions, index)
    for question, ids in zip(questions, batch, strict=True):
        if question.graph is not None and gold_path_triples(question, index):
            assert ids is None  # its R has no ids in this index
            continue
        if ids is None:
            continue
        assert ids.tolist() == sorted(set(ids.tolist()))
        assert set(index.triple_strings(ids)) == gold_path_triples(question, index)


def plain_record(context: MethodContext, question: Question, retrieval: Retrieval, method: str) -> dict:
    """A plain one-question record builder (strings throughout), for comparison."""
    index = context.index
    evidence = index.triple_strings(sorted(set(retrieval.evidence)))
    gold = gold_path_triples(question, index)
    record = {
        "id": question.qid, "question": question.text, "hops": question.hops,
        "prediction": [context.display(index.entities[e]) for e, _ in retrieval.answers],
        "scores": [round(float(s), 6) for _, s in retrieval.answers],
        "ground_truth": [context.display(a) for a in question.answers],
        "evidence": [[context.display(h), r, context.display(t)] for h, r, t in evidence[:MAX_EVIDENCE_LISTED]],
        "evidence_count": len(evidence),
        "coverage": coverage_rate(gold, evidence, undirected=False) if gold else None,
        "gold_path_triples": len(gold), "overflow": int(retrieval.overflow),
        "ms": {k: round(v, 3) for k, v in retrieval.stage_ms.items()}, **retrieval.info,
    }
    if retrieval.chains:
        record["chains"] = list(retrieval.chains)
    record["method"] = method
    return record


def random_retrievals(rng: np.random.Generator, index, questions, gold_bias: bool = True) -> list[Retrieval]:
    out = []
    golds = gold_path_triple_ids(questions, index)
    for question, gold in zip(questions, golds, strict=True):
        evidence = rng.integers(index.num_triples, size=int(rng.integers(0, 20))).tolist()
        if gold_bias and gold is not None and gold.size:  # some of R, so coverage lies strictly between 0 and 1
            evidence += gold[: int(rng.integers(gold.size + 1))].tolist()
        answers = [(int(e), float(rng.random())) for e in rng.integers(index.num_entities, size=int(rng.integers(0, 5)))]
        out.append(Retrieval(question.qid, answers, evidence, stage_ms={"trace": float(rng.random())},
                             info={"theta": 0.25}, overflow=int(rng.integers(2))))
    return out


@pytest.mark.parametrize("seed", range(10))
def test_batch_records_equal_one_question_records(seed):
    rng, index, questions = random_case(200 + seed, 25)
    names = {e: e.upper() for e in list(index.entities)[::2]}  # some entities have display names
    context = MethodContext(Dataset("toy", questions, [], entity_names=names), index, None, None, StemConfig())
    retrievals = random_retrievals(rng, index, questions)
    got = make_records(context, questions, retrievals, "stem")
    want = [plain_record(context, q, r, "stem") for q, r in zip(questions, retrievals, strict=True)]
    assert json.dumps(got) == json.dumps(want)


def test_batch_records_list_at_most_the_cap():
    triples = [(f"a{i}", "r", f"b{i}") for i in range(MAX_EVIDENCE_LISTED + 40)]
    index = build_index(triples)
    question = Question("q", "t", ("a0",), ("b0",), gold_path=(PathStep("r"),))
    context = MethodContext(Dataset("toy", [question], triples), index, None, None, StemConfig())
    retrieval = Retrieval("q", [(1, 1.0)], list(range(index.num_triples))[::-1])
    [record] = make_records(context, [question], [retrieval], "stem")
    assert record == plain_record(context, question, retrieval, "stem")
    assert len(record["evidence"]) == MAX_EVIDENCE_LISTED and record["evidence_count"] == index.num_triples
    assert record["coverage"] == 1.0 and record["gold_path_triples"] == 1


class _Replay:
    """A retrieval method that hands back fixed retrievals: the eval loop without a tracer."""

    name = "replay"

    def __init__(self, context, retrievals):
        self.context = context
        self.by_qid = {r.qid: r for r in retrievals}

    def prepare(self, questions, *, show_progress=False):
        return {}

    def retrieve(self, questions):
        return [self.by_qid[q.qid] for q in questions]


def test_eval_scores_what_it_wrote_as_the_file_scores(tmp_path):
    rng = np.random.default_rng(7)
    index = random_kg(rng)
    questions = [dataclass_with_hops(q, int(rng.integers(1, 4))) for q in random_questions(rng, index, 60)]
    context = MethodContext(Dataset("toy", questions, []), index, None, None, StemConfig())
    method = _Replay(context, random_retrievals(rng, index, questions))
    out = tmp_path / "run"
    fingerprint = {"method": "replay"}
    # a first run over a third of the questions, then a resumed run: scored from what it read and wrote
    evaluate_method(method, questions[:20], out, chunk_size=7, show_progress=False, fingerprint=fingerprint,
                    log=lambda _: None)
    summary = evaluate_method(method, questions, out, chunk_size=9, show_progress=False, fingerprint=fingerprint,
                              log=lambda _: None)
    from_file = score_predictions(out / "predictions.jsonl", {q.qid for q in questions})
    assert {k: summary[k] for k in from_file} == from_file
    assert json.dumps({k: summary[k] for k in from_file}) == json.dumps(from_file)
    assert summary["overall"]["n"] + sum(summary["overall"]["skipped"].values()) == len(questions)
    assert math.isfinite(summary["overall"]["mean"]["f1"])


@pytest.mark.filterwarnings("ignore::stem_jax.eval.run_folder.RunFolderWarning")
def test_a_repeated_question_id_is_scored_from_the_file(tmp_path):
    rng, index, questions = random_case(8, 6)
    questions = questions + questions[:2]  # two ids twice: the file cleans them up, and so does the score
    context = MethodContext(Dataset("toy", questions, []), index, None, None, StemConfig())
    method = _Replay(context, random_retrievals(rng, index, questions[:6]))
    summary = evaluate_method(method, questions, tmp_path, chunk_size=4, show_progress=False,
                              fingerprint={"method": "replay"}, log=lambda _: None)
    from_file = score_predictions(tmp_path / "predictions.jsonl", {q.qid for q in questions})
    assert {k: summary[k] for k in from_file} == from_file


def dataclass_with_hops(question: Question, hops: int) -> Question:
    import dataclasses

    return dataclasses.replace(question, hops=hops)


def test_settled_heap_unfreezes_only_what_it_froze():
    import gc

    from stem_jax.eval.loop import settled_heap

    assert gc.get_freeze_count() == 0
    with settled_heap() as settle:
        assert gc.get_freeze_count() > 0
        settle()
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a process that froze its own objects keeps them frozen
    try:
        with settled_heap():
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_collector_paused_restores_the_collector():
    import gc

    from stem_jax.engine import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()

"""Plan stores: array layout, sidecar, resume, corruption, mismatched inputs."""

import json

import numpy as np
import pytest

from stem_jax.data.demo_kg import load_demo
from stem_jax.errors import CacheError
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema, SingleQuestionPlanner, precomputed_planner
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.plan.store import PLACEHOLDER, UNKNOWN_ENTITY, PlanStore, PlanStoreWarning, write_plan_store


@pytest.fixture(scope="module")
def demo():
    dataset = load_demo(split="test")
    return dataset.questions[:50], build_index(dataset.triples)


class CountingPlanner:
    """The oracle plus a made-up second beam; counts questions planned."""

    name = "counting"

    def __init__(self):
        self.planned = 0

    def plan_batch(self, questions):
        self.planned += len(questions)
        out = []
        for q in questions:
            gold = OraclePlanner().plan(q)[0]
            extra = SchemaGraph((SchemaTriple(q.topic_entities[0], "no_such_relation", "[ENT1]"),
                                 SchemaTriple("Nowhere", "located_in", "[ENT1]")), "[ENT1]", "Breadth")
            out.append([ScoredSchema(gold, 0.9), ScoredSchema(extra, 0.1)])
        return out


def test_layout_and_round_trip(demo, tmp_path):
    questions, index = demo
    store = write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, beam=3, max_triples=4, chunk_rows=16)
    assert store.complete()
    batch = store.read_rows(0, 5)
    assert batch.triples.shape == (5, 3, 4, 3) and batch.triples.dtype == np.int32
    assert batch.nodes.shape == (5, 3, 8)
    np.testing.assert_array_equal(batch.valid, [[True, True, False]] * 5)
    q0 = questions[0]
    gold = OraclePlanner().plan(q0)[0]
    t = gold.triples[0]
    head_slot = gold.nodes().index(t.head)
    np.testing.assert_array_equal(batch.triples[0, 0, 0], [head_slot, index.relation_ids[t.relation],
                                                             gold.nodes().index(t.tail)])
    assert batch.nodes[0, 0, gold.nodes().index(q0.topic_entities[0])] == index.entity_ids[q0.topic_entities[0]]
    assert PLACEHOLDER in batch.nodes[0, 0]
    assert batch.answer[0, 0] == gold.nodes().index(gold.answer)
    assert batch.strategy[0, 0] == (0 if gold.strategy == "Precision" else 1)
    # the made-up beam: unknown relation -> -1, unknown constant -> UNKNOWN_ENTITY
    assert batch.triples[0, 1, 0, 1] == -1 and UNKNOWN_ENTITY in batch.nodes[0, 1]
    assert batch.score[0, 1] == pytest.approx(0.1)
    assert batch.sidecar[0]["id"] == q0.qid and batch.sidecar[0]["plans"][0]["triples"][0] == [t.head, t.relation, t.tail]
    beams = PlanStore.open(tmp_path / "s").beams()
    assert [e.schema for e in beams[q0.qid]] == [e.schema for e in CountingPlanner().plan_batch([q0])[0]]
    rows = [r for b in store.iter_batches(7) for r in b.rows.tolist()]
    assert rows == list(range(len(questions)))


def test_rerun_skips_finished_chunks_and_resumes(demo, tmp_path):
    questions, index = demo
    planner = CountingPlanner()
    write_plan_store(tmp_path / "s", questions, planner, index, chunk_rows=16)
    assert planner.planned == 50
    write_plan_store(tmp_path / "s", questions, planner, index, chunk_rows=16)
    assert planner.planned == 50  # nothing planned again
    # simulate a kill after two chunks: drop the last two manifest entries
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    del manifest["chunks"]["2"], manifest["chunks"]["3"]
    (tmp_path / "s" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match="unfinished"):
        PlanStore.open(tmp_path / "s")
    write_plan_store(tmp_path / "s", questions, planner, index, chunk_rows=16)
    assert planner.planned == 50 + 16 + 2  # chunks 2 (16 rows) and 3 (2 rows)
    assert PlanStore.open(tmp_path / "s").complete()


def test_corrupt_chunk_is_planned_again(demo, tmp_path):
    questions, index = demo
    planner = CountingPlanner()
    write_plan_store(tmp_path / "s", questions, planner, index, chunk_rows=16)
    (tmp_path / "s" / "sidecar" / "chunk-000001.jsonl").write_text("garbage\n")
    with pytest.warns(PlanStoreWarning, match="chunk 1"):
        write_plan_store(tmp_path / "s", questions, planner, index, chunk_rows=16)
    assert planner.planned == 66
    assert len(PlanStore.open(tmp_path / "s").beams()) == 50


def test_mismatched_inputs_are_refused(demo, tmp_path):
    questions, index = demo
    write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, chunk_rows=16)
    with pytest.raises(CacheError, match="beam"):
        write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, beam=2, chunk_rows=16)
    with pytest.raises(CacheError, match="qids"):
        write_plan_store(tmp_path / "s", questions[:10], CountingPlanner(), index, chunk_rows=16)
    other = build_index([("a", "r", "b")])
    with pytest.raises(CacheError, match="relation vocabulary"):
        PlanStore.open(tmp_path / "s").check_index(other)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(CacheError, match="not a plan store"):
        write_plan_store(tmp_path / "junk", questions, CountingPlanner(), index)
    with pytest.raises(CacheError, match="not a plan store"):
        PlanStore.open(tmp_path / "nothing")


def test_too_long_plans_are_dropped_and_counted(demo, tmp_path):
    questions, index = demo
    three_hop = [q for q in load_demo(split="test").questions if q.hops == 3][:5]
    store = write_plan_store(tmp_path / "s", three_hop, SingleQuestionPlanner(OraclePlanner().plan, "oracle"), index,
                             max_triples=2)
    assert store.manifest["dropped_beams"]["too many triples"] == 5
    assert not store.read_rows(0, 5).valid.any()


def test_store_planner_matches_precomputed(demo, tmp_path):
    questions, index = demo
    oracle = SingleQuestionPlanner(OraclePlanner().plan, "oracle")
    store = write_plan_store(tmp_path / "s", questions, oracle, index)
    plan, beams = precomputed_planner(oracle, questions, batch_size=7)
    stored = store.as_planner()
    for q in questions:
        assert stored(q, index) == plan(q, index) == OraclePlanner().plan(q)
    with pytest.raises(CacheError, match="no stored plan"):
        stored(load_demo(split="dev").questions[0], index)

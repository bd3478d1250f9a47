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


# ----- a store interrupted or damaged anywhere resumes; a corrupt record names its line -----

import shutil  # noqa: E402
import warnings  # noqa: E402

from stem_jax.plan.store import MANIFEST  # noqa: E402


def _store_files(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _killed_before_manifest(p):
    (p / "sidecar").mkdir(parents=True)
    (p / f".{MANIFEST}-abc.tmp").write_text("{")


def _truncate(file, keep=5):
    file.write_bytes(file.read_bytes()[:keep])


DAMAGE = {
    "killed-before-manifest": _killed_before_manifest,
    "corrupt-manifest": lambda p: (p / MANIFEST).write_text("{\"n\": 5"),
    "truncated-last-array-chunk": lambda p: _truncate(p / "triples.zarr" / "c" / "3" / "0" / "0" / "0"),
    "missing-middle-array-chunk": lambda p: shutil.rmtree(p / "nodes.zarr" / "c" / "1"),
    "corrupt-sidecar-line": lambda p: (p / "sidecar" / "chunk-000002.jsonl").write_bytes(
        (p / "sidecar" / "chunk-000002.jsonl").read_bytes().replace(b"\n", b"\n\xff{", 1)),
    "torn-last-sidecar": lambda p: _truncate(p / "sidecar" / "chunk-000003.jsonl", 30),
    "corrupt-array-metadata": lambda p: (p / "score.zarr" / "zarr.json").write_text("{not json"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_store_is_planned_again_to_identical_files(demo, tmp_path, damage):
    questions, index = demo
    write_plan_store(tmp_path / "clean", questions, CountingPlanner(), index, chunk_rows=16)
    if damage != "killed-before-manifest":
        write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, chunk_rows=16)
    DAMAGE[damage](tmp_path / "s")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanStoreWarning)
        write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, chunk_rows=16)
    store = PlanStore.open(tmp_path / "s")
    assert store.beams() == PlanStore.open(tmp_path / "clean").beams()
    for name in ("triples", "nodes", "answer", "strategy", "score"):
        np.testing.assert_array_equal(store.arrays[name].read().result(),
                                      PlanStore.open(tmp_path / "clean").arrays[name].read().result())


def test_reading_a_corrupt_sidecar_names_file_and_line(demo, tmp_path):
    questions, index = demo
    write_plan_store(tmp_path / "s", questions, CountingPlanner(), index, chunk_rows=16)
    DAMAGE["corrupt-sidecar-line"](tmp_path / "s")
    with pytest.raises(CacheError, match=r"chunk-000002.jsonl:2: corrupt plan store record .*\n.*rerun the same"):
        PlanStore.open(tmp_path / "s").beams()
    (tmp_path / "s" / MANIFEST).write_text("[]")
    with pytest.raises(CacheError, match="unreadable manifest"):
        PlanStore.open(tmp_path / "s")


def test_store_path_that_is_a_file_or_foreign_folder_is_refused(demo, tmp_path):
    questions, index = demo
    (tmp_path / "f").write_text("x")
    with pytest.raises(CacheError, match="is a file"):
        write_plan_store(tmp_path / "f", questions, CountingPlanner(), index)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(CacheError, match="not a plan store"):
        write_plan_store(tmp_path / "mine", questions, CountingPlanner(), index)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


PLAN_KILL_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_plan_store import CountingPlanner
from stem_jax.data.demo_kg import load_demo
from stem_jax.kg.index import build_index
from stem_jax.plan.store import write_plan_store

dataset = load_demo(split="test")
index = build_index(dataset.triples)

class Slow(CountingPlanner):
    def plan_batch(self, questions):
        time.sleep(0.03)
        return super().plan_batch(questions)

print("ready", flush=True)
write_plan_store(Path(sys.argv[1]), dataset.questions[:50], Slow(), index, chunk_rows=4)
"""


def _kill_plan_and_resume(demo, tmp_path, rng, rounds, kills):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    questions, index = demo
    write_plan_store(tmp_path / "clean", questions, CountingPlanner(), index, chunk_rows=4)
    clean = PlanStore.open(tmp_path / "clean").beams()
    for r in range(rounds):
        path = tmp_path / f"s{r}"
        for _ in range(kills):
            proc = subprocess.Popen([sys.executable, "-c", PLAN_KILL_SCRIPT, str(path), str(Path(__file__).parent)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(float(rng.uniform(0.0, 0.4)))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlanStoreWarning)
            write_plan_store(path, questions, CountingPlanner(), index, chunk_rows=4)
        assert PlanStore.open(path).beams() == clean


def test_plan_sigkill_at_random_points_then_resume(demo, tmp_path):
    _kill_plan_and_resume(demo, tmp_path, np.random.default_rng(0), rounds=1, kills=2)


@pytest.mark.slow
def test_plan_sigkill_at_random_points_then_resume_long(demo, tmp_path):
    _kill_plan_and_resume(demo, tmp_path, np.random.default_rng(1), rounds=8, kills=3)

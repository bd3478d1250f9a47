"""The shared resumable zarr table, the one hash split, and tables written in the layouts before the table module.

The three "written by hand" tests build a cache folder the way the encoder cache, the GNN guidance
cache and the plan store wrote them before they shared :mod:`stem_jax.zarr_table` (zarr3 specs,
manifest keys, fingerprints and chunk digests spelt out here with tensorstore and hashlib, not
with the library's helpers), then open it with today's code: nothing may be recomputed.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

from stem_jax.data.splits import hash_split, qid_bucket
from stem_jax.data.types import Question
from stem_jax.encoder import HashingEncoder, open_or_build
from stem_jax.errors import CacheError
from stem_jax.gnn.cache import open_or_compute
from stem_jax.gnn.data import split_by_qid
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.plan.store import PlanStore, write_plan_store
from stem_jax.zarr_table import Column, TableKind, ZarrTable

# ----- the layouts as they were written before stem_jax/zarr_table.py -----------------------------


def _old_spec(path: Path, shape, chunk, dtype: str, fill) -> dict:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {"shape": list(shape), "data_type": dtype,
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk)}},
                         "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                    {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                         "fill_value": fill}}


def _write_array(path: Path, data: np.ndarray, chunk_rows: int, dtype: str, fill) -> None:
    store = ts.open(_old_spec(path, data.shape, (chunk_rows, *data.shape[1:]), dtype, fill), create=True).result()
    store.write(data).result()


def _sha(*blocks: np.ndarray, text: bytes = b"") -> str:
    digest = hashlib.sha256()
    for block in blocks:
        digest.update(block.tobytes())
    digest.update(text)
    return digest.hexdigest()


def _length_prefixed(items, counted: bool) -> str:
    digest = hashlib.sha256()
    if counted:
        digest.update(len(items).to_bytes(8, "little"))
    for item in items:
        data = item.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _json_sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _chunks(n: int, size: int):
    return [(i, i * size, min(n, (i + 1) * size)) for i in range(-(-n // size))]


class _NoEncoder:
    def __init__(self, inner):
        self.name, self.dim = inner.name, inner.dim

    def encode(self, texts):
        raise AssertionError("an existing cache was encoded again")


def test_encoder_cache_in_the_old_layout_opens_without_encoding(tmp_path):
    texts = [f"entity {i}" for i in range(21)]
    encoder = HashingEncoder(dim=16)
    vectors = encoder.encode(texts).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    data = vectors.astype("<f2")
    folder = tmp_path / "emb"
    _write_array(folder, data, 8, "float16", 0.0)  # the array is the folder itself: zarr.json, c/<i>/0
    manifest = {"format_version": 1, "encoder": encoder.name, "dim": 16, "n": 21, "chunk_rows": 8,
                "texts_sha256": _length_prefixed(texts, counted=True), "dtype": "float16",
                "chunks": {str(i): _sha(data[lo:hi]) for i, lo, hi in _chunks(21, 8)}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = open_or_build(folder, texts, _NoEncoder(encoder), 8, progress=False)
    assert table.encoded_rows == 0 and table.recomputed_chunks == []
    np.testing.assert_array_equal(table.array, data)


def test_gnn_cache_in_the_old_layout_opens_without_computing(tmp_path):
    keys = [f"q{i}|plan" for i in range(10)]
    inputs = {"model": "abc", "kg": "123", "hops": 2}
    rng = np.random.default_rng(0)
    ids = rng.integers(-1, 50, (10, 3)).astype("<i4")
    probs = rng.random((10, 3)).astype("<f4")
    folder = tmp_path / "gnn"
    _write_array(folder / "ids.zarr", ids, 4, "int32", -1)
    _write_array(folder / "probs.zarr", probs, 4, "float32", 0.0)
    manifest = {"format_version": 1, "n": 10, "k": 3, "chunk_rows": 4, "keys_sha256": _json_sha(keys),
                "inputs_sha256": _json_sha(inputs), "inputs": inputs,
                "chunks": {str(i): _sha(ids[lo:hi], probs[lo:hi]) for i, lo, hi in _chunks(10, 4)}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    def compute(rows):
        raise AssertionError("an existing cache was computed again")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = open_or_compute(folder, keys, 3, compute, inputs=inputs, chunk_rows=4, show_progress=False)
    assert table.computed_rows == 0
    np.testing.assert_array_equal(table.ids, ids)
    np.testing.assert_array_equal(table.probs, probs)


class _NoPlanner:
    name = "hand"

    def plan_batch(self, questions):
        raise AssertionError("an existing plan store was planned again")


def test_plan_store_in_the_old_layout_opens_and_resumes_without_planning(tmp_path):
    relations = ["directed_by", "starred_actors"]
    questions = [Question(f"q{i}", f"who directed film {i}", (f"film {i}",), ("someone",)) for i in range(5)]
    beam, t_max, size = 2, 2, 2
    triples = np.full((5, beam, t_max, 3), -1, "<i4")
    nodes = np.full((5, beam, 2 * t_max), -1, "<i4")
    answer = np.full((5, beam), -1, "<i4")
    strategy = np.full((5, beam), -1, "<i4")
    score = np.zeros((5, beam), "<f4")
    triples[:, 0, 0] = (0, 0, 1)  # ("film i", directed_by, [ENT1]) in beam 0
    nodes[:, 0, :2] = (7, -2)  # a KG entity id, then the placeholder
    answer[:, 0], strategy[:, 0], score[:, 0] = 1, 0, 1.0
    folder = tmp_path / "plans"
    arrays = {"triples": triples, "nodes": nodes, "answer": answer, "strategy": strategy, "score": score}
    for name, data in arrays.items():
        _write_array(folder / f"{name}.zarr", data, size, "float32" if name == "score" else "int32",
                     0.0 if name == "score" else -1)
    (folder / "sidecar").mkdir()
    chunks = {}
    for i, lo, hi in _chunks(5, size):
        lines = [json.dumps({"row": r, "id": f"q{r}", "question": f"who directed film {r}", "plans": [
            {"nodes": [f"film {r}", "[ENT1]"], "triples": [[f"film {r}", "directed_by", "[ENT1]"]],
             "answer": "[ENT1]", "strategy": "Precision", "score": 1.0}]}) for r in range(lo, hi)]
        text = "\n".join(lines) + "\n"
        (folder / "sidecar" / f"chunk-{i:06d}.jsonl").write_text(text)
        chunks[str(i)] = _sha(*(arrays[k][lo:hi] for k in arrays), text=text.encode("utf-8"))
    manifest = {"format_version": 1, "planner": "hand", "n": 5, "beam": beam, "max_triples": t_max,
                "chunk_rows": size, "qids_sha256": _length_prefixed([q.qid for q in questions], counted=False),
                "relations_sha256": _length_prefixed(relations, counted=False),
                "qids": [q.qid for q in questions], "relations": relations, "chunks": chunks,
                "dropped_beams": {"too many triples": 0}, "plan_seconds": 0.5, "planned_questions": 5}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")

    store = PlanStore.open(folder)
    expected = SchemaGraph((SchemaTriple("film 3", "directed_by", "[ENT1]"),), "[ENT1]", "Precision")
    assert [e.schema for e in store.beams()["q3"]] == [expected]
    np.testing.assert_array_equal(store.read_rows(0, 5).triples, triples)

    class Index:  # what write_plan_store reads of a KG index
        entity_ids = {f"film {i}": 7 for i in range(5)}
        relation_ids = {r: i for i, r in enumerate(relations)}

    Index.relations = relations
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = write_plan_store(folder, questions, _NoPlanner(), Index(), beam=beam, max_triples=t_max,
                                 chunk_rows=size)
    assert again.complete() and again.beams() == store.beams()


# ----- the table itself ---------------------------------------------------------------------------


KIND = TableKind(name="test table", warning=UserWarning, extra_entries=("notes",))
COLUMNS = [Column("a", "int32", (2,), fill=-1), Column("b", "float16", (), fill=0.0)]


def _fill(table: ZarrTable) -> None:
    for i in table.todo():
        lo, hi = table.bounds(i)
        rows = np.arange(lo, hi)
        table.write_chunk(i, {"a": np.stack([rows, -rows], 1), "b": rows / 8})


def test_table_resumes_verifies_and_refuses_other_inputs(tmp_path):
    expected = {"format_version": 1, "n": 11, "chunk_rows": 4, "what": "x"}
    table = ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND, fresh={"note": 1})
    assert table.todo() == [0, 1, 2] and not table.complete()
    table.write_chunk(0, {"a": np.zeros((4, 2)), "b": np.zeros(4)})
    with pytest.raises(CacheError, match="shape"):
        table.write_chunk(1, {"a": np.zeros((3, 2)), "b": np.zeros(3)})
    reopened = ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND)
    assert reopened.todo() == [1, 2] and reopened.manifest["note"] == 1
    _fill(reopened)
    assert reopened.complete()
    (tmp_path / "t" / "b.zarr" / "c" / "2").unlink()  # a lost chunk file: fill values, checksum mismatch
    again = ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND)
    out = {"a": np.full((11, 2), 99, np.int32), "b": np.zeros(11, np.float16)}
    with pytest.warns(UserWarning, match=r"chunk 2 \(rows 8-10\) is corrupt"):
        assert again.verify(into=out) == [2]
    assert out["a"][3].tolist() == [0, 0] and out["a"][5].tolist() == [5, -5] and out["a"][9].tolist() == [99, 99]
    assert ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND).todo() == [2]
    with pytest.raises(CacheError, match="what: cache has 'x', this run has 'y'"):
        ZarrTable.open_or_create(tmp_path / "t", COLUMNS, {**expected, "what": "y"}, kind=KIND)
    (tmp_path / "t" / "manifest.json").write_text("{")
    with pytest.warns(UserWarning, match="unreadable manifest; building this test table again"):
        fresh = ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND)
    assert fresh.todo() == [0, 1, 2]
    (tmp_path / "t" / "manifest.json").unlink()
    (tmp_path / "t" / "mine.txt").write_text("keep")
    with pytest.raises(CacheError, match="not a test table"):
        ZarrTable.open_or_create(tmp_path / "t", COLUMNS, expected, kind=KIND)


# ----- the one hash split -------------------------------------------------------------------------


def _old_planner_split(questions, val_fraction):
    """plan/pattern.py's hash_split before the move (planners, SCR)."""
    train, val = [], []
    for q in questions:
        bucket = int.from_bytes(hashlib.sha256(q.qid.encode()).digest()[:4], "little") / 2**32
        (val if bucket < val_fraction else train).append(q)
    return train, val


def _old_gnn_split(questions, val_percent):
    """gnn/data.py's split_by_qid before the move (train-gnn --val-percent)."""
    def bucket(qid):
        return int(hashlib.sha256(qid.encode("utf-8")).hexdigest()[:8], 16) % 100
    return [q for q in questions if bucket(q.qid) >= val_percent], [q for q in questions if bucket(q.qid) < val_percent]


QUESTIONS = [Question(f"{i}" if i % 3 else f"metaqa-dev-{i}", "t", ("a",), ("b",)) for i in range(3000)]


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.1, 0.2, 0.5, 1.0])
def test_hash_split_keeps_the_planner_and_scr_assignment(fraction):
    assert hash_split(QUESTIONS, fraction) == _old_planner_split(QUESTIONS, fraction)


@pytest.mark.parametrize("percent", [0, 1, 7, 10, 29, 57, 99, 100])
def test_hash_split_keeps_the_gnn_assignment(percent):
    old = _old_gnn_split(QUESTIONS, percent)
    assert hash_split(QUESTIONS, percent / 100, bucketing="percent") == old
    assert split_by_qid(QUESTIONS, percent) == old


def test_percent_buckets_compare_exactly():
    for b in range(100):  # b / 100 < p / 100 exactly when b < p, so no float rounding moves a question
        for p in range(101):
            assert (b / 100 < p / 100) == (b < p)
    assert qid_bucket("x", "percent") in {b / 100 for b in range(100)}
    with pytest.raises(ValueError, match="bucketing"):
        qid_bucket("x", "thirds")

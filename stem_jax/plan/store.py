"""Plans streamed through TensorStore: padded int32 arrays plus a JSONL sidecar, chunk by chunk.

Layout of a plan store folder (``Q`` questions, beam ``B``, ``T`` = ``max_triples``,
``N`` = ``2 * T`` node slots)::

    triples.zarr   int32 [Q, B, T, 3]  (head node slot, relation id, tail node slot); -1 = padding
    nodes.zarr     int32 [Q, B, N]     KG entity id of a constant node, PLACEHOLDER (-2) for [ENTk],
                                       UNKNOWN_ENTITY (-3) for a constant not in the KG, -1 = padding
    answer.zarr    int32 [Q, B]        node slot of the answer placeholder; -1 = no plan in this beam
    strategy.zarr  int32 [Q, B]        0 = Precision, 1 = Breadth, -1 = no plan
    score.zarr     float32 [Q, B]      the planner's confidence (1.0 for the oracle)
    sidecar/chunk-<i>.jsonl            per question: id, question text and each beam's schema graph as text
    manifest.json                      inputs fingerprint, vocabulary, finished chunks with sha256

A relation absent from the KG vocabulary has id -1 (its name is in the sidecar), as in
:func:`stem_jax.plan.schema.ground`. Node slots follow the order of first appearance in the
schema's triples. The folder is a :class:`~stem_jax.zarr_table.ZarrTable` whose chunk digests also
cover the sidecar. Questions are written ``chunk_rows`` at a time, each chunk as soon as the
planner has produced it: the sidecar (temp file + rename), then the arrays, then the manifest
entry, so a killed run resumes at the first unfinished chunk and a rerun plans nothing.
Beams that do not fit (more than ``T`` triples) are dropped and counted in the manifest, never
silently truncated.

Several processes may write one store at once (two ``stem-jax plan`` with one ``--out``): a complete
store is read without any lock or write (a read-only folder works, and :meth:`PlanStore.open` never
writes); planning, resuming or repairing one holds its build lock (``<path>/.lock``,
:func:`stem_jax.locks.build_lock`), so a second writer waits (one line on stderr naming the holder's pid),
then reads the finished store, or resumes it from the written chunks when the holder was killed.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.atomic import write_text_atomic
from stem_jax.data.types import Question
from stem_jax.errors import CacheError
from stem_jax.kg.index import KGIndex
from stem_jax.locks import build_lock
from stem_jax.plan.base import BatchPlanner, ScoredSchema
from stem_jax.plan.schema import STRATEGIES, SchemaGraph, SchemaTriple, is_placeholder
from stem_jax.zarr_table import MANIFEST, Column, TableKind, ZarrTable, read_manifest, strings_sha256

FORMAT_VERSION = 1
PAD = -1
PLACEHOLDER = -2
UNKNOWN_ENTITY = -3
_ARRAYS = {"triples": "int32", "nodes": "int32", "answer": "int32", "strategy": "int32", "score": "float32"}
_FIX = "delete the folder {path} or pass --rebuild"
_MANIFEST_KEYS = ("format_version", "n", "beam", "max_triples", "chunk_rows", "qids", "chunks", "relations")


class PlanStoreWarning(UserWarning):
    """A stored chunk failed its checksum and is being planned again."""


KIND = TableKind(name="plan store", warning=PlanStoreWarning, fix=_FIX, noun="store", redo="planning it again",
                 extra_entries=("sidecar",), required=_MANIFEST_KEYS)


@dataclasses.dataclass(frozen=True)
class PlanBatch:
    """A batch of rows read from a store: numpy arrays with the layouts in the module docstring."""

    rows: np.ndarray  # int64 [n] row numbers
    qids: list[str]
    triples: np.ndarray  # [n, B, T, 3]
    nodes: np.ndarray  # [n, B, N]
    answer: np.ndarray  # [n, B]
    strategy: np.ndarray  # [n, B]
    score: np.ndarray  # [n, B]
    sidecar: list[dict[str, Any]]

    @property
    def valid(self) -> np.ndarray:
        """bool [n, B]: beams holding a plan."""
        return self.strategy >= 0


def _fingerprint(items: Sequence[str]) -> str:
    return strings_sha256(items, counted=False)


def _columns(beam: int, max_triples: int) -> list[Column]:
    """The five arrays, in the order their bytes enter a chunk's sha256."""
    rows = {"triples": (beam, max_triples, 3), "nodes": (beam, 2 * max_triples), "answer": (beam,),
            "strategy": (beam,), "score": (beam,)}
    return [Column(name, dtype, rows[name], fill=-1 if dtype == "int32" else 0.0) for name, dtype in _ARRAYS.items()]


def _sidecar_file(path: Path, chunk: int) -> Path:
    return Path(path) / "sidecar" / f"chunk-{chunk:06d}.jsonl"


# ---------------------------------------------------------------------------------------------
# Encoding one beam
# ---------------------------------------------------------------------------------------------


def encode_schema(schema: SchemaGraph, index: KGIndex, names_to_ids: dict[str, int], max_triples: int):
    """(triples [T, 3], nodes [2T], answer slot, strategy) of one schema graph, or None if too long."""
    if len(schema.triples) > max_triples:
        return None
    nodes = schema.nodes()
    slot = {n: i for i, n in enumerate(nodes)}
    triples = np.full((max_triples, 3), PAD, np.int32)
    for i, t in enumerate(schema.triples):
        triples[i] = (slot[t.head], index.relation_ids.get(t.relation, -1), slot[t.tail])
    node_ids = np.full(2 * max_triples, PAD, np.int32)
    for i, n in enumerate(nodes):
        node_ids[i] = PLACEHOLDER if is_placeholder(n) else names_to_ids.get(n, index.entity_ids.get(n, UNKNOWN_ENTITY))
    return triples, node_ids, slot[schema.answer], STRATEGIES.index(schema.strategy)


def schema_to_json(entry: ScoredSchema) -> dict[str, Any]:
    s = entry.schema
    return {"nodes": s.nodes(), "triples": [[t.head, t.relation, t.tail] for t in s.triples],
            "answer": s.answer, "strategy": s.strategy, "score": entry.score}


def schema_from_json(data: dict[str, Any]) -> ScoredSchema:
    triples = tuple(SchemaTriple(*t) for t in data["triples"])
    return ScoredSchema(SchemaGraph(triples, data["answer"], data["strategy"]), float(data.get("score", 1.0)))


# ---------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------


class PlanStore:
    """An open plan store; build one with :func:`write_plan_store`, open one with :meth:`open`."""

    def __init__(self, table: ZarrTable):
        self.table = table
        self.path = table.path
        self.manifest = table.manifest
        self.arrays = table.arrays
        self.qids: list[str] = table.manifest["qids"]
        self.row_of = {q: i for i, q in enumerate(self.qids)}

    @property
    def n(self) -> int:
        return len(self.qids)

    @property
    def beam(self) -> int:
        return int(self.manifest["beam"])

    @property
    def max_triples(self) -> int:
        return int(self.manifest["max_triples"])

    @property
    def chunk_rows(self) -> int:
        return int(self.manifest["chunk_rows"])

    @property
    def relations(self) -> list[str]:
        return list(self.manifest["relations"])

    def complete(self) -> bool:
        return self.table.complete()

    @classmethod
    def open(cls, path: Path, *, require_complete: bool = True) -> PlanStore:
        """Open a store for reading; raises :class:`CacheError` when missing or (by default) unfinished."""
        path = Path(path)
        manifest_path = path / MANIFEST
        if not manifest_path.is_file():
            raise CacheError(f"{path}: not a plan store (no {MANIFEST})\n"
                             "  how to fix: write one with `stem-jax plan --out PATH`")
        manifest = read_manifest(path, _MANIFEST_KEYS)
        if manifest is None:
            raise CacheError(f"{manifest_path}: unreadable manifest\n"
                             "  how to fix: rerun the same `stem-jax plan` command (it starts the store over)")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise CacheError(f"{path}: plan store format {manifest.get('format_version')}, expected {FORMAT_VERSION}\n"
                             f"  how to fix: {_FIX.format(path=path)}")
        store = cls(ZarrTable(path, _columns(manifest["beam"], manifest["max_triples"]), manifest, kind=KIND,
                              writable=False))
        if require_complete and not store.complete():
            done = len(manifest["chunks"])
            raise CacheError(f"{path}: plan store is unfinished ({done} of {-(-store.n // store.chunk_rows)} chunks)\n"
                             "  how to fix: rerun the same `stem-jax plan` command to finish it")
        return store

    def check_index(self, index: KGIndex) -> None:
        """Relation ids in the arrays are only meaningful for the KG vocabulary they were written with."""
        if self.manifest["relations_sha256"] != _fingerprint(index.relations):
            raise CacheError(f"{self.path}: plans were grounded to another KG relation vocabulary\n"
                             f"  how to fix: {_FIX.format(path=self.path)}")

    def read_rows(self, lo: int, hi: int) -> PlanBatch:
        arrays = self.table.read(lo, hi)
        sidecar = self._sidecar_rows(lo, hi)
        return PlanBatch(np.arange(lo, hi), self.qids[lo:hi], arrays["triples"], arrays["nodes"], arrays["answer"],
                         arrays["strategy"], arrays["score"], sidecar)

    def _sidecar_rows(self, lo: int, hi: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        size = self.chunk_rows
        for chunk in range(lo // size, -(-hi // size)):
            file = _sidecar_file(self.path, chunk)
            try:
                lines = file.read_bytes().split(b"\n")  # not splitlines: U+2028 may sit inside a question
            except OSError as err:
                raise self._corrupt(file, None, f"unreadable ({err.strerror})") from None
            if lines and not lines[-1]:
                lines.pop()
            base = chunk * size
            for i, line in enumerate(lines):
                if lo <= base + i < hi:
                    try:
                        record = json.loads(line)
                    except (ValueError, RecursionError):  # includes undecodable bytes
                        raise self._corrupt(file, i + 1, "not a JSON record") from None
                    if not isinstance(record, dict) or not isinstance(record.get("plans"), list):
                        raise self._corrupt(file, i + 1, "not a plan record")
                    rows.append(record)
        if len(rows) != hi - lo:
            raise self._corrupt(self.path / "sidecar", None, f"{len(rows)} sidecar records for rows {lo}-{hi - 1}")
        return rows

    def _corrupt(self, file: Path, line: int | None, what: str) -> CacheError:
        where = f"{file}:{line}" if line is not None else str(file)
        return CacheError(f"{where}: corrupt plan store record ({what})\n"
                          "  how to fix: rerun the same `stem-jax plan` command; it plans corrupt chunks again")

    def iter_batches(self, batch_size: int) -> Iterator[PlanBatch]:
        """Consecutive batches of ``batch_size`` rows (the last may be shorter), in row order."""
        for lo in range(0, self.n, batch_size):
            yield self.read_rows(lo, min(self.n, lo + batch_size))

    def beams(self) -> dict[str, list[ScoredSchema]]:
        """Every question's beam, rebuilt from the sidecar and checked against the int arrays."""
        out: dict[str, list[ScoredSchema]] = {}
        for batch in self.iter_batches(self.chunk_rows):
            for qid, record, strategy in zip(batch.qids, batch.sidecar, batch.strategy, strict=True):
                try:
                    beam = [schema_from_json(p) for p in record["plans"]]
                except (KeyError, TypeError, ValueError):
                    raise CacheError(f"{self.path}: corrupt sidecar record for question {qid}\n"
                                     "  how to fix: rerun the same `stem-jax plan` command; it plans corrupt "
                                     "chunks again") from None
                if len(beam) != int((strategy >= 0).sum()):
                    raise CacheError(f"{self.path}: sidecar and arrays disagree for question {qid}\n"
                                     f"  how to fix: {_FIX.format(path=self.path)}")
                out[qid] = beam
        return out

    def as_planner(self) -> Callable[[Question, KGIndex | None], list[SchemaGraph]]:
        """The evaluator's per-question planner, reading schema graphs from this store.

        Its ``beams`` attribute (qid -> scored beam, as :func:`~stem_jax.plan.base.precomputed_planner`
        gives) carries each plan's stored probability, which :meth:`StemPipeline.plan_all` uses to rank
        answers across beams: without it every beam would get the default 1/(rank+1) and a store would
        answer differently from the planner that wrote it. The sidecar's JSON keeps the exact float."""
        beams = self.beams()

        def plan(question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
            del index
            if question.qid not in beams:
                raise CacheError(f"{self.path}: no stored plan for question {question.qid}\n"
                                 "  how to fix: write the store for the same dataset, split and --limit")
            return [entry.schema for entry in beams[question.qid]]

        plan.beams = beams  # type: ignore[attr-defined]
        return plan


def write_plan_store(
    path: Path,
    questions: Sequence[Question],
    planner: BatchPlanner,
    index: KGIndex,
    *,
    beam: int = 4,
    max_triples: int = 8,
    chunk_rows: int = 1024,
    names: dict[str, str] | None = None,
    planner_id: str | None = None,
    rebuild: bool = False,
    progress: Callable[[int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> PlanStore:
    """Plan ``questions`` into a store at ``path``, chunk by chunk, skipping finished chunks.

    ``planner_id`` names the planner and its settings (a different id refuses to resume into the
    folder); ``names`` maps display names back to KG ids for constants. ``progress(n)`` is called
    with the rows finished per chunk, including skipped ones.

    A complete store is read without a lock and without writing; anything else is done holding the
    store's build lock, waiting for another process that holds it (see the module docstring). An
    unwritable folder raises the ``OSError`` then.

    Raises:
      CacheError: the folder holds a store for other questions, planner, beam or KG vocabulary.
    """
    path = Path(path)
    qids = [q.qid for q in questions]
    if len(set(qids)) != len(qids):
        raise CacheError("question ids are not unique; a plan store is keyed by question id")
    expected = {
        "format_version": FORMAT_VERSION, "planner": planner_id or planner.name, "n": len(qids), "beam": beam,
        "max_triples": max_triples, "chunk_rows": chunk_rows, "qids_sha256": _fingerprint(qids),
        "relations_sha256": _fingerprint(index.relations),
    }
    fresh = {"qids": qids, "relations": list(index.relations), "dropped_beams": {"too many triples": 0},
             "plan_seconds": 0.0, "planned_questions": 0}
    columns = _columns(beam, max_triples)
    if not rebuild:
        table = ZarrTable.open_complete(path, columns, expected, kind=KIND)
        if table is not None and not table.verify(extra=lambda chunk: _sidecar_file(path, chunk).read_bytes(),
                                                  repair=False):
            if progress:
                for chunk in range(table.n_chunks):
                    lo, hi = table.bounds(chunk)
                    progress(hi - lo)
            return PlanStore(table)
    ZarrTable.refuse_foreign(path, columns, KIND, rebuild=rebuild)  # before build_lock writes its file
    with build_lock(path, KIND.name):
        # reread under the lock: another process may have finished the store (nothing to plan), or been
        # killed part way (its written chunks are kept)
        table = ZarrTable.open_or_create(path, columns, expected, kind=KIND, fresh=fresh, rebuild=rebuild)
        return _plan_missing(table, questions, planner, index, names, progress, log)


def _plan_missing(table: ZarrTable, questions: Sequence[Question], planner: BatchPlanner, index: KGIndex,
                  names: dict[str, str] | None, progress: Callable[[int], None] | None,
                  log: Callable[[str], None] | None) -> PlanStore:
    """Verify ``table``'s chunks and plan the missing ones; holding its build lock."""
    path = table.path
    beam, max_triples = int(table.manifest["beam"]), int(table.manifest["max_triples"])
    (path / "sidecar").mkdir(parents=True, exist_ok=True)
    table.verify(extra=lambda chunk: _sidecar_file(path, chunk).read_bytes())  # a corrupt chunk is planned again
    store = PlanStore(table)
    manifest = table.manifest
    names_to_ids = {v: index.entity_ids[k] for k, v in (names or {}).items() if k in index.entity_ids}
    for chunk in range(table.n_chunks):
        lo, hi = table.bounds(chunk)
        if str(chunk) in table.done:
            if progress:
                progress(hi - lo)
            continue
        began = time.perf_counter()
        beams = planner.plan_batch(questions[lo:hi])
        seconds = time.perf_counter() - began
        rows = hi - lo
        block = {
            "triples": np.full((rows, beam, max_triples, 3), PAD, np.int32),
            "nodes": np.full((rows, beam, 2 * max_triples), PAD, np.int32),
            "answer": np.full((rows, beam), PAD, np.int32),
            "strategy": np.full((rows, beam), PAD, np.int32),
            "score": np.zeros((rows, beam), np.float32),
        }
        lines = []
        dropped = 0
        for r, (question, entries) in enumerate(zip(questions[lo:hi], beams, strict=True)):
            kept = []
            for entry in entries[:beam]:
                encoded = encode_schema(entry.schema, index, names_to_ids, max_triples)
                if encoded is None:
                    dropped += 1
                    continue
                b = len(kept)
                block["triples"][r, b], block["nodes"][r, b], block["answer"][r, b], block["strategy"][r, b] = encoded
                block["score"][r, b] = entry.score
                kept.append(schema_to_json(entry))
            lines.append(json.dumps({"row": lo + r, "id": question.qid, "question": question.text, "plans": kept},
                                    ensure_ascii=False))
        text = "\n".join(lines) + "\n"
        write_text_atomic(_sidecar_file(path, chunk), text)
        manifest["dropped_beams"]["too many triples"] += dropped
        manifest["plan_seconds"] += seconds
        manifest["planned_questions"] += rows
        table.write_chunk(chunk, block, extra=text.encode("utf-8"))  # arrays, then the manifest entry
        if log and dropped:
            log(f"chunk {chunk}: dropped {dropped} beam(s) with more than {max_triples} triples")
        if progress:
            progress(rows)
    return store

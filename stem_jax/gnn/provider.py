"""Guidance for the evaluator: GNN top-K entities per (question, schema graph), cached on disk.

:class:`GNNGuidance` is what ``StemPipeline(..., guidance=...)`` takes. ``attach`` looks up (or
computes, batched and jitted, then caches in TensorStore) the top ``width`` entities of every
query, and gives each run the first K = |T|·K' of them as ``run.guidance``. Changing K', λ or τ
reuses the cached rows; only a new checkpoint, KG, subgraph setting, question set or a change to the code
that computes guidance (:data:`GUIDANCE_MODULES`, fingerprinted by :func:`guidance_code_fingerprint`)
recomputes.
Calls of fewer than :data:`MIN_CACHED_ROWS` queries (``ask``, small ``retrieve`` batches) are
computed in memory and not cached.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.gnn.cache import GuidanceTable, fingerprint, open_or_compute
from stem_jax.gnn.data import ExampleFactory
from stem_jax.gnn.guidance import guidance_size
from stem_jax.gnn.infer import METHODS, InferencePlan, plan_inference, run_inference
from stem_jax.gnn.model import ModelSpec
from stem_jax.gnn.packing import BIN_GRAPHS
from stem_jax.kg.embeddings import kg_fingerprint
from stem_jax.plan.schema import SchemaGraph

MIN_CACHED_ROWS = 64  # tables of fewer (question, plan) pairs are computed in memory, not cached

# The modules whose code turns (question, schema graph, checkpoint) into guidance rows: subgraphs and their
# packing, features, the model and its message passing, inference, top-K and this provider. Their source is part
# of every cached table's key, so an edit to any of them computes new tables instead of reading rows an older
# version wrote (a module that starts to take part in computing guidance belongs here).
GUIDANCE_MODULES = (
    "stem_jax.gnn.batching", "stem_jax.gnn.data", "stem_jax.gnn.expand", "stem_jax.gnn.features",
    "stem_jax.gnn.guidance", "stem_jax.gnn.infer", "stem_jax.gnn.model", "stem_jax.gnn.multihop",
    "stem_jax.gnn.packing", "stem_jax.gnn.provider", "stem_jax.jraph_compat", "stem_jax.kg.subgraph",
    "kernels.message",
)


@functools.cache
def guidance_code_fingerprint(modules: tuple[str, ...] = GUIDANCE_MODULES) -> str:
    """sha256 (16 hex digits) of the source files of ``modules`` as this process imports them (a checkout on
    ``PYTHONPATH`` fingerprints its own code)."""
    digest = hashlib.sha256()
    for name in modules:
        source = Path(importlib.import_module(name).__file__).read_bytes()
        digest.update(f"{name}\0{len(source)}\0".encode() + source)
    return digest.hexdigest()[:16]


def query_key(question: Question, schema: SchemaGraph) -> str:
    return f"{question.qid}\x1f{schema.describe()}\x1f{'|'.join(question.topic_entities)}"


class GNNGuidance:
    """Top-K guidance entities from a trained Triple-GNN (see the module docstring).

    Args:
      spec, params, info: from :func:`stem_jax.gnn.infer.load_checkpoint`.
      factory: builds the query subgraphs (same KG, encoder features and subgraph settings).
      k_prime: K' (guidance size is |T|·K').
      width: entities stored per query and the most a run may get (``engine.guidance``).
      cache_dir: where the TensorStore caches live (None: compute in memory every time).
      chunk_rows: queries per resumable chunk.
    """

    def __init__(self, spec: ModelSpec, params: Any, info: dict[str, Any], factory: ExampleFactory, *,
                 k_prime: int, width: int, cache_dir: Path | None = None, chunk_rows: int = 1024,
                 max_edges: int | None = None, max_graphs: int = BIN_GRAPHS, method: str = "reach"):
        if spec.num_relations != factory.index.num_relations:
            raise StemError(f"the GNN checkpoint was trained on a KG with {spec.num_relations} relations, "
                            f"this KG has {factory.index.num_relations}\n  how to fix: train on this dataset "
                            "(stem-jax train-gnn --dataset ...) and pass that --gnn-checkpoint")
        if spec.d_pem != factory.featurizer.dim:
            raise StemError(f"the GNN checkpoint expects {spec.d_pem}-dim encoder features, the encoder gives "
                            f"{factory.featurizer.dim}\n  how to fix: use the encoder the GNN was trained with "
                            f"({info.get('encoder', 'see model.json')})")
        self.spec, self.params, self.info = spec, params, info
        self.factory = factory
        self.k_prime = k_prime
        self.width = width
        self.cache_dir = cache_dir
        self.chunk_rows = chunk_rows
        self.max_edges, self.max_graphs = max_edges, max_graphs
        if method not in METHODS:
            raise StemError(f"unknown GNN inference method {method!r}\n  how to fix: pass one of {', '.join(METHODS)}")
        self.method = method  # reach (default) or full: the same probabilities, see predict_top
        self.prefetch = True  # build the next chunk's subgraphs while the device runs this one
        # tables of fewer pairs skip the on-disk cache: an interactive call (ask, a small retrieve)
        # would otherwise open and write a TensorStore folder of a few rows each time
        self.min_cached_rows = MIN_CACHED_ROWS
        self.stats: dict[str, Any] = {}
        self.batch_stats: dict[str, Any] = {}

    def _batch_stats(self, stats: dict[str, Any]) -> None:
        """Accumulate :func:`predict_top`'s statistics over the chunks of one call."""
        acc = self.batch_stats
        for key in ("batches", "real_nodes", "real_edges", "padded_nodes", "padded_edges"):
            acc[key] = acc.get(key, 0) + stats[key]
        acc["shapes"] = sorted(set(map(tuple, acc.get("shapes", []))) | set(stats["shapes"]))

    def with_k_prime(self, k_prime: int) -> GNNGuidance:
        """The same provider (and cache) with another K'."""
        other = GNNGuidance.__new__(GNNGuidance)
        other.__dict__.update(self.__dict__)
        other.k_prime = k_prime
        other.stats = {}
        return other

    def _inputs(self) -> dict[str, Any]:
        sub = self.factory.subgraph
        return {"params_sha": self.info.get("params_sha"), "spec": self.spec.as_dict(),
                "kg": kg_fingerprint(self.factory.index), "encoder": self.factory.featurizer.encoder.name,
                "hops": sub.hops, "hub_cap": sub.hub_cap, "code": guidance_code_fingerprint()}

    def _plan(self, pairs: Sequence[tuple[Question, SchemaGraph]], rows: range) -> tuple[InferencePlan, np.ndarray]:
        """Host work of one chunk: its subgraphs and bins (and which rows have a graph)."""
        # the plain forward sums receiver-sorted edges; the reach forward takes any order
        graphs, where = self.factory.for_plans([pairs[row] for row in rows], ordered=self.method == "full")
        plan = plan_inference(self.spec, graphs, max_edges=self.max_edges, max_graphs=self.max_graphs,
                              method=self.method)
        return plan, where

    def table(self, pairs: Sequence[tuple[Question, SchemaGraph]], *, show_progress: bool = True) -> GuidanceTable:
        """Top-``width`` (ids, probs) of every (question, schema) pair, from the cache when possible.

        Chunks are computed in order; while the device runs one, a worker thread builds the next
        one's subgraphs and bins, so host and device work overlap (docs/performance.md, "GNN inference")."""
        keys = [query_key(q, s) for q, s in pairs]
        self.factory.featurizer.prepare(s for _, s in pairs)
        relation_emb = self.factory.featurizer.relation_matrix()
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gnn-host")
        ahead: dict[range, Future] = {}

        def compute(rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
            rows = range(rows[0], rows[-1] + 1) if len(rows) else range(0)
            future = ahead.pop(rows, None)
            for stale in ahead.values():  # a guess that did not come: let it finish (it holds the expander)
                stale.result()
            ahead.clear()
            plan, where = future.result() if future is not None else self._plan(pairs, rows)
            following = range(rows.stop, min(len(pairs), rows.stop + len(rows)))
            if len(following) and self.prefetch:  # open_or_compute asks for the chunks in order
                ahead[following] = worker.submit(self._plan, pairs, following)
            ids = np.full((len(rows), self.width), -1, np.int32)
            probs = np.zeros((len(rows), self.width), np.float32)
            top_ids, top_probs, stats = run_inference(self.params, self.spec, plan, relation_emb, self.width)
            ids[where], probs[where] = top_ids, top_probs
            self._batch_stats(stats)
            return ids, probs

        try:
            if self.cache_dir is None or not pairs or len(pairs) < self.min_cached_rows:
                began = time.perf_counter()
                parts = [compute(range(lo, min(len(pairs), lo + self.chunk_rows)))
                         for lo in range(0, len(pairs), self.chunk_rows)]
                ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros((0, self.width), np.int32)
                probs = np.concatenate([p[1] for p in parts]) if parts else np.zeros((0, self.width), np.float32)
                return GuidanceTable(ids=ids, probs=probs, path=Path("."), computed_rows=len(pairs),
                                     seconds=time.perf_counter() - began)
            inputs = self._inputs()
            digest = hashlib.sha256((fingerprint(inputs) + fingerprint(keys)).encode()).hexdigest()[:16]
            folder = Path(self.cache_dir) / f"gnn-{self.info.get('params_sha', 'unknown')}-w{self.width}-{digest}"
            return open_or_compute(folder, keys, self.width, compute, inputs=inputs, chunk_rows=self.chunk_rows,
                                   show_progress=show_progress, desc="gnn guidance")
        finally:
            worker.shutdown(wait=True, cancel_futures=True)

    def guidance_for(self, schema: SchemaGraph, row_ids: np.ndarray) -> np.ndarray:
        k = guidance_size(len(schema.triples), self.k_prime)
        if k > self.width:
            raise StemError(f"a schema graph with |T|={len(schema.triples)} and K'={self.k_prime} needs {k} "
                            f"guidance entities, but only engine.guidance={self.width} fit\n  how to fix: pass "
                            f"--engine.guidance={1 << (k - 1).bit_length()} (or a smaller --guidance.k_prime)")
        chosen = row_ids[:k]
        return chosen[chosen >= 0].astype(np.int32)

    @staticmethod
    def queries(questions: Sequence[Question], runs_per_question: Sequence[Sequence[Any]],
                ) -> tuple[list[tuple[Question, SchemaGraph]], dict[str, int]]:
        """The distinct (question, schema) queries of the runs, in run order, and their row numbers
        (what :meth:`attach` caches; other tools use it to read the same cache rows)."""
        rows: dict[str, int] = {}
        pairs: list[tuple[Question, SchemaGraph]] = []
        for question, runs in zip(questions, runs_per_question, strict=True):
            for run in runs:
                key = query_key(question, run.plan.schema)
                if key not in rows:
                    rows[key] = len(pairs)
                    pairs.append((question, run.plan.schema))
        return pairs, rows

    def attach(self, questions: Sequence[Question], runs_per_question: Sequence[Sequence[Any]], *,
               show_progress: bool = True) -> dict[str, Any]:
        """Set ``run.guidance`` (int32 KG ids) on every run; returns timing and cache statistics."""
        began = time.perf_counter()
        pairs, rows = self.queries(questions, runs_per_question)
        table = self.table(pairs, show_progress=show_progress)
        sizes = []
        for question, runs in zip(questions, runs_per_question, strict=True):
            for run in runs:
                run.guidance = self.guidance_for(run.plan.schema, table.ids[rows[query_key(question, run.plan.schema)]])
                sizes.append(len(run.guidance))
        self.stats = {"queries": len(pairs), "computed_queries": table.computed_rows,
                      "gnn_seconds": table.seconds, "attach_seconds": time.perf_counter() - began,
                      "cache": str(table.path) if self.cache_dir is not None else None,
                      "mean_guidance_size": float(np.mean(sizes)) if sizes else 0.0, "k_prime": self.k_prime}
        return self.stats

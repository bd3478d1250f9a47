"""Per-question subgraphs: k-hop neighbourhoods with a hub cap, their statistics, and a dataset written as RoG-format
JSONL with each question's neighbourhood as its graph."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stem_jax.data.files import question_record
from stem_jax.data.types import Dataset
from stem_jax.kg.index import KGIndex, build_index


def csr_ranges(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int64 positions ``offsets[r]:offsets[r+1]`` of every r in ``rows``, concatenated, without a Python loop."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    total = int(lengths.sum())
    # position i of the output is starts[row(i)] + (i - first output index of row(i))
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)


def csr_gather(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenate ``values[offsets[r]:offsets[r+1]]`` for every r in ``rows``, without a Python loop."""
    return values[csr_ranges(offsets, rows)]


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """Sorted int32 node ids and triple ids of one question's neighbourhood."""

    nodes: np.ndarray
    triple_ids: np.ndarray
    capped_hubs: int  # hubs reached but not expanded through


def khop_subgraph(index: KGIndex, seeds: Sequence[int], hops: int, hub_cap: int) -> Subgraph:
    """Triples within ``hops`` undirected hops of ``seeds``.

    Nodes with more than ``hub_cap`` incident triples are included when reached but not expanded
    through (seeds are always expanded), which keeps neighbourhoods of hub-rich KGs bounded.
    """
    seeds = np.unique(np.asarray(seeds, dtype=np.int64))
    degree = index.degree
    visited = np.zeros(index.num_entities, dtype=bool)
    visited[seeds] = True
    frontier = seeds
    triple_parts = []
    capped = 0
    for step in range(hops):
        expand = frontier if step == 0 else frontier[degree[frontier] <= hub_cap]
        capped += len(frontier) - len(expand)
        if len(expand) == 0:
            break
        triple_ids = np.unique(csr_gather(index.csr_offsets, index.csr_triples, expand))
        triple_parts.append(triple_ids)
        ends = index.triples[triple_ids][:, [0, 2]].ravel()
        new = np.unique(ends[~visited[ends]])
        visited[new] = True
        frontier = new
    triples = np.unique(np.concatenate(triple_parts)) if triple_parts else np.zeros(0, np.int64)
    return Subgraph(nodes=np.flatnonzero(visited).astype(np.int32), triple_ids=triples.astype(np.int32), capped_hubs=capped)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Mean and percentiles of a size distribution."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return {"count": 0}
    return {
        "count": int(array.size),
        "mean": float(array.mean()),
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
        "p99": float(np.percentile(array, 99)),
        "max": float(array.max()),
    }


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """``np.unique`` of int keys by sorting (numpy 2's hash-based unique is several times slower
    on millions of wide int64 keys)."""
    keys = np.sort(keys)
    if keys.size == 0:
        return keys
    keep = np.empty(keys.size, bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def write_rog(path: Path, dataset: Dataset, *, hops: int = 2, hub_cap: int = 2000) -> dict[str, int]:
    """Write ``dataset``'s questions as RoG-format JSONL (:mod:`stem_jax.data.rog` reads it) at ``path``: each question's graph is the triples within
    ``hops`` undirected hops of its topic entities in the dataset's KG (a node with more than ``hub_cap`` incident
    triples is reached but not expanded, :func:`khop_subgraph`), its gold path kept. Questions
    whose topics the KG lacks are left out and counted. Returns counts (questions, left_out, triples)."""
    index = build_index(dataset.triples)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    counts = {"questions": 0, "left_out": 0, "triples": 0}
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        for question in dataset.questions:
            seeds = [index.entity_ids[t] for t in question.topic_entities if t in index.entity_ids]
            if not seeds:
                counts["left_out"] += 1
                continue
            sub = khop_subgraph(index, seeds, hops, hub_cap)
            rows = index.triples[sub.triple_ids].tolist()
            graph = [[index.entities[h], index.relations[r], index.entities[t]] for h, r, t in rows]
            record = question_record(question)
            out = {"id": record["id"], "question": record["question"], "answer": record["answers"],
                   "q_entity": record["topic_entities"], "a_entity": record["answers"], "graph": graph}
            if "gold_path" in record:
                out["gold_path"] = record["gold_path"]
            handle.write(json.dumps(out, ensure_ascii=False) + "\n")
            counts["questions"] += 1
            counts["triples"] += len(graph)
    return counts

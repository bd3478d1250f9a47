"""Batched, jitted Triple-GNN inference and checkpoint loading.

Examples are packed by size (:func:`stem_jax.gnn.batching.pack_by_size`), padded to power-of-two
buckets and run through one compiled forward per bucket; each batch costs one host->device and
one device->host transfer (all node probabilities of the batch), and per-graph top-K happens on
the host (:func:`stem_jax.gnn.guidance.select_top`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from stem_jax.errors import StemError
from stem_jax.gnn.batching import GraphExample, node_offsets, pack_by_size, pad_batch
from stem_jax.gnn.model import ModelSpec, build_model

MAX_BATCH_EDGES = 1 << 17  # edges per inference batch (a larger graph gets a batch of its own)
MAX_BATCH_GRAPHS = 64
MODEL_FILE = "model.json"
CHECKPOINTS = "checkpoints"


@functools.cache
def forward_fn(spec: ModelSpec):
    """The jitted ``(params, graph, relation_emb) -> probabilities [N]`` of one architecture."""
    model = build_model(spec)

    @jax.jit
    def forward(params, graph, relation_emb):
        return jax.nn.sigmoid(model.apply(params, graph, relation_emb))

    return forward


def predict(params: Any, spec: ModelSpec, examples: Sequence[GraphExample], relation_emb: np.ndarray, *,
            max_edges: int = MAX_BATCH_EDGES, max_graphs: int = MAX_BATCH_GRAPHS) -> list[np.ndarray]:
    """Node probabilities (float32 [n_node]) of every example, in input order."""
    out: list[np.ndarray | None] = [None] * len(examples)
    for members, probs in iter_predict(params, spec, examples, relation_emb, max_edges=max_edges,
                                       max_graphs=max_graphs):
        for i, p in zip(members, probs, strict=True):
            out[i] = p
    return out  # type: ignore[return-value]


def iter_predict(params: Any, spec: ModelSpec, examples: Sequence[GraphExample], relation_emb: np.ndarray, *,
                 max_edges: int = MAX_BATCH_EDGES, max_graphs: int = MAX_BATCH_GRAPHS,
                 ) -> Iterator[tuple[list[int], list[np.ndarray]]]:
    """Yield (example indices, their node probabilities) one packed batch at a time."""
    forward = forward_fn(spec)
    rel = jax.device_put(np.asarray(relation_emb, np.float32))
    for members in pack_by_size(examples, max_edges, max_graphs):
        chosen = [examples[i] for i in members]
        graph = pad_batch(chosen)
        probs = np.asarray(jax.device_get(forward(params, graph, rel)))
        offsets = node_offsets(chosen)
        yield members, [probs[offsets[j] : offsets[j + 1]] for j in range(len(chosen))]


def params_fingerprint(params: Any) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes (first 16 hex digits)."""
    import hashlib

    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        array = np.asarray(leaf)
        digest.update(f"{jax.tree_util.keystr(path)}:{array.dtype}:{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]


def read_model_file(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise StemError(f"{run_dir}: not a Triple-GNN run folder (no {MODEL_FILE})\n"
                        "  how to fix: pass the --out folder of `stem-jax train-gnn`")
    return json.loads(path.read_text())


def load_checkpoint(path: Path, step: int | None = None) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """(spec, params, model-file contents) from a ``train-gnn`` run folder, latest step by default."""
    from stem_jax.gnn.checkpoint import CheckpointStore

    run_dir = Path(path)
    if run_dir.name == CHECKPOINTS:
        run_dir = run_dir.parent
    info = read_model_file(run_dir)
    spec = ModelSpec(**info["spec"])
    store = CheckpointStore(run_dir / CHECKPOINTS)
    chosen = store.latest_step() if step is None else step
    if chosen is None:
        raise StemError(f"{run_dir}: no checkpoint saved yet\n  how to fix: run `stem-jax train-gnn --out {run_dir}`")
    params = store.restore_params(chosen, spec)
    store.close()
    info = {**info, "step": chosen, "params_sha": params_fingerprint(params)}
    return spec, params, info

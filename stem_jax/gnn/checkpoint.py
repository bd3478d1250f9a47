"""A ``train-gnn`` run folder: ``model.json`` (architecture and data description) and orbax
checkpoints under ``checkpoints/<step>/`` (written and read by :mod:`stem_jax.checkpoints`).

:func:`load_checkpoint` is how inference gets a trained model: the spec, the parameters of the
latest (or a chosen) step, restored onto this process's first local device, and the model file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np

from stem_jax.checkpoints import CheckpointStore, abstract_on_local_device
from stem_jax.errors import StemError
from stem_jax.gnn.model import ModelSpec, init_params

MODEL_FILE = "model.json"
CHECKPOINTS = "checkpoints"


def abstract_params(spec: ModelSpec) -> Any:
    """Shape/dtype tree of a model's parameters (no allocation), placed on this process's first device
    (:func:`stem_jax.checkpoints.on_local_device` says why)."""
    return abstract_on_local_device(lambda: init_params(spec, jax.random.key(0)))


def params_fingerprint(params: Any) -> str:
    """sha256 over every parameter's path, dtype, shape and bytes (first 16 hex digits)."""
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
    run_dir = Path(path)
    if run_dir.name == CHECKPOINTS:
        run_dir = run_dir.parent
    info = read_model_file(run_dir)
    spec = ModelSpec(**info["spec"])
    with CheckpointStore(run_dir / CHECKPOINTS) as store:
        chosen = store.latest_step() if step is None else step
        if chosen is None:
            raise StemError(f"{run_dir}: no checkpoint saved yet\n"
                            f"  how to fix: run `stem-jax train-gnn --out {run_dir}`")
        params = store.restore_params(chosen, abstract_params(spec))
    info = {**info, "step": chosen, "params_sha": params_fingerprint(params)}
    return spec, params, info

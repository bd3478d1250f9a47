"""A ``train-gnn`` run folder: ``model.json`` (architecture and data description) and orbax
checkpoints under ``checkpoints/<step>/`` (written and read by :mod:`stem_jax.checkpoints`).

:func:`load_checkpoint` is how inference gets a trained model: the spec, the parameters of the
latest (or a chosen) step, restored onto this process's first local device, and the model file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
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
    """The run's ``model.json``; a missing, unreadable or damaged file is a one-line :class:`StemError`."""
    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise StemError(f"{run_dir}: not a Triple-GNN run folder (no {MODEL_FILE})\n"
                        "  how to fix: pass the --out folder of `stem-jax train-gnn`")
    try:
        info = json.loads(path.read_bytes())
        spec_of(info)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise StemError(f"{path}: damaged ({_reason(err)}), so the model it describes is unknown\n"
                        "  how to fix: restore it from a copy, or retrain into a new --out") from None
    return info


def spec_of(info: dict[str, Any]) -> ModelSpec:
    """The :class:`ModelSpec` a ``model.json`` describes (raises KeyError/TypeError/ValueError when damaged)."""
    spec = info["spec"]
    if not isinstance(spec, dict):
        raise TypeError("spec is not an object")
    spec = ModelSpec(**spec)
    for name in ("layers", "d_gnn", "d_pem", "num_relations"):
        value = getattr(spec, name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"spec.{name}={value!r}")
    return spec


def _reason(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def restore_latest_good(store: CheckpointStore, restore: Callable[[int], Any], *,
                        log: Callable[[str], None] | None = None) -> tuple[int | None, Any, list[int]]:
    """(step, restored, damaged steps): the newest step that ``restore`` reads, trying older ones when a
    newer checkpoint is damaged (truncated, flipped or deleted files); (None, None, damaged) if none reads."""
    damaged = []
    for step in reversed(store.all_steps()):
        try:
            return step, restore(step), damaged
        except Exception as err:  # noqa: BLE001 - orbax/tensorstore raise many kinds on damaged files
            damaged.append(step)
            if log is not None:
                log(f"checkpoint step {step} in {store.folder} is damaged ({_reason(err)}); trying the one before")
    return None, None, damaged


def load_checkpoint(path: Path, step: int | None = None) -> tuple[ModelSpec, Any, dict[str, Any]]:
    """(spec, params, model-file contents) from a ``train-gnn`` run folder, latest step by default.

    Raises:
      StemError: not a run folder, a damaged ``model.json``, no checkpoint, or a damaged checkpoint
        (one line each, with the fix: rerunning ``train-gnn`` resumes from the last good step).
    """
    run_dir = Path(path)
    if run_dir.name == CHECKPOINTS:
        run_dir = run_dir.parent
    info = read_model_file(run_dir)
    spec = spec_of(info)
    with CheckpointStore(run_dir / CHECKPOINTS) as store:
        chosen = store.latest_step() if step is None else step
        if chosen is None:
            raise StemError(f"{run_dir}: no checkpoint saved yet\n"
                            f"  how to fix: run `stem-jax train-gnn --out {run_dir}`")
        try:
            params = store.restore_params(chosen, abstract_params(spec))
        except Exception as err:  # noqa: BLE001 - orbax/tensorstore raise many kinds on damaged files
            raise StemError(f"{run_dir / CHECKPOINTS / str(chosen)}: the checkpoint is damaged or does not match "
                            f"{MODEL_FILE} ({_reason(err)})\n  how to fix: rerun the same `stem-jax train-gnn "
                            f"--out {run_dir}` command: it resumes from the last good checkpoint") from None
    info = {**info, "step": chosen, "params_sha": params_fingerprint(params)}
    return spec, params, info

"""Orbax checkpoints of a training run: parameters, optimizer state and a JSON sidecar.

One checkpoint per saved step under ``<folder>/<step>/`` with three items: ``params`` and
``opt_state`` (orbax StandardSave, restored against abstract trees so dtypes and structure come
back exactly) and ``meta`` (JSON: whatever the trainer needs to resume, such as its loss
history), so a resumed run continues from the last saved step with the same history and data
order. The Triple-GNN (:mod:`stem_jax.gnn.train`) and SCR (:mod:`stem_jax.methods.scr.train`)
both write and read their runs through :class:`CheckpointStore`.

Every restore targets this process's first local device (:func:`on_local_device`): without it
orbax restores onto the devices named in the checkpoint, so a checkpoint written on a CPU fails
to load on a GPU machine ("Topology mismatch detected").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


def on_local_device(tree: Any) -> Any:
    """``tree`` (arrays or shape/dtype structs) as ``jax.ShapeDtypeStruct`` leaves placed on this
    process's first local device, the target orbax restores onto."""
    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def place(leaf: Any) -> Any:
        leaf = ocp.utils.to_shape_dtype_struct(leaf)
        if isinstance(leaf, jax.ShapeDtypeStruct):
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=here)
        return leaf

    return jax.tree.map(place, tree)


def abstract_on_local_device(init: Callable[[], Any]) -> Any:
    """Shape/dtype tree of ``init()`` (traced with ``jax.eval_shape``, nothing allocated), placed
    by :func:`on_local_device`: what :meth:`CheckpointStore.restore_params` restores against."""
    return on_local_device(jax.eval_shape(init))


class CheckpointStore:
    """A thin wrapper over ``ocp.CheckpointManager`` that keeps the last ``keep`` steps."""

    def __init__(self, folder: Path, keep: int = 2):
        self.folder = Path(folder).absolute()
        self.manager = ocp.CheckpointManager(
            self.folder, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        )

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        """Saved steps, oldest first."""
        return sorted(self.manager.all_steps())

    def save(self, step: int, params: Any, opt_state: Any, meta: dict[str, Any]) -> None:
        """Write step ``step`` (replacing one of that number) and wait until it is on disk."""
        self.manager.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave(meta),
        ), force=True)
        self.manager.wait_until_finished()

    def restore(self, step: int, params_like: Any, opt_state_like: Any) -> tuple[Any, Any, dict[str, Any]]:
        """(params, opt_state, meta) of step ``step``, shaped like ``params_like`` / ``opt_state_like``
        (arrays or abstract trees) and placed on this process's first local device."""
        restored = self.manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(on_local_device(params_like)),
            opt_state=ocp.args.StandardRestore(on_local_device(opt_state_like)),
            meta=ocp.args.JsonRestore(),
        ))
        return restored["params"], restored["opt_state"], restored["meta"]

    def restore_params(self, step: int, params_like: Any) -> Any:
        """The parameters of step ``step`` alone (inference), shaped like ``params_like`` (typically
        ``jax.eval_shape`` of an init function) and placed on this process's first local device."""
        restored = self.manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(on_local_device(params_like))))
        return restored["params"]

    def close(self) -> None:
        self.manager.close()

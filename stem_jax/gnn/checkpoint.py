"""Orbax checkpoints of a Triple-GNN run: parameters, optimizer state and a JSON sidecar.

One checkpoint per saved step under ``<run>/checkpoints/<step>/`` with three items: ``params``
and ``opt_state`` (orbax StandardSave, restored against abstract trees so dtypes and structure
come back exactly) and ``meta`` (JSON: the loss/recall history up to that step), so a resumed
run continues from the last saved step with the same history and the same data order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from stem_jax.gnn.model import ModelSpec


def abstract_params(spec: ModelSpec) -> Any:
    """Shape/dtype tree of a model's parameters (no allocation), placed on this process's first device.

    The placement matters: without it orbax restores onto the devices named in the checkpoint, so a
    checkpoint written on a CPU fails to load on a GPU machine ("Topology mismatch detected")."""
    from stem_jax.gnn.train import init_params

    here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    shapes = jax.eval_shape(lambda: init_params(spec, jax.random.key(0)))
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=here), shapes)


class CheckpointStore:
    """A thin wrapper over ``ocp.CheckpointManager`` that keeps the last ``keep`` steps."""

    def __init__(self, folder: Path, keep: int = 2):
        self.folder = Path(folder).absolute()
        self.manager = ocp.CheckpointManager(
            self.folder, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, params: Any, opt_state: Any, meta: dict[str, Any]) -> None:
        self.manager.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave(meta),
        ), force=True)
        self.manager.wait_until_finished()

    def restore(self, step: int, params_like: Any, opt_state_like: Any) -> tuple[Any, Any, dict[str, Any]]:
        shape = lambda tree: jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)  # noqa: E731
        restored = self.manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(shape(params_like)),
            opt_state=ocp.args.StandardRestore(shape(opt_state_like)),
            meta=ocp.args.JsonRestore(),
        ))
        return restored["params"], restored["opt_state"], restored["meta"]

    def restore_params(self, step: int, spec: ModelSpec) -> Any:
        restored = self.manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_params(spec))))
        return restored["params"]

    def close(self) -> None:
        self.manager.close()

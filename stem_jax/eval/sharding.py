"""Scoring over every local device: the batch axis sharded, the KG replicated.

Runs of a traced batch are independent (own frontier, own used-edge mask), so the batch is split
into one contiguous slice per device with ``jax.shard_map`` and each device traces its slice with
the unchanged :func:`~stem_jax.trace.tracer.trace_batch` / :func:`anchor_batch` kernels: no
communication inside the step loop, and every run's result is the one a single device computes.
The KG arrays and the entity table are placed once on every device (replicated); a batch is
placed sharded along its leading axis (:meth:`BatchSharding.shard_batch`). Batch sizes are
rounded up to a multiple of the device count (:meth:`BatchSharding.round_up`).

With one local device everything here is the identity, so single-device runs are unchanged.
Several processes (hosts) are handled above this module: each process evaluates its own share of
the questions into its own shard of the run folder (see :mod:`stem_jax.cli.distributed`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from stem_jax.trace.tracer import anchor_batch, trace_batch

BATCH = "batch"


class BatchSharding:
    """The local devices as a 1-D mesh over the batch axis (or nothing, with one device)."""

    def __init__(self, devices: list[Any] | None = None):
        devices = list(jax.local_devices() if devices is None else devices)
        self.devices = devices
        self.mesh = Mesh(np.array(devices), (BATCH,)) if len(devices) > 1 else None

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def active(self) -> bool:
        return self.mesh is not None

    def round_up(self, size: int) -> int:
        """``size`` rounded up to a multiple of the device count (every device gets equal rows)."""
        return -(-size // self.count) * self.count

    def replicate(self, tree: Any) -> Any:
        """Put ``tree`` (KG arrays, the entity table) on every device once."""
        if not self.active:
            return tree
        return jax.device_put(tree, NamedSharding(self.mesh, PartitionSpec()))

    def shard_batch(self, batch: Any) -> Any:
        """Put every leaf of ``batch`` sharded along its leading (batch) axis."""
        if not self.active:
            return batch
        for leaf in jax.tree_util.tree_leaves(batch):
            if leaf.shape[0] % self.count:
                raise ValueError(f"batch axis {leaf.shape[0]} is not divisible by {self.count} devices "
                                 "(round batch sizes with BatchSharding.round_up)")
        return jax.device_put(batch, NamedSharding(self.mesh, PartitionSpec(BATCH)))

    def trace(self, kg: Any, batch: Any, hyper: Any, **static: Any) -> Any:
        """:func:`trace_batch` with the batch split over the devices (identity with one device)."""
        if not self.active:
            return trace_batch(kg, batch, hyper, **static)
        return _sharded_trace(self.mesh, tuple(sorted(static.items())))(kg, self.shard_batch(batch), hyper)

    def anchor(self, entity_emb: Any, mentions: Any, guidance: Any, lam: Any, named: Any, named_level: Any, *,
               top_n: int) -> Any:
        """:func:`anchor_batch` with the runs split over the devices (identity with one device)."""
        if not self.active:
            return anchor_batch(entity_emb, mentions, guidance, lam, named, named_level, top_n=top_n)
        rows = self.shard_batch((mentions, guidance, named, named_level))
        return _sharded_anchor(self.mesh, top_n)(entity_emb, *rows, lam)


@functools.lru_cache(maxsize=64)
def _sharded_trace(mesh: Mesh, static: tuple[tuple[str, Any], ...]) -> Any:
    def local(kg, batch, hyper):
        return trace_batch(kg, batch, hyper, **dict(static))

    spec = PartitionSpec(BATCH)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec, PartitionSpec()),
                                 out_specs=spec, check_vma=False))


@functools.lru_cache(maxsize=16)
def _sharded_anchor(mesh: Mesh, top_n: int) -> Any:
    def local(entity_emb, mentions, guidance, named, named_level, lam):
        return anchor_batch(entity_emb, mentions, guidance, lam, named, named_level, top_n=top_n)

    spec = PartitionSpec(BATCH)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), spec, spec, spec, spec, PartitionSpec()),
                                 out_specs=(spec, spec), check_vma=False))


@functools.lru_cache(maxsize=1)
def local_sharding() -> BatchSharding:
    """The process's :class:`BatchSharding` over all its local devices (built once)."""
    return BatchSharding()

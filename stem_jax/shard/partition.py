"""The KG partitioned over a 1-D device mesh: contiguous triple-id ranges, each with its own incidence.

Device ``i`` of a ``D``-device mesh (axis ``kg``) owns triples ``[i·L, (i+1)·L)``: their rows (float16, or
the codes and scales of a compact format), their (head, relation, tail) ids, and a CSR of its own over
*every* entity of the KG listing only its triples (local ids ``t - i·L``, ascending within a node, a
self-loop once). A frontier node's incident triples are then spread over all devices, each scoring the
share it holds: a hub's thousands of triples are split D ways, and each row is stored once (an
owner-of-the-node partition would store every row twice, once under each end).

Per device: ``L·(row bytes + 12)`` for rows and triples, ``4·(2L)`` for its incidence and ``4·(n + 1)`` for
its offsets over all n entities (the only part that does not shrink with D). ``L`` is ``m / D`` rounded up
to a multiple of 64 rows, so every shard but the last starts 64-byte aligned in the host table and the CPU
backend may use it in place (``device_put(may_alias=True)``); the last shard is padded with zero rows
that no incidence lists.

Every process builds only the shards of its own (addressable) devices, so the same call runs on one
host with forced CPU devices or across hosts after ``jax.distributed.initialize``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

KG_AXIS = "kg"
ALIGN_ROWS = 64  # shard boundaries at multiples of 64 rows keep each shard's start 64-byte aligned


class ShardedKG(NamedTuple):
    """The KG's device arrays, each sharded along its leading axis over the mesh's ``kg`` axis
    (device ``i`` holds block ``i``), except the projection of a pca row format (replicated).

    Global shapes, for ``D`` devices with ``L`` triples, ``I`` incidence entries and ``n`` entities each:"""

    csr_offsets: jax.Array  # int32 [D·(n + 1)]: per device, offsets into its own incidence
    csr_triples: jax.Array  # int32 [D·I]: per device, its triples' local ids by node (0-padded)
    triples: jax.Array  # int32 [D·L, 3]
    triple_emb: jax.Array  # [D·L, k]: float16 rows or compact codes, as in KGArrays
    triple_scale: jax.Array | None = None  # float32 [D·L] (int8 formats)
    row_basis: jax.Array | None = None  # float32 [d, k] (pca formats), replicated
    row_mean: jax.Array | None = None  # float32 [d], replicated


@dataclasses.dataclass(frozen=True)
class ShardLayout:
    """How a KG of ``num_triples`` triples and ``num_entities`` entities is cut over ``devices`` devices."""

    devices: int
    num_triples: int
    num_entities: int
    rows_per_shard: int  # L
    incidence_per_shard: int  # I: the largest shard's incidence length

    def bounds(self, shard: int) -> tuple[int, int]:
        """[lo, hi) global triple ids of shard ``shard`` (hi <= lo + L; the rest of the shard is padding)."""
        lo = min(shard * self.rows_per_shard, self.num_triples)
        return lo, min(lo + self.rows_per_shard, self.num_triples)

    def bytes_per_device(self, row_bytes: int) -> int:
        """Device memory of one shard: rows, triples, incidence and offsets."""
        return (self.rows_per_shard * (row_bytes + 12) + 4 * self.incidence_per_shard
                + 4 * (self.num_entities + 1))


def plan_layout(triples: np.ndarray, num_entities: int, devices: int) -> ShardLayout:
    """The :class:`ShardLayout` of ``triples`` (int [m, 3]) over ``devices`` devices."""
    m = int(len(triples))
    rows = -(-max(m, 1) // devices)
    rows = -(-rows // ALIGN_ROWS) * ALIGN_ROWS
    longest = 0
    for shard in range(devices):
        lo, hi = min(shard * rows, m), min((shard + 1) * rows, m)
        block = triples[lo:hi]
        longest = max(longest, 2 * (hi - lo) - int(np.count_nonzero(block[:, 0] == block[:, 2])))
    return ShardLayout(devices, m, int(num_entities), rows, max(longest, 1))


def shard_incidence(triples: np.ndarray, num_entities: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of one shard's triples (int [L, 3]) over all ``num_entities`` entities.

    Returns (offsets int32 [n + 1], incidence int32 [2L - self-loops]): node ``v``'s local triple ids are
    ``incidence[offsets[v]:offsets[v + 1]]``, ascending (the order of the whole KG's CSR restricted to the
    shard), each triple under its head and its tail, a self-loop once."""
    count = len(triples)
    heads = np.asarray(triples[:, 0], np.int32)
    tails = np.asarray(triples[:, 2], np.int32)
    nodes = np.stack([heads, tails], axis=1).reshape(-1)  # in triple-id order: (head, tail) of 0, of 1, ...
    ids = np.repeat(np.arange(count, dtype=np.int32), 2)
    keep = np.ones(2 * count, bool)
    keep[1::2] = tails != heads
    nodes, ids = nodes[keep], ids[keep]
    order = np.argsort(nodes, kind="stable")  # stable: ids stay ascending within a node
    incidence = ids[order]
    del order
    offsets = np.zeros(num_entities + 1, np.int64)
    np.cumsum(np.bincount(nodes, minlength=num_entities), out=offsets[1:])
    if offsets[-1] >= np.iinfo(np.int32).max:
        raise ValueError("shard too large for int32 CSR offsets")
    return offsets.astype(np.int32), incidence


def shard_incidence_reference(triples: np.ndarray, num_entities: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`shard_incidence` as a plain loop over nodes and triples."""
    lists: list[list[int]] = [[] for _ in range(num_entities)]
    for t, (h, _, tail) in enumerate(np.asarray(triples).tolist()):
        lists[h].append(t)
        if tail != h:
            lists[tail].append(t)
    offsets = np.zeros(num_entities + 1, np.int32)
    offsets[1:] = np.cumsum([len(x) for x in lists])
    flat = [t for x in lists for t in x]
    return offsets, np.asarray(flat, np.int32)


def kg_mesh(devices: list[Any] | None = None) -> Mesh:
    """A 1-D mesh named ``kg`` over ``devices`` (default: every device of every process, in JAX's order)."""
    return Mesh(np.array(jax.devices() if devices is None else list(devices)), (KG_AXIS,))


def _rows_of(triple_emb: Any) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(rows or codes, scale, basis, mean) from float16/float32 rows or a CompactRows."""
    if hasattr(triple_emb, "codes"):
        return triple_emb.codes, triple_emb.scale, triple_emb.basis, triple_emb.mean
    return triple_emb, None, None, None


def shard_kg(index: Any, triple_emb: Any, mesh: Mesh) -> tuple[ShardedKG, ShardLayout]:
    """Cut ``index`` (a :class:`~stem_jax.kg.index.KGIndex`, or anything with ``triples`` and
    ``num_entities``) and its triple rows over ``mesh``'s ``kg`` axis.

    ``triple_emb``: float16/float32 rows [m, d] or a :class:`~stem_jax.encoder.compact.CompactRows`, as
    for :meth:`~stem_jax.trace.tracer.KGArrays.from_index`. Only this process's devices get shards
    (built one at a time, so the host holds one shard's incidence at a time besides the inputs)."""
    if mesh.axis_names != (KG_AXIS,):
        raise ValueError(f"shard_kg needs a 1-D mesh with axis {KG_AXIS!r} (kg_mesh), got {mesh.axis_names}")
    triples = np.asarray(index.triples)
    if triples.dtype != np.int32:
        triples = triples.astype(np.int32)
    rows, scale, basis, mean = _rows_of(triple_emb)
    if len(rows) != len(triples):
        raise ValueError(f"{len(rows)} triple rows for {len(triples)} triples")
    devices = int(mesh.devices.size)
    layout = plan_layout(triples, index.num_entities, devices)
    sharding = NamedSharding(mesh, PartitionSpec(KG_AXIS))
    L, n = layout.rows_per_shard, layout.num_entities

    def shard_of(device_index: tuple, block: int) -> int:
        start = device_index[0].start or 0
        return start // block

    def padded(array: np.ndarray, shard: int) -> np.ndarray:
        """The shard's rows of ``array`` (a view where it is whole, else a zero-padded copy)."""
        lo, hi = layout.bounds(shard)
        part = array[lo:hi]
        if hi - lo == L:
            return part
        out = np.zeros((L, *array.shape[1:]), array.dtype)
        out[: hi - lo] = part
        return out

    def global_array(shape: tuple[int, ...], make) -> jax.Array:
        block = shape[0] // devices
        index_map = sharding.addressable_devices_indices_map(shape)
        pieces = [jax.device_put(make(shard_of(idx, block)), device, may_alias=True)
                  for device, idx in index_map.items()]
        return jax.make_array_from_single_device_arrays(shape, sharding, pieces)

    # Each shard's CSR is built once and put on its device before the next (one on the host at a time).
    offsets_shape, incidence_shape = (devices * (n + 1),), (devices * layout.incidence_per_shard,)
    offset_pieces, incidence_pieces = [], []
    for device, idx in sharding.addressable_devices_indices_map(offsets_shape).items():
        lo, hi = layout.bounds(shard_of(idx, n + 1))
        offsets, incidence = shard_incidence(triples[lo:hi], n)
        full = np.zeros(layout.incidence_per_shard, np.int32)
        full[: len(incidence)] = incidence
        del incidence
        offset_pieces.append(jax.device_put(offsets, device, may_alias=True))
        incidence_pieces.append(jax.device_put(full, device, may_alias=True))
    offsets = jax.make_array_from_single_device_arrays(offsets_shape, sharding, offset_pieces)
    incidence = jax.make_array_from_single_device_arrays(incidence_shape, sharding, incidence_pieces)
    kg = ShardedKG(
        csr_offsets=offsets,
        csr_triples=incidence,
        triples=global_array((devices * L, 3), lambda s: padded(triples, s)),
        triple_emb=global_array((devices * L, *rows.shape[1:]), lambda s: padded(np.asarray(rows), s)),
        triple_scale=None if scale is None else global_array((devices * L,),
                                                             lambda s: padded(np.asarray(scale, np.float32), s)),
        row_basis=None if basis is None else _replicated(mesh, np.asarray(basis, np.float32)),
        row_mean=None if mean is None else _replicated(mesh, np.asarray(mean, np.float32)),
    )
    return kg, layout


def _replicated(mesh: Mesh, value: np.ndarray) -> jax.Array:
    """``value`` (the same on every process) on every device of ``mesh``."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])


def replicate(mesh: Mesh, tree: Any) -> Any:
    """Every array leaf of ``tree`` (host values, the same on every process) on every device of ``mesh``."""
    return jax.tree_util.tree_map(lambda leaf: _replicated(mesh, np.asarray(leaf)), tree)

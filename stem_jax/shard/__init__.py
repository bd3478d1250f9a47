"""The KG sharded over devices and hosts: a partition of its triples (:mod:`.partition`) and the tracer that
scores each shard where it lives and merges candidates with JAX collectives (:mod:`.trace`)."""

from stem_jax.shard.partition import (
           KG_AXIS,
           ShardedKG,
           ShardLayout,
           kg_mesh,
           plan_layout,
           replicate,
           shard_kg,
)
from stem_jax.shard.trace import KGShardedTracing, local_result, trace_batch_sharded

__all__ = ["KG_AXIS", "KGShardedTracing", "ShardLayout", "ShardedKG", "kg_mesh", "local_result", "plan_layout", "replicate", "shard_kg",
           "trace_batch_sharded"]

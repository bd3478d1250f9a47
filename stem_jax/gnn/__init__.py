"""Triple-GNN (paper §3.3, appendix A) and the global guidance graph.

Modules: :mod:`~stem_jax.gnn.model` (Flax model, parameter init), :mod:`~stem_jax.gnn.batching`
(host-side jraph padding), :mod:`~stem_jax.gnn.features` (encoder features), :mod:`~stem_jax.gnn.data`
and :mod:`~stem_jax.plan.walks` (random-walk examples), :mod:`~stem_jax.gnn.train` (training),
:mod:`~stem_jax.gnn.checkpoint` (run folders over :mod:`stem_jax.checkpoints`),
:mod:`~stem_jax.gnn.infer` (batched inference), :mod:`~stem_jax.gnn.cache`
(TensorStore cache of GNN outputs), :mod:`~stem_jax.gnn.guidance` (top-K selection),
:mod:`~stem_jax.gnn.provider` (guidance for the evaluator) and :mod:`~stem_jax.gnn.recall`
(gold-evidence recall of the guidance set).
"""

from stem_jax.gnn.batching import GraphExample, build_example, pack_by_size, pad_batch
from stem_jax.gnn.guidance import guidance_size, select_top, select_top_reference, triple_mask
from stem_jax.gnn.model import PRESETS, ModelSpec, TripleGNN

__all__ = [
    "PRESETS",
    "GraphExample",
    "ModelSpec",
    "TripleGNN",
    "build_example",
    "guidance_size",
    "pack_by_size",
    "pad_batch",
    "select_top",
    "select_top_reference",
    "triple_mask",
]

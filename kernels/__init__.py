"""Low-level jit primitives the tracer and the Triple-GNN are built from, each with a plain reference beside it.

* :mod:`kernels.csr`: CSR gather of a frontier's incident triples (the step's edge list, block by block).
* :mod:`kernels.rows`: cosine from stored triple rows (float16 or compact), the edge score.
* :mod:`kernels.membership`: membership in small sorted rows (used triples, guidance entities).
* :mod:`kernels.select`: per-segment top-k, first argmax and packing of flat candidate lists.
* :mod:`kernels.candidates`: a trace step's candidates cut to each run's ranked bindings.
* :mod:`kernels.blocks`, :mod:`kernels.flat`: the two trace backends, how a step reads and selects its
  edges (small blocks with a compacted buffer for CPUs; one wide block per step, selected by one sort,
  for accelerators), equal in every output.
* :mod:`kernels.message`: DistMult message passing, mean or sum aggregation (the Triple-GNN layers).
* :mod:`kernels.answers`: a batch's runs merged into each question's ranked answers (the host ranking of
  :mod:`stem_jax.answer.rank`, in one compiled call; ``engine.answers_on``).
"""

from kernels.message import distmult_mean, distmult_mean_reference, distmult_sum, distmult_sum_reference

__all__ = ["distmult_mean", "distmult_mean_reference", "distmult_sum", "distmult_sum_reference"]

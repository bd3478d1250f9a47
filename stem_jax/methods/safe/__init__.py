"""SAFE (Lee, Park and Han): schema-driven approximate distance join and ranked semantic subgraph matching.

Modules, in pipeline order:

* :mod:`.schema` - derived entity types and the KG's schema graph (types as nodes, QSE-pruned edges);
* :mod:`.apsp` - Floyd-Warshall over the schema graph (jitted min-plus loop) and the edge distance D_edge;
* :mod:`.adj` - the approximate distance join (Algorithm 1): pseudo query graph -> top-k_qg
  schema-aligned query graphs;
* :mod:`.matching` - ranked semantic subgraph matching (Algorithm 2) with exact lower-bound pruning;
* :mod:`.method` - the :class:`~stem_jax.methods.base.RetrievalMethod` tying them to the engine's
  planner (pseudo query graphs), MiniLM encoder and KG embedding tables.

Departures from the paper are listed in the README section "SAFE".
"""

from stem_jax.methods.safe.method import SafeMethod, build

__all__ = ["SafeMethod", "build"]

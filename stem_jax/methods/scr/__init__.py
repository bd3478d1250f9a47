"""SCR (stepwise contrastive reasoning, Lin et al., AAAI 2026) as a retrieval method.

Modules: :mod:`.graph` (capped neighbour lists, GNN edges), :mod:`.model` (relational GAT, eqs.
3-6, and the question head over frozen MiniLM segments), :mod:`.search` (jitted batched beam
search, eqs. 7 and 12-15, with plain references), :mod:`.supervision` (step targets from gold
relation paths), :mod:`.train` (InfoNCE, eqs. 10-11; optax, orbax, resumable), :mod:`.method`
(the :class:`~stem_jax.methods.base.RetrievalMethod`). ``stem-jax train-scr`` is
:mod:`stem_jax.cli.scr`.
"""

from __future__ import annotations

from stem_jax.methods.base import MethodContext


def build(context: MethodContext):
    """The SCR method over ``context``; ``context.options["checkpoint"]`` names a train-scr run folder."""
    from stem_jax.methods.scr.method import ScrMethod

    return ScrMethod(context)


__all__ = ["build"]

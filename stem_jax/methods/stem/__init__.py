"""STEM (structure-tracing evidence mining): its pipeline, the method behind the shared interface,
and the tools built on them (sweep, calibration, guidance ablation).

* :mod:`~stem_jax.methods.stem.pipeline`: :class:`StemPipeline` with the one way to trace
  (``trace_points(runs, hypers)``, a stacked hyper-parameter axis; ``trace(runs, hyper=None)`` at one
  point) and the one way to answer (``retrievals``);
* :mod:`~stem_jax.methods.stem.settings`: the effective configuration of a run (preset, calibrated θ);
* :mod:`~stem_jax.methods.stem.method`: :class:`StemMethod`, STEM as a retrieval method;
* :mod:`~stem_jax.methods.stem.sweep`, :mod:`~stem_jax.methods.stem.calibration`,
  :mod:`~stem_jax.methods.stem.ablation`: grids, θ calibration and guidance ablations, each calling
  the pipeline's trace and answer paths, and writing run folders through the eval loop.
"""

from __future__ import annotations

from stem_jax.methods.base import MethodContext
from stem_jax.methods.stem.method import StemMethod, evaluate
from stem_jax.methods.stem.pipeline import Run, StemHyper, StemPipeline


def build(context: MethodContext) -> StemMethod:
    return StemMethod(context)


__all__ = ["Run", "StemHyper", "StemMethod", "StemPipeline", "build", "evaluate"]

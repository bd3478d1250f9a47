"""STEM (structure-tracing evidence mining) as four stages over explicit data, the method behind the shared
interface, and the tools built on them (sweep, calibration, guidance ablation).

* :mod:`~stem_jax.methods.stem.types`: the data between the stages (:class:`Run`, :class:`StemHyper`,
  :class:`~stem_jax.methods.stem.types.Anchored`, :class:`~stem_jax.methods.stem.types.Traced`,
  :class:`~stem_jax.methods.stem.types.RankRules`);
* :mod:`~stem_jax.methods.stem.plan`: ``plan(res, questions, planner)`` -> runs;
* :mod:`~stem_jax.methods.stem.anchor`: ``anchor(res, runs, hypers)`` -> ``Anchored``;
* :mod:`~stem_jax.methods.stem.trace`: ``trace(res, anchored)`` -> ``Traced``;
* :mod:`~stem_jax.methods.stem.rank`: ``rank(index, rules, questions, runs, outputs, hyper)`` -> retrievals;
* :mod:`~stem_jax.methods.stem.resources`: :class:`~stem_jax.methods.stem.resources.StemResources`, the holder
  of the device KG, encoder, tracer shapes and schema-text table that the stages read;
* :mod:`~stem_jax.methods.stem.pipeline`: :class:`StemPipeline`, the holder with each stage as a method;
* :mod:`~stem_jax.methods.stem.settings`: the effective configuration of a run (preset, calibrated θ);
* :mod:`~stem_jax.methods.stem.method`: :class:`StemMethod`, STEM as a retrieval method, with
  :meth:`StemMethod.score_grid`, the one call sweeps, calibration, benchmarks and scorer training use;
* :mod:`~stem_jax.methods.stem.sweep`, :mod:`~stem_jax.methods.stem.calibration`,
  :mod:`~stem_jax.methods.stem.ablation`: grids, θ calibration and guidance ablations, writing run folders
  through the eval loop.
"""

from __future__ import annotations

from stem_jax.methods.base import MethodContext
from stem_jax.methods.stem.method import GridScores, StemMethod, evaluate
from stem_jax.methods.stem.pipeline import StemPipeline
from stem_jax.methods.stem.types import Run, StemHyper


def build(context: MethodContext) -> StemMethod:
    return StemMethod(context)


__all__ = ["GridScores", "Run", "StemHyper", "StemMethod", "StemPipeline", "build", "evaluate"]

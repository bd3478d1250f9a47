"""The effective configuration of a STEM run, computed in one place.

What a run actually uses differs from the raw :class:`~stem_jax.config.StemConfig`: the ``paper``
preset replaces several engine fields, and θ comes from the encoder's dev calibration when one is
stored for these engine settings and ``--tracer.theta`` is left at the paper default. Everything
that traces (eval, sweeps, ablations, calibration, benchmarks) reads these values from
:func:`effective_settings`, and they are written into every record and run fingerprint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stem_jax.answer.rank import RANKINGS
from stem_jax.config import EngineConfig, StemConfig, TracerConfig, as_dict
from stem_jax.errors import StemError
from stem_jax.methods.stem.calibration import applies, load_calibration

PAPER_ENGINE = {"relation_bonus": False, "exact_anchor": False, "exclude_topic": False, "rank": "max",
                "answer_cut": 0.0, "strategy": "planner", "calibrated": False,
                "guidance_admits": True}
PRESETS = ("default", "paper")
STRATEGY_MODES = ("planner", "breadth")


def effective_engine(config: StemConfig) -> EngineConfig:
    """The engine settings a run uses: ``engine.preset=paper`` restores the paper-literal behaviour
    (no relation bonus, cosine-only anchoring, topic kept, best-score ranking, no answer cut)."""
    engine = config.engine
    if engine.preset not in PRESETS:
        raise StemError(f"--engine.preset={engine.preset!r}: use one of {', '.join(PRESETS)}")
    if engine.rank not in RANKINGS:
        raise StemError(f"--engine.rank={engine.rank!r}: use one of {', '.join(RANKINGS)}")
    if engine.strategy not in STRATEGY_MODES:
        raise StemError(f"--engine.strategy={engine.strategy!r}: use one of {', '.join(STRATEGY_MODES)}")
    if engine.preset == "paper":
        engine = dataclasses.replace(engine, **PAPER_ENGINE)
    return engine


@dataclasses.dataclass(frozen=True)
class EffectiveSettings:
    """The engine fields and θ a run traces with, and where θ came from."""

    engine: EngineConfig
    theta: float
    theta_source: str  # "config" (--tracer.theta or the paper default) or "calibration"
    calibration: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary for records and fingerprints."""
        info: dict[str, Any] = {"engine": as_dict(self.engine), "theta": self.theta, "theta_source": self.theta_source}
        if self.calibration is not None:
            info["calibration"] = {k: self.calibration.get(k) for k in ("theta", "split", "questions", "source")
                                   if k in self.calibration}
        return info


def effective_settings(config: StemConfig, embeddings: Any) -> EffectiveSettings:
    """The effective engine and θ: the dev calibration stored beside ``embeddings`` applies when the
    engine is calibrated, not the paper preset, its settings match, and ``--tracer.theta`` is left at
    the paper default; otherwise ``tracer.theta``."""
    engine = effective_engine(config)
    theta = float(config.tracer.theta)
    if engine.preset == "paper" or not engine.calibrated or config.tracer.theta != TracerConfig().theta:
        return EffectiveSettings(engine, theta, "config")
    calibration = load_calibration(embeddings)
    if not applies(calibration, engine):
        return EffectiveSettings(engine, theta, "config")
    return EffectiveSettings(engine, float(calibration["theta"]), "calibration", calibration)

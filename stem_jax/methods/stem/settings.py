"""The effective configuration of a STEM run, computed in one place.

What a run actually uses differs from the raw :class:`~stem_jax.config.StemConfig`: the ``paper``
preset replaces several engine fields, and θ comes from the encoder's dev calibration when one is
stored for these engine settings and ``--tracer.theta`` is unset. The KG's conventions
(``engine.direction``, ``engine.used_triples``, ``engine.exclude_topic``: how a schema triple meets KG
triples, when a triple may be used again, whether the topic can be an answer) come from the same
calibration where it stores them and their flag is unset. Everything
that traces (eval, sweeps, ablations, calibration, benchmarks) reads these values from
:func:`effective_settings`, and they are written into every record and run fingerprint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stem_jax.answer.rank import RANKINGS
from stem_jax.config import EngineConfig, StemConfig, as_dict, given
from stem_jax.errors import StemError
from stem_jax.methods.stem.calibration import applies, load_calibration

PAPER_ENGINE = {"relation_bonus": False, "exact_anchor": False, "exclude_topic": False, "rank": "max",
                "answer_cut": 0.0, "strategy": "planner", "calibrated": False,
                "guidance_admits": True, "direction": "undirected", "used_triples": "run", "answer_scorer": "off",
                "value_conditions": "off"}
CONVENTIONS = ("direction", "used_triples", "exclude_topic")  # per-KG, chosen on dev by `stem-jax calibrate`
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
    """The engine fields and θ a run traces with, and where θ and the KG conventions came from."""

    engine: EngineConfig
    theta: float
    theta_source: str  # "config" (--tracer.theta or the paper default) or "calibration"
    calibration: dict[str, Any] | None = None
    conventions_source: dict[str, str] = dataclasses.field(default_factory=dict)  # field -> "config" | "calibration"

    @property
    def calibrated(self) -> bool:
        """Whether anything of a stored calibration was used (False: every value is the config's)."""
        return self.theta_source == "calibration" or "calibration" in self.conventions_source.values()

    def conventions(self) -> dict[str, Any]:
        return {k: getattr(self.engine, k) for k in CONVENTIONS}

    def as_dict(self) -> dict[str, Any]:
        """JSON-able summary for records and fingerprints."""
        info: dict[str, Any] = {"engine": as_dict(self.engine), "theta": self.theta, "theta_source": self.theta_source,
                                "calibrated": self.calibrated, "conventions": self.conventions(),
                                "conventions_source": {k: self.conventions_source.get(k, "config") for k in CONVENTIONS}}
        if self.calibration is not None:
            info["calibration"] = {k: self.calibration.get(k) for k in ("theta", "split", "questions", "source",
                                                                          "conventions", "path")
                                   if k in self.calibration}
        return info


def effective_settings(config: StemConfig, embeddings: Any) -> EffectiveSettings:
    """The effective engine and θ. The dev calibration stored beside ``embeddings`` applies when the
    engine is calibrated, not the paper preset, and its relation bonus and strategy match: its θ when
    ``--tracer.theta`` is unset, and each stored convention (direction, used-triple rule, topic exclusion)
    whose flag is unset. Unset (:func:`stem_jax.config.given`): no flag or override named the option and it
    holds its default, so an explicit flag always wins, even one equal to the default. Everything else, and
    everything without such a calibration, is the config's (``theta_source``/``conventions_source``
    say which, ``calibrated`` whether any calibration was used)."""
    engine = effective_engine(config)
    theta = float(config.tracer.theta)
    if engine.preset == "paper" or not engine.calibrated:
        return EffectiveSettings(engine, theta, "config")
    calibration = load_calibration(embeddings)
    if not applies(calibration, engine):
        return EffectiveSettings(engine, theta, "config")
    stored = calibration.get("conventions") or {}
    changes, sources = {}, {}
    for key in CONVENTIONS:
        if key in stored and not given(config, f"engine.{key}"):
            changes[key], sources[key] = stored[key], "calibration"
        else:
            sources[key] = "config"
    engine = dataclasses.replace(engine, **changes) if changes else engine
    if given(config, "tracer.theta"):
        used = calibration if "calibration" in sources.values() else None
        return EffectiveSettings(engine, theta, "config", used, sources)
    return EffectiveSettings(engine, float(calibration["theta"]), "calibration", calibration, sources)

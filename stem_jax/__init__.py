"""stem_jax: a JAX engine for Structure-Tracing Evidence Mining (STEM) over knowledge graphs.

    from stem_jax import Engine
    engine = Engine.open("demo", planner="oracle")
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Answer", "DatasetSpec", "Engine", "GuidanceSpec", "PlannerSpec", "StemConfig"]


def __getattr__(name: str) -> Any:  # lazy: `import stem_jax` stays cheap (no JAX import)
    if name in ("Engine", "Answer", "GuidanceSpec"):
        from stem_jax import engine

        return getattr(engine, name)
    if name == "PlannerSpec":
        from stem_jax.plan.factory import PlannerSpec

        return PlannerSpec
    if name == "DatasetSpec":
        from stem_jax.data.registry import DatasetSpec

        return DatasetSpec
    if name == "StemConfig":
        from stem_jax.config import StemConfig

        return StemConfig
    raise AttributeError(f"module 'stem_jax' has no attribute {name!r}")

"""Guidance-bias ablations (paper §4.3 Table 7, appendix D.3 Table 12) from one evaluator.

The four rows differ only in λ (entity bias, used in anchoring) and τ (triple bias, added to the
T-Score); both are traced hyper-parameters, so every row reuses the device-side KG, the compiled
tracers, the schema-text embeddings and the guidance provider's cached GNN outputs.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from stem_jax.data.types import Question
from stem_jax.eval.runner import Evaluator, Planner, evaluate
from stem_jax.trace.tracer import Hyper

# (row name, folder, λ override, τ override); None keeps the configured value
GUIDANCE_ABLATIONS: tuple[tuple[str, str, float | None, float | None], ...] = (
    ("full guidance", "full", None, None),
    ("w/o entity bias", "no-entity-bias", 1.0, None),
    ("w/o triple bias", "no-triple-bias", None, 0.0),
    ("w/o both", "no-bias", 1.0, 0.0),
)


def with_bias(evaluator: Evaluator, *, lam: float | None = None, tau: float | None = None) -> Evaluator:
    """A view of ``evaluator`` with λ and/or τ replaced (device arrays and caches are shared)."""
    tracer = evaluator.config.tracer
    tracer = dataclasses.replace(tracer, lam=tracer.lam if lam is None else lam, tau=tracer.tau if tau is None else tau)
    view = copy.copy(evaluator)
    view.config = dataclasses.replace(evaluator.config, tracer=tracer)
    view.hyper = Hyper(jnp.float32(tracer.tau), jnp.float32(tracer.theta))
    return view


def run_guidance_ablation(
    evaluator: Evaluator,
    questions: Sequence[Question],
    planner: Planner,
    out_dir: Path,
    *,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Evaluate the four rows of :data:`GUIDANCE_ABLATIONS` into ``out_dir/<row>/`` (each resumable)."""
    if evaluator.guidance is None:
        raise ValueError("the guidance ablation needs an evaluator with a guidance provider")
    results = {}
    for name, folder, lam, tau in GUIDANCE_ABLATIONS:
        view = with_bias(evaluator, lam=lam, tau=tau)
        log(f"== {name}: λ={view.config.tracer.lam}, τ={view.config.tracer.tau}")
        summary = evaluate(view, questions, planner, Path(out_dir) / folder, show_progress=show_progress, log=log)
        summary["lam"], summary["tau"] = view.config.tracer.lam, view.config.tracer.tau
        results[name] = summary
    return results

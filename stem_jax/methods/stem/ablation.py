"""Guidance-bias ablations (paper §4.3 Table 7, appendix D.3 Table 12) from one STEM method.

The four rows differ only in λ (entity bias, used in anchoring) and τ (triple bias, added to the
T-Score); both are traced hyper-parameters, so every row is the same :class:`StemMethod` traced at
another :class:`~stem_jax.methods.stem.types.StemHyper` (θ stays the effective, possibly
calibrated one): the device-side KG, the compiled tracers, the prepared plans, the schema-text
embeddings and the guidance provider's cached GNN outputs are shared, and each row equals
``stem-jax eval`` with that row's ``--tracer.lam``/``--tracer.tau``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.loop import evaluate_method
from stem_jax.eval.run_folder import method_fingerprint
from stem_jax.methods.stem.method import StemMethod
from stem_jax.methods.stem.types import StemHyper

# (row name, folder, λ override, τ override); None keeps the configured value
GUIDANCE_ABLATIONS: tuple[tuple[str, str, float | None, float | None], ...] = (
    ("full guidance", "full", None, None),
    ("w/o entity bias", "no-entity-bias", 1.0, None),
    ("w/o triple bias", "no-triple-bias", None, 0.0),
    ("w/o both", "no-bias", 1.0, 0.0),
)


def row_hyper(base: StemHyper, lam: float | None, tau: float | None) -> StemHyper:
    """``base`` with λ and/or τ replaced (None keeps the base value)."""
    return base.replace(lam=base.lam if lam is None else lam, tau=base.tau if tau is None else tau)


def run_guidance_ablation(
    method: StemMethod,
    questions: Sequence[Question],
    out_dir: Path,
    *,
    fingerprint: dict[str, Any] | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Evaluate the four rows of :data:`GUIDANCE_ABLATIONS` into ``out_dir/<row>/`` (each resumable).

    ``fingerprint``: the run's results fingerprint (default: the method's own); each row's folder
    gets it with the row's effective λ, τ, θ."""
    if method.context.guidance is None:
        raise StemError("the guidance ablation needs guidance\n  how to fix: pass --gnn-checkpoint RUN")
    results = {}
    for name, folder, lam, tau in GUIDANCE_ABLATIONS:
        row = method.with_hyper(row_hyper(method.hyper, lam, tau))
        log(f"== {name}: λ={row.hyper.lam}, τ={row.hyper.tau}, θ={row.hyper.theta}")
        row_fingerprint = method_fingerprint(row) if fingerprint is None else _with_hyper(fingerprint, row)
        summary = evaluate_method(row, questions, Path(out_dir) / folder, chunk_size=row.context.config.engine.chunk_questions,
                                  fingerprint=row_fingerprint, overwrite=overwrite, show_progress=show_progress,
                                  log=log)
        summary.update(row.hyper.as_dict())
        results[name] = summary
    return results


def _with_hyper(fingerprint: dict[str, Any], row: StemMethod) -> dict[str, Any]:
    import copy

    fingerprint = copy.deepcopy(fingerprint)
    tracer = fingerprint.setdefault("config", {}).setdefault("tracer", {})
    tracer.update(lam=row.hyper.lam, tau=row.hyper.tau)
    fingerprint.setdefault("extra", {})["effective"] = row.effective()
    return fingerprint

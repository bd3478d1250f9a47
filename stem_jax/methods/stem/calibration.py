"""Per-encoder calibration of the Breadth threshold θ, and of the KG's conventions, on a dev split.

The paper's θ = 0.6 was chosen for Qwen3-Embedding; cosines of another encoder live on another
scale (with MiniLM a placeholder schema triple scores about 0.3 against the right KG triple). The
sweep traces one dev sample for every θ of a grid through STEM's one grid call
(:meth:`~stem_jax.methods.stem.method.StemMethod.score_grid` with the grid's θ: no recompilation, planning
and encoding done once), answers it with the method's own rank stage and records, scores each θ as an eval is scored (:func:`stem_jax.eval.scoring.score_records`),
and keeps the best F1 over the sample's questions (ties:
Hit, then the θ closest to the paper's). ``stem-jax calibrate`` runs it.

The KG's conventions are swept with θ (:data:`CONVENTION_GRID`): ``direction`` (undirected | directed
matching) and ``used_triples`` (run | branch | step) change what is traced, so each pair is one
more trace per θ (the same device arrays and compiled shapes, those engine fields changed);
``exclude_topic`` only changes the answers. Ties keep the engine's defaults (undirected, once per run, topic excluded), then the θ
closest to the paper's.

The result is stored as ``calibration.json`` beside the KG embeddings of that encoder, with the
engine settings it was measured under; the evaluator uses it when those settings match and the
user did not set ``--tracer.theta`` (``--engine.calibrated=false`` turns it off);
:mod:`stem_jax.methods.stem.settings` decides that, in one place.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.atomic import write_json_atomic
from stem_jax.config import EngineConfig
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.records import make_records
from stem_jax.eval.scoring import score_records
from stem_jax.trace.types import DIRECTIONS, USED_RULES

CALIBRATION_FILE = "calibration.json"
DEFAULT_GRID = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
MATCHED_SETTINGS = ("relation_bonus", "strategy")  # engine fields the stored θ is only valid for
TRACED_CONVENTIONS = ("direction", "used_triples")  # conventions that change the trace (exclude_topic: the answers)
CONVENTION_GRID: tuple[dict[str, Any], ...] = tuple(
    {"direction": d, "used_triples": u, "exclude_topic": x} for d in DIRECTIONS for u in USED_RULES for x in (True, False))


def calibration_path(embeddings: Any) -> Path:
    """Where the calibration of this KG's embeddings (one encoder) lives."""
    return Path(embeddings.triples.path).parent / CALIBRATION_FILE


SHIPPED_FILE = Path(__file__).with_name("shipped_calibrations.json")


@functools.cache
def shipped_calibrations() -> dict[tuple[str, str], dict[str, Any]]:
    """Calibrations measured by this project and shipped as package data (``shipped_calibrations.json`` beside
    this module), so a fresh clone runs with the same defaults: keyed by (KG folder, encoder folder) of the
    embedding cache, i.e. the KG's fingerprint and the encoder's weights. Each entry's ``source`` is the
    committed sweep it was chosen from. A calibration.json in the cache folder takes precedence."""
    entries = json.loads(SHIPPED_FILE.read_text(encoding="utf-8"))
    return {(e["kg"], e["encoder"]): e["calibration"] for e in entries}


def load_calibration(embeddings: Any) -> dict[str, Any] | None:
    try:
        path = calibration_path(embeddings)
    except (AttributeError, TypeError):
        return None
    return load_calibration_file(path)


def load_calibration_file(path: Path) -> dict[str, Any] | None:
    """The calibration at ``path`` (``<embedding cache>/calibration.json``), else the shipped one for
    that cache folder, else None; ``"path"`` says which file (or ``"shipped"``)."""
    if not path.is_file():
        shipped = shipped_calibrations().get((path.parent.parent.name, path.parent.name))
        return {**shipped, "path": "shipped"} if shipped else None
    # A damaged file is an error, not "not calibrated": read as absent it silently traced at another θ
    # (and on MetaQA replaced the shipped value), and a resumed run mixed predictions of two θs.
    fix = (f"  how to fix: delete {path} and run `stem-jax calibrate` again (without it the shipped or configured "
           "θ applies), or pass --engine.calibrated=false to ignore it")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StemError(f"{path}: damaged calibration ({type(err).__name__}: {err})\n{fix}") from None
    theta = data.get("theta") if isinstance(data, dict) else None
    if not isinstance(theta, int | float) or isinstance(theta, bool) or not 0.0 <= float(theta) <= 1.0:
        raise StemError(f"{path}: not a calibration (needs an object with a θ in [0, 1] under \"theta\")\n{fix}")
    return {**data, "path": str(path)}


def applies(calibration: dict[str, Any] | None, engine: Any) -> bool:
    if not calibration or "theta" not in calibration:
        return False
    settings = calibration.get("engine", {})
    return all(settings.get(k) == getattr(engine, k) for k in MATCHED_SETTINGS)


def sweep_theta(method: Any, questions: Sequence[Question], planner: Callable, grid: Sequence[float] = DEFAULT_GRID,
                log: Callable[[str], None] = print, conventions: Sequence[dict[str, Any]] | None = None,
                ) -> list[dict[str, Any]]:
    """Mean Hit/Hit@1/F1 per hop of ``questions`` for every θ of ``grid`` (one plan/encode, one trace per θ)
    through STEM ``method`` (a :class:`~stem_jax.methods.stem.method.StemMethod`): each θ is a point of
    :meth:`~stem_jax.methods.stem.method.StemMethod.score_grid` with the method's λ and τ, answered and scored
    as ``stem-jax eval`` does. ``planner`` plans the questions (no guidance is attached).

    ``conventions``: engine conventions to sweep with θ (e.g. :data:`CONVENTION_GRID`); each row then
    carries its ``"conventions"``."""
    runs, _ = method.plan_runs(questions, planner)
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for conv in conventions or [{}]:
        groups[tuple((k, conv[k]) for k in TRACED_CONVENTIONS if k in conv)].append(dict(conv))
    rows = []
    for members in groups.values():
        for theta in grid:
            began = time.perf_counter()
            hyper = method.default_hyper.replace(theta=theta)
            for conv in members:
                scored = method.score_grid(questions, [hyper], runs=runs, conventions=conv or None)
                row = _score(method, questions, scored.retrievals[0])
                row.update({"theta": float(theta), "seconds": time.perf_counter() - began})
                label = ""
                if conv:
                    engine = dataclasses.replace(method.settings.engine, **conv)
                    row["conventions"] = {k: getattr(engine, k) for k in ("direction", "used_triples",
                                                                          "exclude_topic")}
                    label = " " + ", ".join(f"{k}={v}" for k, v in row["conventions"].items())
                log(f"θ={theta:.2f}{label}: mean F1 {100 * row['mean_f1']:.2f}, mean Hit {100 * row['mean_hit']:.2f} "
                    f"({row['seconds']:.0f}s)")
                rows.append(row)
    return rows


def _score(method: Any, questions: Sequence[Question], retrievals: Sequence[Any]) -> dict[str, Any]:
    """Per hop Hit, Hit@1 and F1 of ``questions``' retrievals as ``stem-jax eval`` scores them (the shared record
    builder and :func:`~stem_jax.eval.scoring.score_records`), and their means over the hops."""
    summary = score_records(make_records(method.context, questions, retrievals, "stem"))
    row: dict[str, Any] = {"hops": {}}
    for hop, stats in summary["groups"].items():
        row["hops"][hop] = {k: stats["mean"][k] for k in ("hit", "hit_at_1", "f1")}
        row["hops"][hop]["n"] = stats["n"]
    return _with_means(row)


def _with_means(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with ``mean_f1`` and ``mean_hit`` over its questions: each hop group weighs by its question
    count, so a group of three questions cannot outvote one of a hundred and fifty."""
    hops = [h for h in row["hops"].values() if h["n"]]
    weights = [h["n"] for h in hops]
    row["mean_f1"] = float(np.average([h["f1"] for h in hops], weights=weights)) if hops else 0.0
    row["mean_hit"] = float(np.average([h["hit"] for h in hops], weights=weights)) if hops else 0.0
    return row


def _defaults_kept(row: dict[str, Any]) -> int:
    defaults = EngineConfig()
    return sum(v == getattr(defaults, k) for k, v in row.get("conventions", {}).items())


def conventions_key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row.get("conventions", {}).items()))


def setting_rank(row: dict[str, Any], paper_theta: float, prefer: dict[tuple, float] | None) -> tuple:
    bound = (prefer or {}).get(conventions_key(row), 0.0)
    return (round(row["mean_f1"], 4), round(row["mean_hit"], 4), round(bound, 4), _defaults_kept(row),
            -abs(row["theta"] - paper_theta))


def choose(rows: Sequence[dict[str, Any]], paper_theta: float = 0.6,
           prefer: dict[tuple, float] | None = None) -> dict[str, Any]:
    """The best row: mean F1, then mean Hit, then (``prefer``: conventions -> the data's gold-path bound F1 under
    them, see :func:`tied_conventions`) the conventions the data's own paths reach best with, then the engine's
    default conventions, then θ nearest the paper's."""
    return max(rows, key=lambda r: setting_rank(r, paper_theta, prefer))


def tied(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that tie with the best on mean F1 and mean Hit (what dev alone cannot tell apart)."""
    top = max((round(r["mean_f1"], 4), round(r["mean_hit"], 4)) for r in rows)
    return [r for r in rows if (round(r["mean_f1"], 4), round(r["mean_hit"], 4)) == top]


def tied_conventions(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct convention sets among :func:`tied` rows (several: dev cannot decide between them)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for row in tied(rows):
        seen.setdefault(conventions_key(row), dict(row.get("conventions", {})))
    return list(seen.values())


def save_calibration(embeddings: Any, method: Any, rows: Sequence[dict[str, Any]], *, split: str,
                     questions: int, prefer: dict[tuple, float] | None = None,
                     ties: dict[str, Any] | None = None) -> Path:
    """Store the :func:`choose` row (``prefer`` breaks its ties) beside the embeddings; ``ties`` records how
    many settings tied and how the tie was broken."""
    engine = method.settings.engine
    best = choose(rows, prefer=prefer)
    payload = {
        "theta": float(best["theta"]),
        "encoder": getattr(embeddings.triples, "encoder_name", None),
        "split": split,
        "questions": questions,
        "engine": {k: getattr(engine, k) for k in MATCHED_SETTINGS},
        "engine_all": dataclasses.asdict(engine),
        "tau": method.context.config.tracer.tau,
        "sweep": list(rows),
    }
    if ties:
        payload["ties"] = ties
    if "conventions" in best:
        payload["conventions"] = dict(best["conventions"])
    path = calibration_path(embeddings)
    write_json_atomic(path, payload)
    return path

"""Per-encoder calibration of the Breadth threshold θ, and of the KG's conventions, on a dev split.

The paper's θ = 0.6 was chosen for Qwen3-Embedding; cosines of another encoder live on another
scale (with MiniLM a placeholder schema triple scores about 0.3 against the right KG triple). The
sweep traces one dev sample for every θ of a grid through one
:class:`~stem_jax.methods.stem.pipeline.StemPipeline` (``trace(runs, hyper)`` with the grid's θ:
no recompilation, planning and encoding done once) and answers it with the pipeline's own
``record``, scores each θ with the strict set metrics, and keeps the best mean F1 over hops (ties:
Hit, then the θ closest to the paper's). ``stem-jax calibrate`` runs it.

The KG's conventions are swept with θ (:data:`CONVENTION_GRID`): ``direction`` (undirected | directed
matching) and ``used_triples`` (run | branch | step) change what is traced, so each pair is one
more trace per θ (a copy of the pipeline with those engine fields, same device arrays and compiled
shapes otherwise); ``exclude_topic`` only changes the answers, so both values are scored from the
same trace. Ties keep the engine's defaults (undirected, once per run, topic excluded), then the θ
closest to the paper's.

The result is stored as ``calibration.json`` beside the KG embeddings of that encoder, with the
engine settings it was measured under; the evaluator uses it when those settings match and the
user left ``--tracer.theta`` at the paper default (``--engine.calibrated=false`` turns it off);
:mod:`stem_jax.methods.stem.settings` decides that, in one place.
"""

from __future__ import annotations

import dataclasses
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
from stem_jax.eval.metrics import strict_metrics
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


# Calibrations measured by this project, shipped so a fresh clone runs with the same defaults: keyed by
# (KG folder, encoder folder) of the embedding cache, i.e. the KG's fingerprint and the encoder's weights.
# MetaQA-partial KB + all-MiniLM-L6-v2: `stem-jax calibrate --dataset metaqa --split dev` (150 dev questions
# per hop); the full sweep is experiments/results/calibration-metaqa-minilm-dev.json. A calibration.json in
# the cache folder (written by that command) takes precedence.
SHIPPED: dict[tuple[str, str], dict[str, Any]] = {
    ("kg-738b3c023983", "all-MiniLM-L6-v2-ad404e0d5b24-len64"): {
        "encoder": "all-MiniLM-L6-v2", "engine": {"relation_bonus": True, "strategy": "breadth"},
        "questions": 450, "split": "dev", "tau": 0.5, "theta": 0.8,
        "source": "experiments/results/calibration-metaqa-minilm-dev.json",
        # MetaQA keeps the conventions it always ran with (its data excludes the topic; results unchanged)
        "conventions": {"direction": "undirected", "used_triples": "run", "exclude_topic": True},
    },
    # WorldCup2014 KB (one KB for WC-P1, WC-P2 and WC-C) + all-MiniLM-L6-v2: `stem-jax calibrate --dataset wc2014`
    # on the seeded dev split (1,015 questions); every convention reaches F1 100 at θ >= 0.9, so the sweep keeps
    # the defaults. Shipped so a fresh clone gets WC's measured θ without running calibrate first.
    ("kg-d26a1ee2269f", "all-MiniLM-L6-v2-ad404e0d5b24-len64"): {
        "encoder": "all-MiniLM-L6-v2", "engine": {"relation_bonus": True, "strategy": "breadth"},
        "questions": 1015, "split": "dev", "tau": 0.5, "theta": 0.9,
        "source": "experiments/results/calibration-wc2014-minilm-dev.json",
        "conventions": {"direction": "undirected", "used_triples": "run", "exclude_topic": True},
    },
}


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
        shipped = SHIPPED.get((path.parent.parent.name, path.parent.name))
        return {**shipped, "path": "shipped"} if shipped else None
    # A damaged file is an error, not "not calibrated": read as absent it silently traced at another θ
    # (and on MetaQA replaced the shipped value), and a resumed run mixed predictions of two θs (issue 23).
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


def sweep_theta(pipeline: Any, questions: Sequence[Question], planner: Callable, grid: Sequence[float] = DEFAULT_GRID,
                log: Callable[[str], None] = print, conventions: Sequence[dict[str, Any]] | None = None,
                ) -> list[dict[str, Any]]:
    """Mean Hit/Hit@1/F1 per hop of ``questions`` for every θ of ``grid`` (one plan/encode, one trace per θ)
    through ``pipeline`` (a :class:`~stem_jax.methods.stem.pipeline.StemPipeline`): each θ is
    ``pipeline.trace(runs, hyper)`` and ``pipeline.record(..., hyper=hyper)`` with the pipeline's λ and τ.

    ``conventions``: engine conventions to sweep with θ (e.g. :data:`CONVENTION_GRID`); each row then
    carries its ``"conventions"``. Traced conventions run on
    :meth:`~stem_jax.methods.stem.pipeline.StemPipeline.with_conventions` copies of ``pipeline``."""
    runs, _ = pipeline.plan_all(questions, planner)
    texts = [t for rs in runs for r in rs for t in r.plan.step_texts()]
    if pipeline.text_emb is None or set(texts) - set(pipeline.text_rows):
        pipeline.embed_texts(texts, show_progress=False)
    flat = [r for rs in runs for r in rs]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for conv in conventions or [{}]:
        groups[tuple((k, conv[k]) for k in TRACED_CONVENTIONS if k in conv)].append(dict(conv))
    rows = []
    for traced, members in groups.items():
        traced_pipeline = pipeline.with_conventions(**dict(traced)) if traced else pipeline
        for theta in grid:
            began = time.perf_counter()
            hyper = pipeline.hyper.replace(theta=theta)
            outputs, _ = traced_pipeline.trace(flat, hyper)
            for conv in members:
                answering = (traced_pipeline.with_conventions(exclude_topic=conv["exclude_topic"])
                             if "exclude_topic" in conv else traced_pipeline)
                row = _score(answering, questions, runs, outputs, hyper)
                row.update({"theta": float(theta), "seconds": time.perf_counter() - began})
                label = ""
                if conv:
                    row["conventions"] = {k: getattr(answering.engine, k) for k in ("direction", "used_triples",
                                                                                     "exclude_topic")}
                    label = " " + ", ".join(f"{k}={v}" for k, v in row["conventions"].items())
                log(f"θ={theta:.2f}{label}: mean F1 {100 * row['mean_f1']:.2f}, mean Hit {100 * row['mean_hit']:.2f} "
                    f"({row['seconds']:.0f}s)")
                rows.append(row)
    return rows


def _score(pipeline: Any, questions: Sequence[Question], runs: Sequence, outputs: Sequence, hyper: Any) -> dict[str, Any]:
    per_hop: dict[str, list[dict[str, float]]] = defaultdict(list)
    cursor = 0
    for question, rs in zip(questions, runs, strict=True):
        record = pipeline.record(question, rs, outputs[cursor : cursor + len(rs)], hyper=hyper)
        cursor += len(rs)
        if question.answers:
            per_hop[f"{question.hops}-hop"].append(strict_metrics(record["prediction"], record["ground_truth"]))
    row: dict[str, Any] = {"hops": {}}
    for hop, metrics in sorted(per_hop.items()):
        row["hops"][hop] = {k: float(np.mean([m[k] for m in metrics])) for k in ("hit", "hit_at_1", "f1")}
        row["hops"][hop]["n"] = len(metrics)
    row["mean_f1"] = float(np.mean([h["f1"] for h in row["hops"].values()])) if row["hops"] else 0.0
    row["mean_hit"] = float(np.mean([h["hit"] for h in row["hops"].values()])) if row["hops"] else 0.0
    return row


def sweep_cut(records: Sequence[dict[str, Any]], grid: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
              ) -> list[dict[str, Any]]:
    """Mean Hit/Hit@1/F1 per hop for every support cut of ``grid``, from records written with
    ``--engine.answer_cut=0 --engine.rank=beam`` (their scores are the beam support, best first), so
    the cut is calibrated offline from one traced dev run."""
    rows = []
    for cut in grid:
        per_hop: dict[str, list[dict[str, float]]] = defaultdict(list)
        for record in records:
            if not record["ground_truth"]:
                continue
            scores = record["scores"]
            kept = [p for p, s in zip(record["prediction"], scores, strict=True)
                    if scores and s >= cut * scores[0] - 1e-6]
            per_hop[f"{record['hops']}-hop"].append(strict_metrics(kept, record["ground_truth"]))
        row = {"cut": float(cut), "hops": {}}
        for hop, metrics in sorted(per_hop.items()):
            row["hops"][hop] = {k: float(np.mean([m[k] for m in metrics])) for k in ("hit", "hit_at_1", "f1")}
            row["hops"][hop]["n"] = len(metrics)
        row["mean_f1"] = float(np.mean([h["f1"] for h in row["hops"].values()]))
        rows.append(row)
    return rows


def _defaults_kept(row: dict[str, Any]) -> int:
    defaults = EngineConfig()
    return sum(v == getattr(defaults, k) for k, v in row.get("conventions", {}).items())


def _conventions_key(row: dict[str, Any]) -> tuple:
    return tuple(sorted(row.get("conventions", {}).items()))


def _rank(row: dict[str, Any], paper_theta: float, prefer: dict[tuple, float] | None) -> tuple:
    bound = (prefer or {}).get(_conventions_key(row), 0.0)
    return (round(row["mean_f1"], 4), round(row["mean_hit"], 4), round(bound, 4), _defaults_kept(row),
            -abs(row["theta"] - paper_theta))


def choose(rows: Sequence[dict[str, Any]], paper_theta: float = 0.6,
           prefer: dict[tuple, float] | None = None) -> dict[str, Any]:
    """The best row: mean F1, then mean Hit, then (``prefer``: conventions -> the data's gold-path bound F1 under
    them, see :func:`tied_conventions`) the conventions the data's own paths reach best with, then the engine's
    default conventions, then θ nearest the paper's."""
    return max(rows, key=lambda r: _rank(r, paper_theta, prefer))


def tied(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that tie with the best on mean F1 and mean Hit (what dev alone cannot tell apart)."""
    top = max((round(r["mean_f1"], 4), round(r["mean_hit"], 4)) for r in rows)
    return [r for r in rows if (round(r["mean_f1"], 4), round(r["mean_hit"], 4)) == top]


def tied_conventions(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct convention sets among :func:`tied` rows (several: dev cannot decide between them)."""
    seen: dict[tuple, dict[str, Any]] = {}
    for row in tied(rows):
        seen.setdefault(_conventions_key(row), dict(row.get("conventions", {})))
    return list(seen.values())


def choose_theta(rows: Sequence[dict[str, Any]], paper_theta: float = 0.6) -> float:
    return float(choose(rows, paper_theta)["theta"])


def save_calibration(embeddings: Any, pipeline: Any, rows: Sequence[dict[str, Any]], *, split: str,
                     questions: int, prefer: dict[tuple, float] | None = None,
                     ties: dict[str, Any] | None = None) -> Path:
    """Store the :func:`choose` row (``prefer`` breaks its ties) beside the embeddings; ``ties`` records how
    many settings tied and how the tie was broken."""
    engine = pipeline.engine
    best = choose(rows, prefer=prefer)
    payload = {
        "theta": float(best["theta"]),
        "encoder": getattr(embeddings.triples, "encoder_name", None),
        "split": split,
        "questions": questions,
        "engine": {k: getattr(engine, k) for k in MATCHED_SETTINGS},
        "engine_all": dataclasses.asdict(engine),
        "tau": pipeline.config.tracer.tau,
        "sweep": list(rows),
    }
    if ties:
        payload["ties"] = ties
    if "conventions" in best:
        payload["conventions"] = dict(best["conventions"])
    path = calibration_path(embeddings)
    write_json_atomic(path, payload)
    return path

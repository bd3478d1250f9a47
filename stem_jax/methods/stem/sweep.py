"""Hyper-parameter grids (λ, τ, θ, K') evaluated in one compiled call per batch, resumable.

A sweep plans, embeds and computes the GNN guidance of every question once (K' is only a rank
cut-off on the cached GNN rows, so each K' value is one cheap ``attach``). Each chunk of questions is
then traced at every grid point by :meth:`StemMethod.score_grid
<stem_jax.methods.stem.method.StemMethod.score_grid>`, the method's one grid call with a stacked
hyper-parameter axis: anchoring, batch shapes and the capacity ladder are those of ``stem-jax eval``, and
the grid is a leading axis of the compiled tracer (vmapped on an accelerator, scanned on CPU), not a
Python loop over points.

Every point's answers go through the rank stage at the point's own λ, τ and θ (τ included
in the ranking gap) and are written by the eval loop's :class:`~stem_jax.eval.loop.RunWriter` to
``<out>/points/<label>/`` (``predictions.jsonl`` one chunk of questions at a time, then ``metrics.json``), so a
killed sweep keeps every finished (point, chunk) and each point's folder is the one ``stem-jax eval`` with
that point's flags leaves.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import field_problem
from stem_jax.data.types import Question
from stem_jax.errors import ConfigError, StemError
from stem_jax.eval.loop import RunWriter, write_metrics
from stem_jax.eval.run_folder import RunFolder, method_fingerprint
from stem_jax.methods.stem.trace import default_grid_batch
from stem_jax.methods.stem.types import StemHyper
from stem_jax.progress import progress

AXES = ("lam", "tau", "theta", "k_prime")
AXIS_TITLES = {"lam": "λ", "tau": "τ", "theta": "θ", "k_prime": "K'"}
AXIS_FLAGS = {"lam": "--lambda", "tau": "--tau", "theta": "--theta", "k_prime": "--k-prime"}
CONFIG_FIELDS = {"lam": "tracer.lam", "tau": "tracer.tau", "theta": "tracer.theta", "k_prime": "guidance.k_prime"}
METRICS = (("hit_at_1", "Hit@1"), ("f1", "F1"), ("coverage", "Coverage"))


@dataclasses.dataclass(frozen=True)
class GridPoint:
    lam: float
    tau: float
    theta: float
    k_prime: int

    def hyper(self) -> StemHyper:
        """The point's traced hyper-parameters (K' is applied to the guidance rows, not traced)."""
        return StemHyper(self.lam, self.tau, self.theta)

    @property
    def label(self) -> str:
        """The point's folder name: each value as ``:g`` when that reads back exactly (the names runs have
        always had), else its shortest exact form, so values equal at 6 digits get their own folders."""
        return f"lam{_exact(self.lam)}-tau{_exact(self.tau)}-theta{_exact(self.theta)}-k{self.k_prime}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _exact(value: float) -> str:
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def parse_values(text: str | None, flag: str, *, integer: bool = False) -> tuple[float, ...] | None:
    """``"1.2,1.5"`` -> (1.2, 1.5); None stays None (the axis keeps the configured value)."""
    if text is None:
        return None
    try:
        values = tuple(int(v) if integer else float(v) for v in text.split(",") if v.strip())
    except ValueError:
        kind = "whole numbers" if integer else "numbers"
        raise StemError(f"{flag} expects comma-separated {kind} like {'1,2,4' if integer else '0.2,0.5'}, "
                        f"got {text!r}") from None
    if not values:
        raise StemError(f"{flag} needs at least one value, got {text!r}")
    if len(set(values)) != len(values):
        raise StemError(f"{flag} lists a value twice: {text!r}")
    return values


def make_grid(config: Any, *, lams: Sequence[float] | None = None, taus: Sequence[float] | None = None,
              thetas: Sequence[float] | None = None, k_primes: Sequence[int] | None = None,
              default_theta: float | None = None) -> list[GridPoint]:
    """The cartesian grid (λ slowest, K' fastest); an axis left as None keeps the config's value
    (θ: ``default_theta`` when given, i.e. the pipeline's effective θ, which may come from a dev calibration)."""
    t = config.tracer
    theta = t.theta if default_theta is None else default_theta
    axes = [lams or (t.lam,), taus or (t.tau,), thetas or (theta,), k_primes or (config.guidance.k_prime,)]
    problems = []
    for name, values in zip(AXES, axes, strict=True):
        for v in values:  # the config's own range checks: a grid value is allowed where --tracer.theta=v is
            value = int(v) if name == "k_prime" else float(v)
            problem = field_problem(CONFIG_FIELDS[name], value, flag=f"{AXIS_FLAGS[name]} {value}")
            if problem is not None:
                problems.append(problem)
    if problems:
        raise ConfigError(problems)
    points = [GridPoint(float(a), float(b), float(c), int(d)) for a, b, c, d in itertools.product(*axes)]
    labels: dict[str, GridPoint] = {}
    for point in points:
        if labels.setdefault(point.label, point) != point:
            raise StemError(f"grid points {labels[point.label].as_dict()} and {point.as_dict()} share the folder "
                            f"name {point.label}\n  how to fix: list values that differ")
    return points


# ----- the sweep -----------------------------------------------------------------------------------
def guidance_rows_by_k(method: Any, questions: Sequence[Question], k_primes: Sequence[int],
                       show_progress: bool = False) -> dict[int, dict[str, np.ndarray]]:
    """Per K': per question, its runs' guidance rows (int32 [runs, G]) from the cached GNN rows."""
    provider = method.context.guidance
    runs_per_q = [method.runs[q.qid] for q in questions]
    result: dict[int, dict[str, np.ndarray]] = {}
    for k in sorted(set(k_primes)):
        if provider is not None:
            provider.with_k_prime(k).attach(list(questions), runs_per_q, show_progress=show_progress)
        result[k] = method.guidance_rows(questions)
    if provider is not None:  # leave the runs as the method's own K' set them
        provider.attach(list(questions), runs_per_q, show_progress=False)
    return result


def _point_dir(out_dir: Path, point: GridPoint) -> Path:
    return out_dir / "points" / point.label


def point_fingerprint(base: dict[str, Any], point: GridPoint) -> dict[str, Any]:
    """``base`` (the run's results fingerprint) with the point's λ, τ, θ and K' in its config."""
    fingerprint = json.loads(json.dumps(base, default=str))
    config = fingerprint.setdefault("config", {})
    config.setdefault("tracer", {}).update(lam=point.lam, tau=point.tau, theta=point.theta)
    config.setdefault("guidance", {})["k_prime"] = point.k_prime
    effective = fingerprint.setdefault("extra", {}).get("effective")
    if isinstance(effective, dict):  # what the point traces with, as its eval's fingerprint says
        effective["hyper"] = point.hyper().as_dict()
    return fingerprint


def run_sweep(method: Any, questions: Sequence[Question], points: Sequence[GridPoint], out_dir: Path, *,
              chunk_size: int, points_per_call: int | None = None, grid_batch: int | None = -1,
              fingerprint: dict[str, Any] | None = None,
              overwrite: bool = False, show_progress: bool = True,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Evaluate ``questions`` at every grid point into ``out_dir/points/<label>/`` (resumable).

    ``method`` is STEM's :class:`~stem_jax.methods.stem.StemMethod` (its pipeline, planner and
    guidance). Each point folder is a locked, fingerprinted :class:`~stem_jax.eval.run_folder.RunFolder`
    (``fingerprint``: the run's, default the method's; the point's values replace λ, τ, θ, K') written
    and scored by the eval loop's :class:`~stem_jax.eval.loop.RunWriter`, with its ``metrics.json``.
    ``points_per_call`` caps the grid points of one compiled trace call (None: all; 1:
    the point-by-point loop, for comparison); ``grid_batch`` how many of them are vmapped together inside
    it (-1: the backend's default, :func:`~stem_jax.methods.stem.trace.default_grid_batch`). Returns
    per-point summaries and timings."""
    if not points:
        raise StemError("the sweep grid is empty")
    if not questions:
        raise StemError("no questions to sweep: the selection is empty\n"
                        "  how to fix: check --hops, --limit, --subset and --split")
    out_dir = Path(out_dir)
    questions = list(questions)
    base = method_fingerprint(method) if fingerprint is None else fingerprint
    point_methods = [method.with_hyper(p.hyper()) for p in points]  # what `eval` at the point's flags runs
    with ExitStack() as stack:
        folders = [stack.enter_context(RunFolder.open(_point_dir(out_dir, p), point_fingerprint(base, p),
                                                      overwrite=overwrite, questions=questions, log=log))
                   for p in points]
        for point, folder in zip(points, folders, strict=True):
            (folder.path / "point.json").write_text(json.dumps(point.as_dict(), sort_keys=True) + "\n")
        writers = [RunWriter(m, questions, folder, lambda _: None) for m, folder in zip(point_methods, folders,
                                                                                         strict=True)]
        done = sum(len(questions) - len(w.todo) for w in writers)
        if done:
            log(f"resuming: {done} of {len(points) * len(questions)} (point, question) records already written")
        began = time.perf_counter()
        prepared = method.prepare(questions, show_progress=show_progress) or {}
        prepare_seconds = time.perf_counter() - began
        began = time.perf_counter()
        rows_by_k = guidance_rows_by_k(method, questions, [p.k_prime for p in points])
        guidance_seconds = time.perf_counter() - began
        per_call = len(points) if points_per_call is None else max(1, points_per_call)
        grid_batch = default_grid_batch() if grid_batch == -1 else grid_batch
        timings = {"anchor": 0.0, "trace": 0.0, "answer": 0.0}
        calls = 0
        todo_of = [{q.qid for q in w.todo} for w in writers]
        with progress(len(points) * len(questions), f"sweep {len(points)} points", "q", enabled=show_progress,
                      initial=done) as bar:
            for start in range(0, len(questions), chunk_size):
                chunk = questions[start : start + chunk_size]
                todo = [p for p in range(len(points)) if any(q.qid in todo_of[p] for q in chunk)]
                if not todo:
                    continue
                grid = [points[p] for p in todo]
                scored = method.score_grid(chunk, [g.hyper() for g in grid],
                                           guidance=[rows_by_k[g.k_prime] for g in grid],
                                           points_per_call=per_call, grid_batch=grid_batch)
                calls += scored.calls
                for stage in timings:
                    timings[stage] += scored.seconds[stage]
                for p, retrievals in zip(todo, scored.retrievals, strict=True):
                    mine = [(q, r) for q, r in zip(chunk, retrievals, strict=True) if q.qid in todo_of[p]]
                    writers[p].add([q for q, _ in mine], [r for _, r in mine])  # flushed and fsynced: a kill keeps it
                    todo_of[p].difference_update(q.qid for q, _ in mine)
                    bar.update(len(mine))
        results = []
        for point, writer in zip(points, writers, strict=True):
            summary = writer.summary(prepared, prepare_seconds)
            write_metrics(writer.run.path, summary)
            results.append({"point": point.as_dict(), "label": point.label, "overall": summary["overall"],
                            "groups": summary["groups"], "overflow_total": summary["overflow_total"]})
    return {"points": results, "prepare_seconds": prepare_seconds, "guidance_seconds": guidance_seconds,
            "stage_seconds_this_run": timings, "compiled_calls_this_run": calls, "points_per_call": per_call,
            "grid_batch": grid_batch,
            "questions": len(questions), "prepared": {k: v for k, v in prepared.items() if v is not None}}


# ----- tables and figures --------------------------------------------------------------------------
def varying_axes(points: Sequence[GridPoint]) -> list[str]:
    return [a for a in AXES if len({getattr(p, a) for p in points}) > 1]


def _metric(result: dict[str, Any], key: str, group: str | None = None) -> float | None:
    stats = result["overall"] if group is None else result["groups"].get(group)
    if not stats or key not in stats["mean"]:
        return None
    return 100.0 * stats["mean"][key]


def sweep_table(results: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Markdown-ready rows: one per (point, hop group) plus the point's overall row."""
    groups = sorted({g for r in results for g in r["groups"]})
    headers = [AXIS_TITLES[a] for a in AXES] + ["hops", "questions"] + [t for _, t in METRICS] + ["Hit"]
    rows = []
    for r in results:
        point = r["point"]
        for group in (groups if len(groups) > 1 else []) + [None]:
            stats = r["overall"] if group is None else r["groups"].get(group)
            if not stats:
                continue
            cells = [_metric(r, k, group) for k, _ in METRICS] + [_metric(r, "hit", group)]
            rows.append([point[a] for a in AXES] + [group or "all", stats["n"]]
                        + ["-" if c is None else round(c, 2) for c in cells])
    return headers, rows


def plot_sweep(results: Sequence[dict[str, Any]], out_dir: Path, prefix: str = "sweep") -> list[Path]:
    """One heat map PNG per metric for each 2-D slice, or one line plot for a 1-D sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [GridPoint(**r["point"]) for r in results]
    axes = varying_axes(points)
    written: list[Path] = []
    by_point = {p: r for p, r in zip(points, results, strict=True)}
    if len(axes) == 1:
        axis = axes[0]
        xs = [getattr(p, axis) for p in points]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for key, title in METRICS:
            ys = [_metric(r, key) for r in results]
            ax.plot(xs, [np.nan if y is None else y for y in ys], marker="o", label=title)
        ax.set_xlabel(AXIS_TITLES[axis])
        ax.set_ylabel("percent")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{prefix}-{axis}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return [path]
    for a, b in itertools.combinations(axes, 2):
        rest = [x for x in axes if x not in (a, b)]
        fixed_values = sorted({tuple(getattr(p, x) for x in rest) for p in points})
        a_values = sorted({getattr(p, a) for p in points})
        b_values = sorted({getattr(p, b) for p in points})
        for fixed in fixed_values:
            tag = "".join(f"-{x}{v:g}" for x, v in zip(rest, fixed, strict=True))
            for key, title in METRICS:
                grid = np.full((len(a_values), len(b_values)), np.nan)
                for p, r in by_point.items():
                    if tuple(getattr(p, x) for x in rest) != fixed:
                        continue
                    value = _metric(r, key)
                    if value is not None:
                        grid[a_values.index(getattr(p, a)), b_values.index(getattr(p, b))] = value
                fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(b_values), 1.0 + 0.6 * len(a_values)))
                image = ax.imshow(grid, cmap="viridis", aspect="auto", origin="lower")
                ax.set_xticks(range(len(b_values)), [f"{v:g}" for v in b_values])
                ax.set_yticks(range(len(a_values)), [f"{v:g}" for v in a_values])
                ax.set_xlabel(AXIS_TITLES[b])
                ax.set_ylabel(AXIS_TITLES[a])
                for (i, j), value in np.ndenumerate(grid):
                    if not np.isnan(value):
                        ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7,
                                color="white" if value < np.nanmean(grid) else "black")
                ax.set_title(f"{title} (%)" + (f", {tag[1:]}" if tag else ""), fontsize=9)
                fig.colorbar(image, ax=ax, fraction=0.05)
                fig.tight_layout()
                path = out_dir / f"{prefix}-{key}-{a}-x-{b}{tag}.png"
                fig.savefig(path, dpi=120)
                plt.close(fig)
                written.append(path)
    return written

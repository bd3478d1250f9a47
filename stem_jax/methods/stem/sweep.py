"""Hyper-parameter grids (λ, τ, θ, K') evaluated in one compiled call per batch, resumable.

A sweep plans, embeds and computes the GNN guidance of every question once (K' is only a rank
cut-off on the cached GNN rows, so each K' value is one cheap ``attach``). The grid axis is then
a leading ``jax.vmap`` axis of the existing jitted kernels, not a Python loop over points:

* anchoring (:func:`anchor_grid_batch`): ``anchor_batch`` vmapped over (guidance rows, λ); the
  cosine top-N over the entity table does not depend on either, so XLA computes it once;
* tracing (:func:`trace_grid_batch`): ``trace_batch`` vmapped over (anchor, anchor score,
  guidance rows) of the batch and a stacked :class:`~stem_jax.trace.tracer.Hyper` (τ, θ), with the
  KG arrays and the plan-dependent batch fields shared. On CPU the points are scanned inside the
  same compiled call instead (``lax.map``; see :func:`default_grid_batch`): a vmapped tracer runs
  its data-dependent compaction every block, which measured 4x slower than a loop on 2 cores.

Every point's answers go through :meth:`StemPipeline.retrieval` at the point's own λ, τ and θ (the
code ``stem-jax eval`` uses, τ included in the ranking gap) and the shared record builder, and are
written to ``<out>/points/<label>/predictions.jsonl`` one chunk of questions at a time, so a
killed sweep keeps every finished (point, chunk) and each point's predictions are exactly those of
``stem-jax eval`` with that point's flags. The grid kernels take the same static switches as the
pipeline's tracer (``relation_bonus``, ``tau_admits``). Breadth runs that overflow climb the
pipeline's capacity ladder per point: a level re-traces the union of the points' overflowing runs
and keeps, per point, only the rows that point needed (rows of a batch are independent).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.config import field_problem
from stem_jax.data.types import Question
from stem_jax.errors import ConfigError, StemError
from stem_jax.eval.records import make_record
from stem_jax.eval.run_folder import RunFolder, method_fingerprint
from stem_jax.eval.scoring import score_predictions
from stem_jax.methods.stem.pipeline import OUTPUT_FIELDS, Run, StemHyper, StemPipeline
from stem_jax.progress import progress
from stem_jax.trace.tracer import Hyper, TraceBatch, anchor_batch, trace_batch

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


# ----- the vmapped kernels ------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("top_n",))
def anchor_grid_batch(entity_emb: jax.Array, mentions: jax.Array, guidance: jax.Array, lam: jax.Array,
                      named: jax.Array, named_level: jax.Array, *, top_n: int) -> tuple[jax.Array, jax.Array]:
    """:func:`anchor_batch` for P grid points: ``guidance`` int32 [P, B, G], ``lam`` float32 [P];
    returns anchors int32 [P, B] and scores float32 [P, B]."""
    def one(rows, lam_p):
        return anchor_batch(entity_emb, mentions, rows, lam_p, named, named_level, top_n=top_n)

    return jax.vmap(one)(guidance, lam)


def default_grid_batch() -> int | None:
    """Grid points vmapped together inside the one compiled call: all of them (None) on an accelerator,
    1 on CPU. Under ``vmap`` the tracer's data-dependent ``lax.cond`` (buffer compaction) becomes a
    select that runs every block and its ``while_loop`` runs to the slowest point, which a CPU pays
    in full; there the points are scanned (``lax.map``) inside the same call instead."""
    return 1 if jax.default_backend() == "cpu" else None


@functools.partial(jax.jit, static_argnames=("shapes", "precision", "relation_bonus", "tau_admits", "direction",
                                             "used", "grid_batch"))
def trace_grid_batch(kg: Any, batch: TraceBatch, hyper: Hyper, *, shapes: Any, precision: bool,
                     relation_bonus: bool = False, tau_admits: bool = True, direction: str = "undirected",
                     used: str = "run", grid_batch: int | None = None) -> Any:
    """:func:`trace_batch` for P grid points in one compiled call: ``batch.anchor``/``anchor_score``
    [P, B], ``batch.guidance`` [P, B, G], ``hyper`` fields [P]; the KG and the plan fields are shared.

    ``grid_batch``: None vmaps all P points; k scans the points k at a time (``lax.map``; 1 = a
    plain scan, no batching of the tracer's control flow)."""
    def one(xs):
        anchor, score, guidance, h = xs
        return trace_batch(kg, batch._replace(anchor=anchor, anchor_score=score, guidance=guidance), h,
                           shapes=shapes, precision=precision, relation_bonus=relation_bonus, tau_admits=tau_admits,
                           direction=direction, used=used)

    xs = (batch.anchor, batch.anchor_score, batch.guidance, hyper)
    if grid_batch is None or grid_batch >= batch.anchor.shape[0]:
        return jax.vmap(one)(xs)
    if grid_batch == 1:
        return jax.lax.map(one, xs)
    return jax.lax.map(one, xs, batch_size=grid_batch)


# ----- one chunk of runs, every grid point ---------------------------------------------------------
def anchor_grid(pipeline: StemPipeline, runs: Sequence[Run], guidance: np.ndarray, lams: np.ndarray,
                timings: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Anchors [P, R] and anchor scores [P, R] of ``runs`` for P (guidance rows [P, R, G], λ [P]).

    The inputs are the pipeline's own (:meth:`StemPipeline.anchor_inputs`); every run goes to the
    device kernel, which the pipeline's host fast path for named ids equals bit for bit."""
    size = pipeline.batch[True]
    n_points, width = guidance.shape[0], guidance.shape[2]
    anchors = np.zeros((n_points, len(runs)), np.int32)
    scores = np.zeros((n_points, len(runs)), np.float32)
    began = time.perf_counter()
    mention_rows = pipeline.mention_rows(runs)
    lam_device = jnp.asarray(lams, jnp.float32)
    for start in range(0, len(runs), size):
        part = runs[start : start + size]
        mentions, named, level = pipeline.anchor_inputs(part, size, mention_rows)
        rows = np.full((n_points, size, width), -1, np.int32)
        rows[:, : len(part)] = guidance[:, start : start + len(part)]
        a, s = jax.device_get(anchor_grid_batch(pipeline.entity_emb, jnp.asarray(mentions), jnp.asarray(rows),
                                                lam_device, jnp.asarray(named), jnp.asarray(level),
                                                top_n=pipeline.config.tracer.top_n))
        anchors[:, start : start + len(part)] = a[:, : len(part)]
        scores[:, start : start + len(part)] = s[:, : len(part)]
    timings["anchor"] += time.perf_counter() - began
    return anchors, scores


def trace_grid(pipeline: StemPipeline, runs: Sequence[Run], guidance: np.ndarray, hypers: Sequence[StemHyper], *,
               grid_batch: int | None = None) -> tuple[list[list[dict[str, np.ndarray]]], dict[str, float]]:
    """:meth:`StemPipeline.trace` for P grid points at once: per point, per run host arrays.

    ``guidance`` int32 [P, R, G] (each point's guidance rows, from its K'), ``hypers`` the points'
    λ, τ, θ. Strategy groups, batch shapes and the capacity ladder are the pipeline's."""
    timings = {"anchor": 0.0, "trace": 0.0}
    n_points = len(hypers)
    outputs: list[list[dict | None]] = [[None] * len(runs) for _ in range(n_points)]
    if not runs:
        return [[] for _ in range(n_points)], timings
    anchors, anchor_scores = anchor_grid(pipeline, runs, guidance, np.array([h.lam for h in hypers]), timings)
    traced = Hyper(jnp.asarray([h.tau for h in hypers], jnp.float32), jnp.asarray([h.theta for h in hypers], jnp.float32))
    for (precision, bucket), members in pipeline.groups(runs):
        ladder = pipeline.ladder_for(precision)
        pending = [set(members) for _ in range(n_points)]  # per point: runs still to (re-)trace
        for level, shapes in enumerate(ladder):
            size = max(pipeline.batch[precision] >> level, 4)
            union = sorted(set().union(*pending))
            retry: list[set[int]] = [set() for _ in range(n_points)]
            for start in range(0, len(union), size):
                chunk = union[start : start + size]
                shared = pipeline.trace_batch([runs[i] for i in chunk], anchors[0, chunk], anchor_scores[0, chunk],
                                              size, bucket, guidance[0, chunk])
                anchor = np.full((n_points, size), -1, np.int32)
                score = np.zeros((n_points, size), np.float32)
                rows = np.full((n_points, size, guidance.shape[2]), -1, np.int32)
                anchor[:, : len(chunk)] = anchors[:, chunk]
                score[:, : len(chunk)] = anchor_scores[:, chunk]
                rows[:, : len(chunk)] = guidance[:, chunk]
                batch = shared._replace(anchor=jnp.asarray(anchor), anchor_score=jnp.asarray(score),
                                        guidance=jnp.asarray(rows))
                began = time.perf_counter()
                out = trace_grid_batch(pipeline.kg, batch, traced, shapes=shapes, precision=precision,
                                       grid_batch=grid_batch, **pipeline.tracer_switches())
                host = jax.device_get(out)  # one device->host transfer for the whole grid
                timings["trace"] += time.perf_counter() - began
                for p in range(n_points):
                    for row, i in enumerate(chunk):
                        if i not in pending[p]:
                            continue
                        result = {k: getattr(host, k)[p, row] for k in OUTPUT_FIELDS}
                        result["capacity"] = shapes.frontier
                        outputs[p][i] = result
                        if host.overflow[p, row] > 0:
                            retry[p].add(i)
            if not any(retry) or level + 1 == len(ladder):
                break
            pending = retry
    return outputs, timings  # type: ignore[return-value]


# ----- the sweep -----------------------------------------------------------------------------------
def guidance_rows_by_k(method: Any, questions: Sequence[Question], k_primes: Sequence[int],
                       show_progress: bool = False) -> dict[int, dict[str, np.ndarray]]:
    """Per K': per question, its runs' guidance rows (int32 [runs, G]) from the cached GNN rows."""
    pipeline = method.pipeline
    provider = pipeline.guidance
    runs_per_q = [method.runs[q.qid] for q in questions]
    result: dict[int, dict[str, np.ndarray]] = {}
    for k in sorted(set(k_primes)):
        if provider is not None:
            provider.with_k_prime(k).attach(list(questions), runs_per_q, show_progress=show_progress)
        result[k] = {q.qid: pipeline.guidance_rows(runs) for q, runs in zip(questions, runs_per_q, strict=True)}
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
    (``fingerprint``: the run's, default the method's; the point's values replace λ, τ, θ, K').
    ``points_per_call`` caps the grid points of one compiled call (None: all; 1: the point-by-point
    loop, for comparison); ``grid_batch`` how many of them are vmapped together inside it (-1: the
    backend's default, :func:`default_grid_batch`). Returns per-point summaries and timings."""
    if not points:
        raise StemError("the sweep grid is empty")
    if not questions:
        raise StemError("no questions to sweep: the selection is empty\n"
                        "  how to fix: check --hops, --limit, --subset and --split")
    out_dir = Path(out_dir)
    questions = list(questions)
    wanted = {q.qid for q in questions}
    base = method_fingerprint(method) if fingerprint is None else fingerprint
    with ExitStack() as stack:
        folders = [stack.enter_context(RunFolder.open(_point_dir(out_dir, p), point_fingerprint(base, p),
                                                      overwrite=overwrite, questions=questions, log=log))
                   for p in points]
        for point, folder in zip(points, folders, strict=True):
            (folder.path / "point.json").write_text(json.dumps(point.as_dict(), sort_keys=True) + "\n")
        finished = [set(folder.finished()) & wanted for folder in folders]
        done = sum(len(f) for f in finished)
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
        pipeline = method.pipeline
        timings = {"anchor": 0.0, "trace": 0.0, "answer": 0.0}
        calls = 0
        with progress(len(points) * len(questions), f"sweep {len(points)} points", "q", enabled=show_progress,
                      initial=done) as bar:
            for start in range(0, len(questions), chunk_size):
                chunk = questions[start : start + chunk_size]
                todo = [p for p in range(len(points)) if any(q.qid not in finished[p] for q in chunk)]
                if not todo:
                    continue
                chunk_runs = [run for q in chunk for run in method.runs[q.qid]]
                width = pipeline.shapes[True].guidance
                for first in range(0, len(todo), per_call):
                    part = todo[first : first + per_call]
                    grid = [points[p] for p in part]
                    guidance = np.full((len(part), len(chunk_runs), width), -1, np.int32)
                    for j, point in enumerate(grid):
                        if chunk_runs:
                            guidance[j] = np.concatenate([rows_by_k[point.k_prime][q.qid] for q in chunk])
                    outputs, spent = trace_grid(pipeline, chunk_runs, guidance, [g.hyper() for g in grid],
                                                grid_batch=grid_batch)
                    calls += 1
                    timings["anchor"] += spent["anchor"]
                    timings["trace"] += spent["trace"]
                    share = {"anchor": 1000 * spent["anchor"] / (len(chunk) * len(part)),
                             "trace": 1000 * spent["trace"] / (len(chunk) * len(part))}
                    answer_began = time.perf_counter()
                    for j, p in enumerate(part):
                        records, cursor = [], 0
                        for question in chunk:
                            mine = method.runs[question.qid]
                            outs = outputs[j][cursor : cursor + len(mine)]
                            cursor += len(mine)
                            if question.qid in finished[p]:
                                continue
                            retrieval = pipeline.retrieval(question, mine, outs, dict(share), points[p].hyper())
                            records.append(make_record(method.context, question, retrieval, method.name))
                            finished[p].add(question.qid)
                        folders[p].append(records)  # flushed and fsynced: a kill keeps it
                        bar.update(len(records))
                    timings["answer"] += time.perf_counter() - answer_began
    results = []
    for point in points:
        summary = score_predictions(_point_dir(out_dir, point) / "predictions.jsonl", wanted)
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

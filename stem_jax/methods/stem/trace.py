"""STEM's third stage: anchored runs -> traced bindings, at one or many hyper-parameter points.

:func:`trace` groups runs by (strategy, steps bucket) and traces them in fixed-size padded batches, one device
transfer per batch; Breadth runs that overflow climb the capacity ladder. One point is traced by the plain
kernel (:func:`~stem_jax.trace.tracer.trace_batch`, plain reference :mod:`stem_jax.trace.reference`); P > 1
points in one compiled call per batch (:func:`trace_grid_batch`), which gives every point what it alone gives.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.methods.stem.resources import StemResources
from stem_jax.methods.stem.types import STEP_BUCKETS, Anchored, Output, Run, Traced, run_buckets, steps_bucket
from stem_jax.ragged import pad_ragged
from stem_jax.trace.tracer import Hyper, TraceBatch, TracerShapes, fitting_levels, trace_batch


def default_grid_batch() -> int | None:
    """Grid points vmapped together inside the one compiled call: all of them (None) on an accelerator,
    1 on CPU. Under ``vmap`` the tracer's data-dependent ``lax.cond`` (buffer compaction) becomes a
    select that runs every block and its ``while_loop`` runs to the slowest point, which a CPU pays
    in full; there the points are scanned (``lax.map``) inside the same call instead."""
    return 1 if jax.default_backend() == "cpu" else None


@functools.partial(jax.jit, static_argnames=("shapes", "precision", "relation_bonus", "tau_admits", "direction",
                                             "used", "halt_overflowed", "grid_batch", "backend"))
def trace_grid_batch(kg: Any, batch: TraceBatch, hyper: Hyper, *, shapes: Any, precision: bool,
                     relation_bonus: bool = False, tau_admits: bool = True, direction: str = "undirected",
                     used: str = "run", halt_overflowed: bool = False, grid_batch: int | None = None,
                     backend: str = "auto") -> Any:
    """:func:`~stem_jax.trace.tracer.trace_batch` for P points in one compiled call: ``batch.anchor``/
    ``anchor_score`` [P, B], ``batch.guidance`` [P, B, G], ``hyper`` fields [P]; the KG and the plan fields
    are shared.

    ``grid_batch``: None vmaps all P points; k scans the points k at a time (``lax.map``; 1 = a
    plain scan, no batching of the tracer's control flow)."""
    def one(xs):
        anchor, score, guidance, h = xs
        return trace_batch(kg, batch._replace(anchor=anchor, anchor_score=score, guidance=guidance), h,
                           shapes=shapes, precision=precision, relation_bonus=relation_bonus, tau_admits=tau_admits,
                           direction=direction, used=used, halt_overflowed=halt_overflowed, backend=backend)

    xs = (batch.anchor, batch.anchor_score, batch.guidance, hyper)
    if grid_batch is None or grid_batch >= batch.anchor.shape[0]:
        return jax.vmap(one)(xs)
    if grid_batch == 1:
        return jax.lax.map(one, xs)
    return jax.lax.map(one, xs, batch_size=grid_batch)


def narrowed(output: Output, frontier: int) -> Output:
    """A run's host arrays traced at a larger frontier, cut to ``frontier`` bindings per slot: what the
    lower capacity gives when the run fits it (:func:`~stem_jax.trace.tracer.fitting_levels`); the columns cut are empty there."""
    cut = {k: v[..., :frontier] if k in ("nodes", "scores", "via", "parents") else v for k, v in output.items()}
    if (output["nodes"][..., frontier:] >= 0).any():
        raise AssertionError(f"a run that fits frontier {frontier} bound more nodes than that")
    return cut


def groups(res: StemResources, runs: Sequence[Run], buckets: np.ndarray | None = None,
           ) -> list[tuple[tuple[bool, int], list[int]]]:
    """Run indices grouped by (Precision?, steps bucket), in the order they are traced (``buckets``: the
    runs' :func:`~stem_jax.methods.stem.types.run_buckets`, when the caller has them)."""
    buckets = run_buckets(runs) if buckets is None else buckets
    precision = np.fromiter(map(res.is_precision, runs), bool, len(runs))
    key = precision * (STEP_BUCKETS[-1] + 1) + buckets  # sorts as (precision, bucket) tuples do
    order = np.argsort(key, kind="stable")
    starts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]]) if len(runs) else np.zeros(0, np.int64)
    bounds = [*starts.tolist(), len(runs)]
    return [((bool(precision[order[a]]), int(buckets[order[a]])), order[a:b].tolist())
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def make_batch(res: StemResources, runs: Sequence[Run], anchors: np.ndarray, anchor_scores: np.ndarray, size: int,
               bucket: int, guidance_rows: np.ndarray | None = None) -> TraceBatch:
    """One padded :class:`~stem_jax.trace.tracer.TraceBatch` of ``runs`` (host arrays)."""
    dim = res.kg.query_dim  # schema and KG triples share the encoder's space (the tracer projects compact rows)
    steps = np.full((size, bucket, 3), -1, np.int32)
    mask = np.zeros((size, bucket), bool)
    step_emb = np.zeros((size, bucket, dim), np.float32)
    anchor = np.full(size, -1, np.int32)
    anchor_score = np.zeros(size, np.float32)
    forward = np.ones((size, bucket), bool)
    if runs:
        # The live (run, step) cells of ``mask`` in row-major order are the runs' steps one after another, so
        # each field is one concatenation and one masked store for the batch, not a store per run.
        plans = [run.plan for run in runs]
        counts = np.fromiter((len(p.steps) for p in plans), np.int64, len(plans))
        if counts.max() > bucket:
            raise ValueError(f"a plan of {int(counts.max())} steps does not fit steps bucket {bucket}")
        steps[: len(runs)], mask[: len(runs)] = pad_ragged([p.steps for p in plans], -1, np.int32, width=bucket,
                                                           tail=(3,))
        # each plan's orientation() (its forward flags, all True when unknown), read off the tuples in one pass
        rows = [p.forward if p.forward is not None else (True,) * len(p.steps) for p in plans]
        if not np.array_equal(np.fromiter(map(len, rows), np.int64, len(rows)), counts):
            rows = [p.orientation() for p in plans]  # raises on the plan whose flags do not fit its steps
        forward[mask] = [f for row in rows for f in row]
        text_rows = res.text_rows
        texts = [text_rows[t] for p in plans for t in p.step_texts()]
        if texts:  # one gather for the batch, not a gather and copy per run
            step_emb[mask] = res.text_emb[texts]
    anchor[: len(runs)] = anchors[: len(runs)]
    anchor_score[: len(runs)] = anchor_scores[: len(runs)]
    guidance = np.full((size, res.shapes[True].guidance), -1, np.int32)
    if guidance_rows is not None:
        guidance[: len(runs)] = guidance_rows
    # Host arrays: the jitted tracer takes them in one transfer (not one jnp.asarray call per field).
    return TraceBatch(steps, mask, step_emb, anchor, anchor_score, guidance, forward)


def trace(res: StemResources, anchored: Anchored, *, grid_batch: int | None = -1) -> Traced:
    """Trace ``anchored``'s runs at each of its P points; returns, per point, per-run host arrays.

    P > 1 points run in one compiled call per batch (:func:`trace_grid_batch`, ``grid_batch`` points
    vmapped together, None: all, -1: :func:`default_grid_batch`).

    Breadth runs whose capacities overflowed are traced again higher up the capacity ladder, until
    they fit or the largest bucket (``engine.max_frontier``) is reached; each output's
    ``capacity`` says which frontier bucket it came from. A retry goes straight to the lowest
    level that holds the counts of the step that overflowed (``TraceOutput.need``): the levels
    between would overflow at that same step, so this is the result of climbing one level at a
    time, without those traces. With several points a retry traces the union of the points'
    overflowing runs, and each point keeps only the rows it needed (rows of a batch are independent).
    """
    runs, hypers = anchored.runs, anchored.hypers
    n_points = len(hypers)
    grid_batch = default_grid_batch() if grid_batch == -1 else grid_batch
    seconds = {"anchor": anchored.seconds, "trace": 0.0}
    outputs: list[list[Output | None]] = [[None] * len(runs) for _ in range(n_points)]
    if not runs or not n_points:
        return Traced(runs, hypers, [[] for _ in range(n_points)], seconds)
    traced = (hypers[0].traced() if n_points == 1 else
              Hyper(jnp.asarray([h.tau for h in hypers], jnp.float32), jnp.asarray([h.theta for h in hypers], jnp.float32)))
    buckets = run_buckets(runs)
    by_group = groups(res, runs, buckets)
    widest = res.note_buckets(runs, buckets)
    own_slots = (buckets + 1).tolist()  # slots of each run's own bucket: outputs are cut to them
    every_point = frozenset(range(n_points))
    ladders = {precision: res.ladder_for(precision) for (precision, _), _ in by_group}
    # per strategy: (ladder level, steps bucket) -> run -> the points that trace it there; each run starts at the
    # level its anchor's degree asks for, in the bucket a retry to that level would take
    waiting: dict[bool, dict[tuple[int, int], dict[int, set[int]]]] = {precision: {} for precision in ladders}
    for (precision, bucket), group in by_group:
        first = first_levels(res, anchored.entity[:, group], ladders[precision]).tolist()
        for i, level in zip(group, first, strict=True):
            key = (level, widest if level >= res.SHARED_BUCKET_LEVEL else bucket)
            waiting[precision].setdefault(key, {})[i] = set(every_point)
    for level in range(max(map(len, ladders.values()), default=0)):
        # every (strategy, steps bucket) group of a level is dispatched before any result is read: one wait per
        # level, not one per group, and the groups' batches run side by side
        levels = []
        for precision in sorted(ladders):
            ladder = ladders[precision]
            for bucket in sorted(b for lvl, b in list(waiting[precision]) if lvl == level):
                members = waiting[precision].pop((level, bucket))
                levels.append(_dispatch_level(res, anchored, members, level, bucket, ladder, precision, traced,
                                              n_points, grid_batch))
        if not levels:
            continue
        began = time.perf_counter()
        fetched = jax.device_get([pending for _, pending in levels])
        seconds["trace"] += sum(job.seconds for job, _ in levels) + time.perf_counter() - began
        for (job, _), host in zip(levels, fetched, strict=True):
            _collect_level(res, job, host, outputs, waiting[job.precision], widest, own_slots)
    return Traced(runs, hypers, outputs, seconds)  # type: ignore[arg-type]


def first_levels(res: StemResources, entity: np.ndarray, ladder: Sequence[TracerShapes]) -> np.ndarray:
    """Per run, the capacity-ladder level it is first traced at: the lowest whose capacities hold its anchor's degree
    (``entity``: int [P, R], each run's anchor at each point, -1 for none; the lowest such level over the points).

    A run's first step leaves its anchor alone, so it matches at most the anchor's incident triples: every level
    below overflows there whenever all of them qualify, which is what a Breadth run's first step mostly sees, and a
    run that starts at a level it would have fitted under is cut to what the lower level gives
    (:func:`~stem_jax.trace.tracer.fitting_levels`, :func:`narrowed`). Starting there spares the traces at the
    levels below, which would overflow and be thrown away, and the wait for each."""
    if entity.size == 0 or len(ladder) == 1:
        return np.zeros(entity.shape[1], np.int64)
    degree = np.where(entity >= 0, res.degree[np.maximum(entity, 0)], 0).reshape(-1)
    levels = fitting_levels(ladder, np.stack([degree, degree], axis=1)).reshape(entity.shape)
    return np.minimum(levels.min(axis=0), len(ladder) - 1)


class LevelJob(NamedTuple):
    """One ladder level's batches of one (strategy, steps bucket) group, dispatched and not read yet."""

    members: dict[int, set[int]]  # run index -> the points that trace it here
    chunks: list[list[int]]  # the run indices of each batch
    level: int
    bucket: int
    ladder: Sequence[TracerShapes]
    precision: bool
    seconds: float  # spent preparing and dispatching the batches


def _dispatch_level(res: StemResources, anchored: Anchored, members: dict[int, set[int]], level: int, bucket: int,
                    ladder: Sequence[TracerShapes], precision: bool, traced: Hyper, n_points: int,
                    grid_batch: int | None) -> tuple[LevelJob, list[Any]]:
    """Dispatch the batches that trace ``members`` (run index -> the points that need it) at one ladder level in
    steps bucket ``bucket``, for every point at once; returns the job and its device results (not waited for)."""
    runs, anchors, anchor_scores, guidance = anchored.runs, anchored.entity, anchored.score, anchored.guidance
    shapes = ladder[level]
    switches = res.tracer_switches()
    backend = res.config.tracer.backend
    # Padded to what the whole call needs, not this level's tail: a split-sized call then uses one batch
    # size per level (each new size is a jit trace and lowering, even with the compilation cache warm),
    # while a one-question call still gets the smallest batch.
    size = res.batch_size(max(res.batch[precision] >> level, 4), len(runs))
    order = sorted(members)
    chunks = [order[start : start + size] for start in range(0, len(order), size)]
    halt = level + 1 < len(ladder)
    began = time.perf_counter()
    # Every batch is dispatched before any result is read (JAX runs them asynchronously, the host prepares the
    # next batch meanwhile); the caller brings them all back in one transfer. Below the ladder's top a run that
    # overflows is traced again higher up, so it stops expanding at its first overflowing step (its later steps
    # would be thrown away).
    pending = []
    for chunk in chunks:
        batch = make_batch(res, [runs[i] for i in chunk], anchors[0, chunk], anchor_scores[0, chunk], size,
                           bucket, guidance[0, chunk])
        if n_points == 1:
            pending.append(res.sharding.trace(res.kg, batch, traced, shapes=shapes, precision=precision,
                                              halt_overflowed=halt, backend=backend, **switches))
            continue
        anchor = np.full((n_points, size), -1, np.int32)
        score = np.zeros((n_points, size), np.float32)
        rows = np.full((n_points, size, guidance.shape[2]), -1, np.int32)
        anchor[:, : len(chunk)] = anchors[:, chunk]
        score[:, : len(chunk)] = anchor_scores[:, chunk]
        rows[:, : len(chunk)] = guidance[:, chunk]
        pending.append(trace_grid_batch(res.kg, batch._replace(anchor=anchor, anchor_score=score, guidance=rows),
                                        traced, shapes=shapes, precision=precision, halt_overflowed=halt,
                                        grid_batch=grid_batch, backend=backend, **switches))
    return LevelJob(members, chunks, level, bucket, ladder, precision, time.perf_counter() - began), pending


def _collect_level(res: StemResources, job: LevelJob, fetched: list[Any], outputs: list[list[Output | None]],
                   waiting: dict[tuple[int, int], dict[int, set[int]]], widest: int, own_slots: Sequence[int]) -> None:
    """Read back ``job``'s batches (``fetched``: their host results): fitting runs go to ``outputs[point]`` (cut to
    ``own_slots[run]``, the slots of their own bucket), overflowing ones to ``waiting`` for a higher level."""
    members, level, bucket, ladder = job.members, job.level, job.bucket, job.ladder
    n_points = len(outputs)
    halt = level + 1 < len(ladder)
    for chunk, host in zip(job.chunks, fetched, strict=True):
        if n_points == 1:  # the plain kernel's [B, ...] arrays as a grid of one point (views)
            host = jax.tree.map(lambda x: x[None], host)
        fits_by_point = fitting_levels(ladder, host.need[:, : len(chunk)].reshape(-1, 2)).reshape(n_points, -1)
        # Python lists and per-point arrays read once per batch: the loop below runs once per run and point
        fits_rows, overflowed = fits_by_point.tolist(), (host.overflow[:, : len(chunk)] > 0).tolist()
        for p in range(n_points):
            nodes, scores, via, parents, overflow = (host.nodes[p], host.scores[p], host.via[p], host.parents[p],
                                                     host.overflow[p])
            fits_p, overflowed_p, outputs_p = fits_rows[p], overflowed[p], outputs[p]
            for row, i in enumerate(chunk):
                if n_points > 1 and p not in members[i]:
                    continue
                fits = fits_p[row]
                if overflowed_p[row] and halt:
                    # the levels between would overflow at the same step: straight to one that fits it
                    target = min(max(fits, level + 1), len(ladder) - 1)
                    shared = widest if target >= res.SHARED_BUCKET_LEVEL else bucket
                    waiting.setdefault((target, shared), {}).setdefault(i, set()).add(p)
                    continue
                own = own_slots[i]
                out = {"nodes": nodes[row, :own], "scores": scores[row, :own], "via": via[row, :own],
                       "parents": parents[row, :own], "overflow": overflow[row]}
                if not overflowed_p[row] and fits < level:  # the ladder would have stopped lower
                    out = narrowed(out, ladder[fits].frontier)
                out["capacity"] = ladder[min(fits, level)].frontier
                outputs_p[i] = out


class WarmShape(NamedTuple):
    """One compiled tracer shape: strategy (Precision?), steps bucket, capacity-ladder level, padded batch size."""

    precision: bool
    bucket: int
    level: int
    size: int


def warm_up_shapes(res: StemResources, step_buckets: Sequence[int], max_runs: int) -> list[WarmShape]:
    """Every tracer shape a :func:`trace` call of 1..``max_runs`` runs can reach, in compile order.

    For each (strategy in use, steps bucket): every capacity-ladder level (overflowing Breadth runs escalate
    one level per retry) at every padded batch size :func:`trace` can pick there
    (:meth:`StemResources.batch_size` of 1..``max_runs`` runs). The shapes for a smaller ``max_runs`` are a subset
    of those for a larger one, so a server can compile a one-question call's shapes first and the rest later."""
    modes = [False] if res.engine.strategy == "breadth" else [True, False]
    shapes = []
    for precision in modes:
        for bucket in sorted({steps_bucket(b) for b in step_buckets}):
            for level in range(len(res.ladder_for(precision))):
                capacity = max(res.batch[precision] >> level, 4)
                for size in sorted({res.batch_size(capacity, n) for n in range(1, max_runs + 1)}):
                    shapes.append(WarmShape(precision, bucket, level, size))
    return shapes


def reachable(res: StemResources, shape: WarmShape) -> bool:
    """Whether a later :func:`trace` call can still use ``shape``: from :attr:`StemResources.SHARED_BUCKET_LEVEL`
    up, retries trace in the widest steps bucket noted so far (:meth:`StemResources.note_buckets`, which only
    grows), so a narrower bucket there is never traced again."""
    return shape.level < res.SHARED_BUCKET_LEVEL or shape.bucket >= res.shared_bucket


def compile_shape(res: StemResources, shape: WarmShape) -> None:
    """Compile (or read back from the persistent compilation cache) the tracer of ``shape`` by tracing an
    all-padding batch (no anchor: nothing to expand), which costs only the compile. Reads ``res`` only, so a
    server may call it on another thread while requests are answered."""
    ladder = res.ladder_for(shape.precision)
    empty = np.zeros(0, np.int32)
    batch = make_batch(res, [], empty, empty.astype(np.float32), shape.size, shape.bucket)
    jax.block_until_ready(res.sharding.trace(
        res.kg, batch, res.hyper.traced(), shapes=ladder[shape.level], precision=shape.precision,
        halt_overflowed=shape.level + 1 < len(ladder), backend=res.config.tracer.backend, **res.tracer_switches()))


def warm_up(res: StemResources, step_buckets: Sequence[int], max_runs: int) -> int:
    """Compile every tracer a call of at most ``max_runs`` runs can reach (:func:`warm_up_shapes`, less those
    no call can use any more: :func:`reachable`), so warm calls never compile. Returns the number of tracer
    shapes visited (a shape compiled before is not compiled again)."""
    visited = 0
    for shape in warm_up_shapes(res, step_buckets, max_runs):
        if reachable(res, shape):
            compile_shape(res, shape)
            visited += 1
    return visited

"""STEM's pipeline: plan -> ground -> encode -> anchor -> trace -> answers, for one dataset.

:class:`StemPipeline` holds the device-side KG and the compiled tracers. It has one way to trace,
:meth:`StemPipeline.trace_points` (``trace_points(runs, hypers)``: the traced hyper-parameters λ, τ, θ
are an argument, one point or a stacked axis of them, never patched from outside; ``trace(runs, hyper)``
is one point), and one way to turn questions' traces into
:class:`~stem_jax.methods.base.Retrieval` s, :meth:`StemPipeline.retrievals`. The STEM method, its
sweep, calibration, guidance ablation and the benchmarks all call these two, so a sweep point, an
ablation row and ``stem-jax eval`` with the same flags are the same computation.

Within a call, runs (question x plan x anchor) are grouped by (strategy, steps bucket) and traced
in fixed-size padded batches, one device transfer per batch; Breadth runs that overflow climb the
capacity ladder.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels.answers import pack_runs, rank_answers, ranked_lists
from stem_jax.answer.rank import ChunkAnswers, answer_depths
from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import keyed_cache_path, open_or_build
from stem_jax.errors import UNWRITABLE, StemError
from stem_jax.eval.records import make_record
from stem_jax.eval.sharding import local_sharding
from stem_jax.kg.embeddings import KGEmbeddings
from stem_jax.kg.index import KGIndex
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.methods.stem.settings import EffectiveSettings, effective_settings
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, ground, match_anchor
from stem_jax.ragged import pad_ragged
from stem_jax.trace.tracer import (
    EXACT,
    FOLDED,
    Hyper,
    KGArrays,
    TraceBatch,
    TracerShapes,
    capacity_ladder,
    fitting_levels,
    trace_batch,
)
from stem_jax.trace.types import prune_unreached

STEP_BUCKETS = (1, 2, 4, 8, 16)
OUTPUT_FIELDS = ("nodes", "scores", "via", "parents", "overflow")

Planner = Callable[[Question, KGIndex], list[SchemaGraph]]


@dataclasses.dataclass
class Run:
    question: int  # index into the chunk
    plan: GroundedPlan
    anchor_entity: int  # KG id of the question entity the run starts from (-1: only its name is known)
    guidance: np.ndarray | None = None  # int32 guidance entity ids (set by a guidance provider)
    beam: int = 0  # position of the run's schema graph in the planner's beam
    beam_prob: float = 1.0  # the planner's probability for that schema graph (1.0 when it gives none)
    mention: str = ""  # the topic's name as the question writes it
    named: tuple[tuple[int, int], ...] = ()  # (KG id, level) the question names: EXACT id, FOLDED name twins

    @property
    def bucket(self) -> int:
        """The steps bucket its plan is padded to in a compiled batch."""
        return steps_bucket(self.plan.num_steps)


@dataclasses.dataclass(frozen=True)
class StemHyper:
    """The traced hyper-parameters of one STEM configuration: λ (anchoring), τ and θ (tracing).

    They change no shape, so every value reuses the compiled tracers; τ also widens the answer
    ranking's beam gap on guided runs (:meth:`StemPipeline.ranking_gap`)."""

    lam: float
    tau: float
    theta: float

    def traced(self) -> Hyper:
        return Hyper(jnp.float32(self.tau), jnp.float32(self.theta))

    def replace(self, **changes: float) -> StemHyper:
        return dataclasses.replace(self, **{k: float(v) for k, v in changes.items()})

    def as_dict(self) -> dict[str, float]:
        return {"lam": self.lam, "tau": self.tau, "theta": self.theta}


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


def steps_bucket(n_steps: int) -> int:
    for bucket in STEP_BUCKETS:
        if n_steps <= bucket:
            return bucket
    raise ValueError(f"schema graph with {n_steps} steps exceeds the largest bucket {STEP_BUCKETS[-1]}")


def run_buckets(runs: Sequence[Run]) -> np.ndarray:
    """int64 [len(runs)]: each run's :attr:`Run.bucket`, in one pass (:func:`steps_bucket` per run, vectorised)."""
    counts = np.fromiter((len(run.plan.steps) for run in runs), np.int64, len(runs))
    at = np.searchsorted(STEP_BUCKETS, counts)
    if len(at) and at.max() >= len(STEP_BUCKETS):
        steps_bucket(int(counts.max()))  # raises with the per-run message
    return np.asarray(STEP_BUCKETS, np.int64)[at]


def fold_name(name: str) -> str:
    """Case- and accent-insensitive form of an entity name (what an uncased encoder cannot tell apart)."""
    decomposed = unicodedata.normalize("NFKD", name)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold().strip()


def narrowed(output: dict[str, np.ndarray], frontier: int) -> dict[str, np.ndarray]:
    """A run's host arrays traced at a larger frontier, cut to ``frontier`` bindings per slot: what the
    lower capacity gives when the run fits it (:func:`~stem_jax.trace.tracer.fitting_levels`); the columns cut are empty there."""
    cut = {k: v[..., :frontier] if k in ("nodes", "scores", "via", "parents") else v for k, v in output.items()}
    if (output["nodes"][..., frontier:] >= 0).any():
        raise AssertionError(f"a run that fits frontier {frontier} bound more nodes than that")
    return cut


class StemPipeline:
    """The device-side KG and compiled tracers of one dataset; plans, traces and answers questions."""

    NAMED_WIDTH = 4  # named anchor candidates per run on device
    MIN_BATCH = 4  # a question's beam (B=4) fills it; more padded rows would slow single-question tracing

    def __init__(self, dataset: Dataset, index: KGIndex, embeddings: KGEmbeddings, encoder: TextEncoder,
                 config: StemConfig, *, cache_dir: Path | None = None, guidance: Any = None):
        """``guidance``: optional provider with ``attach(questions, runs_per_question, show_progress=)``
        that sets ``run.guidance`` (e.g. :class:`stem_jax.gnn.provider.GNNGuidance`); None = no guidance."""
        self.dataset = dataset
        self.guidance = guidance
        self.index = index
        self.embeddings = embeddings
        self.encoder = encoder
        self.config = config
        self.context = MethodContext(dataset, index, embeddings, encoder, config, guidance=guidance)
        self.settings: EffectiveSettings = effective_settings(config, embeddings)
        self.engine = self.settings.engine
        self.theta = self.settings.theta
        self.calibration = self.settings.calibration
        self.hyper = StemHyper(float(config.tracer.lam), float(config.tracer.tau), float(self.theta))
        self.cache_dir = cache_dir
        self.names = dataset.entity_names or {}
        self.mediators = self.context.mediators  # walked through, never returned
        self._never_device: jax.Array | None = None  # the mediators on device (rank_on_device)
        self.answer_scorer: Any = None  # the KG's learned answer scorer; StemMethod sets it from its context
        self.kg = KGArrays.from_index(index, embeddings.trace_rows())  # float16, or compact (encoder.row_format)
        # float32 on device once: anchoring reads the whole table for every batch
        self.entity_emb = jnp.asarray(np.asarray(embeddings.entities.array, dtype=np.float32))
        # batches sharded over the local devices, KG and entity table replicated (identity on 1 device)
        self.sharding = local_sharding()
        self.kg, self.entity_emb = self.sharding.replicate((self.kg, self.entity_emb))
        if config.engine.kg_shards > 1:  # the KG cut over devices, each scoring the triples it holds
            from stem_jax.shard.trace import sharded_tracing

            self.sharding = sharded_tracing(index, embeddings.trace_rows(), config.engine.kg_shards, self.sharding)
        engine = config.engine
        node_matches = config.tracer.breadth_cap or engine.node_matches
        self.shapes = {
            True: TracerShapes(frontier=1, node_matches=1, window=engine.window, guidance=engine.guidance),
            False: TracerShapes(frontier=engine.frontier, node_matches=node_matches, window=engine.window,
                                guidance=engine.guidance),
        }
        # Breadth runs that overflow are re-traced one bucket up (2x frontier and per-node matches),
        # in batches halved per bucket so the padded work per batch stays about the same.
        self.ladder = capacity_ladder(self.shapes[False], max(engine.max_frontier, engine.frontier))
        self.shared_bucket = 1  # steps bucket of every retry from SHARED_BUCKET_LEVEL up (see note_buckets)
        self.batch = {True: self.sharding.round_up(engine.batch_precision),
                      False: self.sharding.round_up(engine.batch_breadth)}
        self.text_rows: dict[str, int] = {}
        self.text_emb: np.ndarray | None = None
        self.text_compactions = 0  # times a method dropped unused online rows of the table (StemMethod._compact)
        self._folded: dict[str, list[int]] | None = None

    def display(self, entity: str) -> str:
        return self.names.get(entity, entity)

    def with_conventions(self, **changes: Any) -> StemPipeline:
        """This pipeline (device arrays, compiled tracers, schema-text embeddings shared) with other KG
        conventions (``direction``, ``used_triples``, ``exclude_topic``): a calibration sweep's point."""
        other = copy.copy(self)
        other.engine = dataclasses.replace(self.engine, **changes)
        sources = {**self.settings.conventions_source, **dict.fromkeys(changes, "sweep")}
        other.settings = dataclasses.replace(self.settings, engine=other.engine, conventions_source=sources)
        return other

    def resolve(self, hyper: StemHyper | None) -> StemHyper:
        return self.hyper if hyper is None else hyper

    # ----- planning and text embeddings -------------------------------------------------------
    def plan_all(self, questions: Sequence[Question], planner: Planner) -> tuple[list[list[Run]], dict[str, int]]:
        """Runs per question, and counts of questions/plans that produced none (with reasons).

        ``planner`` returns schema graphs in beam order, either plain :class:`SchemaGraph` or
        :class:`~stem_jax.plan.base.ScoredSchema` (whose probability the beam ranking uses); a
        planner callable with a ``beams`` dict (qid -> scored beam) supplies the scores too.

        A schema graph that names one question entity is traced from each topic entity it matches
        (as before). One that names several (a conjunctive question's tree) is traced once, from the
        first of them, and the others become checked constants of the plan (Algorithm 1: one anchor,
        the other question entities must be reached; :func:`~stem_jax.trace.types.prune_unreached`).
        """
        runs: list[list[Run]] = []
        skipped: dict[str, int] = defaultdict(int)
        scored_beams = getattr(planner, "beams", None)
        for qi, question in enumerate(questions):
            mine = []
            entries = planner(question, self.index)
            if isinstance(scored_beams, dict) and question.qid in scored_beams:
                entries = scored_beams[question.qid]
            if not entries:
                skipped["no plan"] += 1
            for beam, entry in enumerate(entries):
                schema = getattr(entry, "schema", entry)
                prob = float(getattr(entry, "score", 1.0 / (beam + 1)))
                matched = []  # (topic, schema node, exact id, named candidates)
                for topic in question.topic_entities:
                    anchor, named = self._named_entities(topic)
                    if anchor < 0 and not named:
                        skipped["topic entity not in KG"] += 1
                        continue
                    # a plan may name the topic by its KG id (an oracle over opaque ids) or by the
                    # display name the question uses (every other planner): the id, when named, is exact
                    anchor_name = (topic if topic in schema.constants()
                                   else match_anchor(schema, self.display(topic)))
                    if anchor_name is None:
                        skipped["no schema node matches the topic entity"] += 1
                        continue
                    matched.append((topic, anchor_name, anchor, named))
                if len({m[1] for m in matched}) > 1:  # several question entities in one tree: one anchor
                    first = matched[0]
                    entity_of = {name: anchor for _, name, anchor, _ in matched[1:] if name != first[1]}
                    matched = [first]
                else:
                    entity_of = {}
                for topic, anchor_name, anchor, named in matched:
                    mine.append(Run(qi, ground(schema, anchor_name, self.index, entity_of), anchor, beam=beam,
                                    beam_prob=prob, mention=self.display(topic), named=named))
            runs.append(mine)
        self.note_buckets(run for mine in runs for run in mine)
        return runs, dict(skipped)

    def note_buckets(self, runs: Iterable[Run], buckets: np.ndarray | None = None) -> int:
        """Widen :attr:`shared_bucket` to the steps bucket of ``runs``' longest plan; returns it (``buckets``: the
        runs' :func:`run_buckets`, when the caller has them).

        Planning a split notes all its runs at once, so every call of an eval shares one bucket above
        :attr:`SHARED_BUCKET_LEVEL`, whatever the hops of the chunk."""
        buckets = run_buckets(list(runs)) if buckets is None else buckets
        self.shared_bucket = max(self.shared_bucket, int(buckets.max(initial=1)))
        return self.shared_bucket

    def _named_entities(self, topic: str) -> tuple[int, tuple[tuple[int, int], ...]]:
        """(exact KG id or -1, named anchor candidates) for a topic entity the question names.

        With ``engine.exact_anchor`` the topic's own id is the EXACT candidate; without an id, KG
        entities whose name equals the topic's up to case and accents are FOLDED candidates.
        """
        exact = self.index.entity_ids.get(topic, -1)
        if not self.engine.exact_anchor:
            return exact, ()
        if exact >= 0:
            return exact, ((exact, EXACT),)
        if self._folded is None:
            self._folded = defaultdict(list)
            for i, entity in enumerate(self.index.entities):
                self._folded[fold_name(self.display(entity))].append(i)
        twins = self._folded.get(fold_name(self.display(topic)), [])
        return -1, tuple((i, FOLDED) for i in twins[: self.NAMED_WIDTH - 1])

    def embed_texts(self, texts: Sequence[str], show_progress: bool) -> None:
        """Embed schema-triple texts once; cached on disk (resumable) when a cache dir is set."""
        unique = sorted(set(texts))
        matrix = None
        if self.cache_dir is not None:
            # keyed by the encoder too: another model's (or max_length's) table sits beside it instead of clashing
            folder = keyed_cache_path(self.cache_dir, "schema-texts", unique, self.encoder)
            try:
                table = open_or_build(folder, unique, self.encoder, self.config.encoder.chunk_rows,
                                      progress=show_progress, desc="encode schema triples")
                matrix = table.array
            except OSError as err:
                if err.errno not in UNWRITABLE:
                    raise
                # A read-only cache (a shared or mounted one) still answers: these texts are few and
                # cheap next to the KG tables, so they are encoded in memory instead of failing the run.
                print(f"warning: schema-text cache {folder} is not writable ({err.strerror}); encoding "
                      f"{len(unique)} texts in memory", file=sys.stderr)
        if matrix is None:
            matrix = self.encoder.encode(unique).astype(np.float16)
        self.text_rows = {t: i for i, t in enumerate(unique)}
        self.text_emb = np.asarray(matrix, dtype=np.float32)

    def step_embeddings(self, run: Run) -> np.ndarray:
        """float32 [steps, d]: the embeddings of ``run``'s schema-triple texts."""
        return self.text_emb[[self.text_rows[t] for t in run.plan.step_texts()]]

    # ----- tracing ----------------------------------------------------------------------------
    def is_precision(self, run: Run) -> bool:
        """Whether ``run`` traces with Precision (the plan says so and ``engine.strategy=planner``)."""
        return run.plan.schema.strategy == "Precision" and self.engine.strategy == "planner"

    def groups(self, runs: Sequence[Run], buckets: np.ndarray | None = None,
               ) -> list[tuple[tuple[bool, int], list[int]]]:
        """Run indices grouped by (Precision?, steps bucket), in the order they are traced (``buckets``: the
        runs' :func:`run_buckets`, when the caller has them)."""
        buckets = run_buckets(runs) if buckets is None else buckets
        precision = np.fromiter(map(self.is_precision, runs), bool, len(runs))
        key = precision * (STEP_BUCKETS[-1] + 1) + buckets  # sorts as (precision, bucket) tuples do
        order = np.argsort(key, kind="stable")
        starts = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]]) if len(runs) else np.zeros(0, np.int64)
        bounds = [*starts.tolist(), len(runs)]
        return [((bool(precision[order[a]]), int(buckets[order[a]])), order[a:b].tolist())
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def ladder_for(self, precision: bool) -> list[TracerShapes]:
        return [self.shapes[True]] if precision else self.ladder

    def trace(self, runs: Sequence[Run], hyper: StemHyper | None = None,
              ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Anchor and trace ``runs`` at ``hyper`` (default: the configured λ, τ and effective θ);
        returns per-run host arrays and stage seconds: :meth:`trace_points` at one point."""
        outputs, timings = self.trace_points(runs, [self.resolve(hyper)])
        return outputs[0], timings

    def trace_points(self, runs: Sequence[Run], hypers: Sequence[StemHyper], guidance: np.ndarray | None = None, *,
                     grid_batch: int | None = -1) -> tuple[list[list[dict[str, np.ndarray]]], dict[str, float]]:
        """Anchor and trace ``runs`` at each of the P points ``hypers`` (a stacked hyper-parameter axis: a
        sweep's grid, an ablation's rows); returns, per point, per-run host arrays, and stage seconds.

        ``guidance``: int32 [P, R, G], each point's guidance rows (a sweep's K' values); default the runs'
        own for every point. Each point is anchored by :meth:`anchor` at its λ. One point is traced by the
        plain kernel; P > 1 in one compiled call per batch (:func:`trace_grid_batch`, ``grid_batch`` points
        vmapped together, None: all, -1: :func:`default_grid_batch`), which gives every point what it alone gives.

        Breadth runs whose capacities overflowed are traced again higher up the capacity ladder, until
        they fit or the largest bucket (``engine.max_frontier``) is reached; each output's
        ``capacity`` says which frontier bucket it came from. A retry goes straight to the lowest
        level that holds the counts of the step that overflowed (``TraceOutput.need``): the levels
        between would overflow at that same step, so this is the result of climbing one level at a
        time, without those traces. With several points a retry traces the union of the points'
        overflowing runs, and each point keeps only the rows it needed (rows of a batch are independent).
        """
        n_points = len(hypers)
        grid_batch = default_grid_batch() if grid_batch == -1 else grid_batch
        timings = {"anchor": 0.0, "trace": 0.0}
        outputs: list[list[dict[str, np.ndarray] | None]] = [[None] * len(runs) for _ in range(n_points)]
        if not runs or not n_points:
            return [[] for _ in range(n_points)], timings
        if guidance is None:
            own = self.guidance_rows(runs)
            guidance = np.broadcast_to(own, (n_points, *own.shape))
        anchors = np.zeros((n_points, len(runs)), np.int32)
        anchor_scores = np.zeros((n_points, len(runs)), np.float32)
        for p, hyper in enumerate(hypers):
            anchors[p], anchor_scores[p] = self.anchor(runs, guidance[p], timings, lam=hyper.lam)
        traced = (hypers[0].traced() if n_points == 1 else
                  Hyper(jnp.asarray([h.tau for h in hypers], jnp.float32), jnp.asarray([h.theta for h in hypers], jnp.float32)))
        buckets = run_buckets(runs)
        groups = self.groups(runs, buckets)
        widest = self.note_buckets(runs, buckets)
        own_slots = (buckets + 1).tolist()  # slots of each run's own bucket: outputs are cut to them
        every_point = frozenset(range(n_points))
        for precision in sorted({precision for (precision, _), _ in groups}):
            ladder = self.ladder_for(precision)
            # (ladder level, steps bucket) -> run -> the points that trace it there
            waiting: dict[tuple[int, int], dict[int, set[int]]] = {
                (0, bucket): {i: set(every_point) for i in group} for (p, bucket), group in groups if p == precision}
            for level in range(len(ladder)):
                for bucket in sorted(b for lvl, b in list(waiting) if lvl == level):
                    members = waiting.pop((level, bucket))
                    self._trace_level(runs, members, level, bucket, ladder, precision, anchors, anchor_scores,
                                      guidance, traced, timings, outputs, waiting, widest, grid_batch, own_slots)
        return outputs, timings  # type: ignore[return-value]

    # From this ladder level up, retried runs of every steps bucket share the widest bucket planned so far
    # (note_buckets): few runs overflow that far, and each (bucket, level) shape is a jit trace and lowering
    # per process. A plan's padding steps are skipped, and its outputs are cut back to its own bucket's
    # slots, so nothing else changes.
    SHARED_BUCKET_LEVEL = 2

    def _trace_level(self, runs: Sequence[Run], members: dict[int, set[int]], level: int, bucket: int,
                     ladder: Sequence[TracerShapes], precision: bool, anchors: np.ndarray, anchor_scores: np.ndarray,
                     guidance: np.ndarray, traced: Hyper, timings: dict[str, float],
                     outputs: list[list[dict[str, np.ndarray] | None]],
                     waiting: dict[tuple[int, int], dict[int, set[int]]], widest: int, grid_batch: int | None,
                     own_slots: Sequence[int]) -> None:
        """Trace ``members`` (run index -> the points that need it) at one ladder level in steps bucket
        ``bucket``, for every point at once; fitting runs go to ``outputs[point]`` (cut to ``own_slots[run]``, the
        slots of their own bucket), overflowing ones to ``waiting`` for a higher level."""
        shapes = ladder[level]
        n_points = len(outputs)
        # Padded to what the whole call needs, not this level's tail: a split-sized call then uses one batch
        # size per level (each new size is a jit trace and lowering, even with the compilation cache warm),
        # while a one-question call still gets the smallest batch.
        size = self._fit(max(self.batch[precision] >> level, 4), len(runs))
        order = sorted(members)
        chunks = [order[start : start + size] for start in range(0, len(order), size)]
        halt = level + 1 < len(ladder)
        began = time.perf_counter()
        # Every batch of the level is dispatched before any result is read (JAX runs them
        # asynchronously, the host prepares the next batch meanwhile), then one transfer brings
        # them all back. Below the ladder's top a run that overflows is traced again higher up, so it
        # stops expanding at its first overflowing step (its later steps would be thrown away).
        pending = []
        for chunk in chunks:
            batch = self.trace_batch([runs[i] for i in chunk], anchors[0, chunk], anchor_scores[0, chunk], size,
                                     bucket, guidance[0, chunk])
            if n_points == 1:
                pending.append(self.sharding.trace(self.kg, batch, traced, shapes=shapes, precision=precision,
                                                   halt_overflowed=halt, backend=self.config.tracer.backend,
                                                   **self.tracer_switches()))
                continue
            anchor = np.full((n_points, size), -1, np.int32)
            score = np.zeros((n_points, size), np.float32)
            rows = np.full((n_points, size, guidance.shape[2]), -1, np.int32)
            anchor[:, : len(chunk)] = anchors[:, chunk]
            score[:, : len(chunk)] = anchor_scores[:, chunk]
            rows[:, : len(chunk)] = guidance[:, chunk]
            pending.append(trace_grid_batch(self.kg, batch._replace(anchor=anchor, anchor_score=score, guidance=rows),
                                            traced, shapes=shapes, precision=precision, halt_overflowed=halt,
                                            grid_batch=grid_batch, backend=self.config.tracer.backend,
                                            **self.tracer_switches()))
        fetched = jax.device_get(pending)
        timings["trace"] += time.perf_counter() - began
        for chunk, host in zip(chunks, fetched, strict=True):
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
                        shared = widest if target >= self.SHARED_BUCKET_LEVEL else bucket
                        waiting.setdefault((target, shared), {}).setdefault(i, set()).add(p)
                        continue
                    own = own_slots[i]
                    out = {"nodes": nodes[row, :own], "scores": scores[row, :own], "via": via[row, :own],
                           "parents": parents[row, :own], "overflow": overflow[row]}
                    if not overflowed_p[row] and fits < level:  # the ladder would have stopped lower
                        out = narrowed(out, ladder[fits].frontier)
                    out["capacity"] = ladder[min(fits, level)].frontier
                    outputs_p[i] = out

    def warm_up(self, step_buckets: Sequence[int], max_runs: int) -> int:
        """Compile every tracer a call of at most ``max_runs`` runs can reach, so warm calls never compile.

        For each (strategy in use, steps bucket) that is every capacity-ladder level (overflowing
        Breadth runs escalate one level per retry) at every padded batch size :meth:`trace`
        can pick there (:meth:`_fit` of 1..``max_runs`` runs). Traces all-padding batches (no
        anchor: nothing to expand), which costs only the compile. Returns the number of tracer
        shapes visited (a shape compiled before is not compiled again). With answers ranked on the
        device (:meth:`answers_on_device`), also compiles the ranking of one question's beam."""
        modes = [False] if self.engine.strategy == "breadth" else [True, False]
        visited = 0
        traced = self.hyper.traced()
        for precision in modes:
            for bucket in sorted({steps_bucket(b) for b in step_buckets}):
                for level, shapes in enumerate(self.ladder_for(precision)):
                    capacity = max(self.batch[precision] >> level, 4)
                    for size in sorted({self._fit(capacity, n) for n in range(1, max_runs + 1)}):
                        empty = np.zeros(0, np.int32)
                        batch = self.trace_batch([], empty, empty.astype(np.float32), size, bucket)
                        jax.block_until_ready(self.sharding.trace(
                            self.kg, batch, traced, shapes=shapes, precision=precision,
                            halt_overflowed=level + 1 < len(self.ladder_for(precision)),
                            backend=self.config.tracer.backend, **self.tracer_switches()))
                        visited += 1
        if self.answers_on_device():  # the ranking kernel's shape for up to one beam of runs per call
            packed = pack_runs(1, [], [], np.zeros((0, 5)), **self.DEVICE_PADDING)
            rank_answers(packed, self._never(), n_questions=1, rule=self.engine.rank, cut=self.engine.answer_cut,
                         k=self.DEVICE_ANSWERS, min_beams=self.config.planner.beam)
        return visited

    def tracer_switches(self) -> dict[str, bool | str]:
        """The tracer's static switches as this run's effective engine sets them: the relation bonus,
        whether τ counts in Breadth's θ test, and the KG conventions (direction, used-triple rule).
        Every caller of the jit tracer (sweep grids included) and the reference's ``TraceOptions`` take
        them from here, so no tool traces under other rules than ``eval``."""
        engine = self.engine
        return {"relation_bonus": engine.relation_bonus, "tau_admits": engine.guidance_admits,
                "direction": engine.direction, "used": engine.used_triples}

    def _fit(self, capacity: int, n: int) -> int:
        """Padded batch size for ``n`` runs: the configured ``capacity``, or the next power of two
        (at least ``MIN_BATCH``) when fewer runs are waiting, so a single question does not pay for a
        full batch. Powers of two keep compiles few; below 4 rows XLA's CPU dot switches kernels and
        the last float bit of a score can change, so batches never go below 4."""
        small = max(self.MIN_BATCH, 1 << max(n - 1, 0).bit_length())
        return self.sharding.round_up(min(capacity, small))

    def guidance_rows(self, runs: Sequence[Run]) -> np.ndarray:
        """int32 [len(runs), G]: each run's guidance entity ids, -1 padded."""
        width = self.shapes[True].guidance
        rows = np.full((len(runs), width), -1, np.int32)
        for i, run in enumerate(runs):
            if run.guidance is None:
                continue
            if len(run.guidance) > width:
                raise StemError(f"a run has {len(run.guidance)} guidance entities but engine.guidance={width}\n"
                                f"  how to fix: pass --engine.guidance={1 << (len(run.guidance) - 1).bit_length()}")
            rows[i, : len(run.guidance)] = run.guidance
        return rows

    def anchor(self, runs: Sequence[Run], guidance_rows: np.ndarray, timings: dict[str, float], *,
               lam: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Anchor every run (eqs. 8-11, 15) at λ=``lam`` (default: the configured λ); named topic
        entities first (see :func:`~stem_jax.trace.tracer.anchor_batch`)."""
        lam = self.hyper.lam if lam is None else lam
        anchors = np.zeros(len(runs), np.int32)
        scores = np.zeros(len(runs), np.float32)
        began = time.perf_counter()
        # A run whose topic id the question names is anchored there whatever the cosine top-N holds
        # (anchor_batch: the highest level present wins, and top-N entries have the lowest), so it
        # needs no pass over the entity table; only the rest go to the device.
        found, exact, boosted = self.exact_anchors(runs, guidance_rows, lam)
        anchors[found], scores[found] = exact[found], boosted[found]
        rest = np.flatnonzero(~found).tolist()
        if rest:
            self._anchor_on_device([runs[i] for i in rest], guidance_rows[rest], anchors, scores, np.asarray(rest), lam)
        timings["anchor"] += time.perf_counter() - began
        return anchors, scores

    def exact_anchor(self, run: Run, guidance_row: np.ndarray, lam: float | None = None,
                     ) -> tuple[int, np.float32] | None:
        """(anchor, score) of a run that names its topic's KG id (level ``EXACT``), else None.

        The host form of :func:`~stem_jax.trace.tracer.anchor_batch` for that case: among the
        EXACT candidates (cosine 1), the first with the largest λ-boosted score; entries of lower
        levels (folded twins, the cosine top-N) cannot win, so the result is the same bit for bit."""
        named = run.named[: self.NAMED_WIDTH]
        exact = [entity for entity, level in named if level == EXACT and entity >= 0]
        if not exact:
            return None
        lam32 = np.float32(self.hyper.lam if lam is None else lam)
        guided = set(guidance_row[guidance_row >= 0].tolist())
        boosted = [np.float32(1.0) * (lam32 if entity in guided else np.float32(1.0)) for entity in exact]
        best = int(np.argmax(boosted))
        return exact[best], boosted[best]

    def named_rows(self, runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
        """int32 [len(runs), NAMED_WIDTH] each: the runs' named anchor candidates (KG ids, -1 padded) and their
        levels (0 padded), as :meth:`anchor_inputs` lays them out."""
        pairs, live = pad_ragged([run.named[: self.NAMED_WIDTH] for run in runs], -1, np.int64,
                                 width=self.NAMED_WIDTH, tail=(2,))
        return pairs[..., 0].astype(np.int32), np.where(live, pairs[..., 1], 0).astype(np.int32)

    def exact_anchors(self, runs: Sequence[Run], guidance_rows: np.ndarray, lam: float | None = None,
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`exact_anchor` of every run at once: (bool [R] whether the run has one, int32 [R] anchor,
        float32 [R] score; anchor and score meaningful where it has one)."""
        named, level = self.named_rows(runs)
        candidate = (level == EXACT) & (named >= 0)
        lam32 = np.float32(self.hyper.lam if lam is None else lam)
        guided = np.zeros(named.shape, bool)
        if guidance_rows.size and (guidance_rows >= 0).any():
            live = np.where(guidance_rows >= 0, guidance_rows, -2)  # -2 matches no candidate (padding is -1)
            guided = (named[:, :, None] == live[:, None, :]).any(-1)
        boosted = np.float32(1.0) * np.where(guided, lam32, np.float32(1.0)).astype(np.float32)
        # np.argmax over the candidates alone is the first largest of them: the others sit below every score
        best = np.argmax(np.where(candidate, boosted, -np.inf), axis=1)
        rows = np.arange(len(runs))
        return candidate.any(1), named[rows, best], boosted[rows, best]

    def mention_rows(self, runs: Sequence[Run]) -> dict[str, np.ndarray]:
        """Encoder embeddings of the mentions of runs whose topic is known only by name (eq. 8)."""
        unknown = sorted({r.mention for r in runs if r.anchor_entity < 0})
        if not unknown:
            return {}
        return dict(zip(unknown, np.asarray(self.encoder.encode(unknown), dtype=np.float32), strict=True))

    def anchor_inputs(self, part: Sequence[Run], size: int, mention_rows: dict[str, np.ndarray],
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded anchoring inputs of ``part``: mention vectors [size, d], named ids and levels [size, W]."""
        ids = np.zeros(size, np.int64)
        ids[: len(part)] = [max(r.anchor_entity, 0) for r in part]
        mentions = np.array(self.entity_emb[jnp.asarray(ids)], dtype=np.float32)  # writable copy
        named = np.full((size, self.NAMED_WIDTH), -1, np.int32)
        level = np.zeros((size, self.NAMED_WIDTH), np.int32)
        named[: len(part)], level[: len(part)] = self.named_rows(part)
        for row, run in enumerate(part):
            if run.anchor_entity < 0:
                mentions[row] = mention_rows[run.mention]
        return mentions, named, level

    def _anchor_on_device(self, runs: Sequence[Run], guidance_rows: np.ndarray, anchors: np.ndarray,
                          scores: np.ndarray, where: np.ndarray, lam: float) -> None:
        """:func:`~stem_jax.trace.tracer.anchor_batch` over ``runs`` in padded batches; results are
        written to ``anchors[where]`` / ``scores[where]``."""
        size = self._fit(self.batch[True], len(runs))
        guidance_width = guidance_rows.shape[1]
        mention_rows = self.mention_rows(runs)
        for start in range(0, len(runs), size):
            part = runs[start : start + size]
            mentions, named, level = self.anchor_inputs(part, size, mention_rows)
            guidance = np.full((size, guidance_width), -1, np.int32)
            guidance[: len(part)] = guidance_rows[start : start + len(part)]
            a, s = jax.device_get(self.sharding.anchor(self.entity_emb, jnp.asarray(mentions), guidance,
                                                       jnp.float32(lam), jnp.asarray(named),
                                                       jnp.asarray(level), top_n=self.config.tracer.top_n))
            anchors[where[start : start + len(part)]] = a[: len(part)]
            scores[where[start : start + len(part)]] = s[: len(part)]

    def trace_batch(self, runs: Sequence[Run], anchors, anchor_scores, size: int, bucket: int,
                    guidance_rows: np.ndarray | None = None) -> TraceBatch:
        """One padded :class:`~stem_jax.trace.tracer.TraceBatch` of ``runs`` (host arrays)."""
        dim = self.kg.query_dim  # schema and KG triples share the encoder's space (the tracer projects compact rows)
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
            text_rows = self.text_rows
            texts = [text_rows[t] for p in plans for t in p.step_texts()]
            if texts:  # one gather for the batch, not a gather and copy per run
                step_emb[mask] = self.text_emb[texts]
        anchor[: len(runs)] = anchors[: len(runs)]
        anchor_score[: len(runs)] = anchor_scores[: len(runs)]
        guidance = np.full((size, self.shapes[True].guidance), -1, np.int32)
        if guidance_rows is not None:
            guidance[: len(runs)] = guidance_rows
        # Host arrays: the jitted tracer takes them in one transfer (not one jnp.asarray call per field).
        return TraceBatch(steps, mask, step_emb, anchor, anchor_score, guidance, forward)

    # ----- answers ----------------------------------------------------------------------------
    def ranking_gap(self, runs: Sequence[Run], hyper: StemHyper | None = None) -> float:
        """``engine.beam_gap`` widened by τ when the runs carry guidance: the gap is there to catch bindings
        of the wrong relation, and a guided triple's +τ must not push the unguided right answers out of it
        (guidance marks only |T|·K' entities, so on a 1-hop question most right answers are unguided)."""
        guided = any(run.guidance is not None and len(run.guidance) for run in runs)
        return self.engine.beam_gap + (float(self.resolve(hyper).tau) if guided else 0.0)

    # answers per question the device ranking returns in its first call; a question with more is asked again
    DEVICE_ANSWERS = 64
    # one padded shape for every call of up to 64 runs and 256 live bindings (one question's beam): few compiles
    DEVICE_PADDING = {"min_runs": 64, "min_bindings": 256}

    def _never(self) -> jax.Array | None:
        """The mediator mask on device, made on first use: it crosses to the device once, not per call."""
        if self.mediators is not None and self._never_device is None:
            self._never_device = jnp.asarray(self.mediators)
        return self._never_device

    def answers_on_device(self) -> bool:
        """Whether :meth:`retrievals` ranks answers with the jitted kernel (``engine.answers_on``; "auto": on an
        accelerator backend)."""
        where = self.engine.answers_on
        return where == "device" or (where == "auto" and jax.default_backend() != "cpu")

    def rank_on_device(self, chunk: ChunkAnswers, gaps: Sequence[float], exclude: Sequence[tuple[int, int]],
                       ) -> list[list[tuple[int, float]]]:
        """``chunk.ranked(engine.rank, engine.answer_cut, gaps, exclude, never=mediators)`` in one compiled call
        (:func:`kernels.answers.rank_answers`): the same answers, scores bit for bit. The first call returns
        :attr:`DEVICE_ANSWERS` per question; when a question has more, the chunk is ranked again with room for all."""
        never = self._never()
        n = chunk.n_questions
        nodes, scores, meta = chunk.answer_runs()
        packed = pack_runs(n, nodes, scores, meta, gaps, exclude, **self.DEVICE_PADDING)
        engine = self.engine
        k = self.DEVICE_ANSWERS
        while True:
            ranked = rank_answers(packed, never, n_questions=n, rule=engine.rank, cut=engine.answer_cut, k=k,
                                  min_beams=self.config.planner.beam)
            most = int(ranked.count.max(initial=0))
            if most <= k:
                return ranked_lists(ranked)
            k = 1 << (most - 1).bit_length()

    def fold_chunk(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
                   outputs: Sequence[Sequence[dict]]) -> tuple[ChunkAnswers, list[tuple[int, int]]]:
        """The questions' traced runs (``runs[i]``, ``outputs[i]``, unreached bindings pruned) folded into one
        :class:`~stem_jax.answer.rank.ChunkAnswers`, and the (question, entity) pairs never to return (the
        topic entities, when ``engine.exclude_topic``): what :meth:`retrievals` ranks."""
        chunk, exclude, _ = self._fold_chunk(questions, runs, outputs)
        return chunk, exclude

    def _fold_chunk(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]], outputs: Sequence[Sequence[dict]],
                    ) -> tuple[ChunkAnswers, list[tuple[int, int]], list[tuple[np.ndarray, np.ndarray]]]:
        """:meth:`fold_chunk`, and every run's pruned (nodes, via) in chunk order (the answer scorer reads them)."""
        chunk = ChunkAnswers(len(questions))
        if not len(questions) == len(runs) == len(outputs):
            raise ValueError(f"{len(questions)} questions, {len(runs)} run lists and {len(outputs)} output lists")
        for qi, (mine, outs) in enumerate(zip(runs, outputs, strict=True)):
            if len(mine) != len(outs):
                raise ValueError(f"question {qi} has {len(mine)} runs but {len(outs)} trace outputs")
        entity_ids = self.index.entity_ids
        exclude = [(qi, entity_ids[t]) for qi, question in enumerate(questions) for t in question.topic_entities
                   if t in entity_ids] if self.engine.exclude_topic else []
        # every run of the chunk in one list, folded by ChunkAnswers.add_runs (add_run per run, in this order)
        flat = [run for mine in runs for run in mine]
        if not flat:
            return chunk, exclude, []
        plans = [run.plan for run in flat]
        outs = [out for mine in outputs for out in mine]
        # a plan without constants to check keeps its bindings as they are (prune_unreached returns them unchanged)
        pruned = [prune_unreached(out["nodes"], out["via"], out["parents"], plan.steps, plan.constants)
                  if plan.constants else (out["nodes"], out["via"]) for plan, out in zip(plans, outs, strict=True)]
        slots = [plan.answer_slot for plan in plans]
        chunk.add_runs([qi for qi, mine in enumerate(runs) for _ in mine], [nodes for nodes, _ in pruned],
                       [out["scores"] for out in outs], [via for _, via in pruned], slots,
                       [int(out["overflow"]) for out in outs], beam=[run.beam for run in flat],
                       beam_prob=[run.beam_prob for run in flat],
                       depth=answer_depths([plan.steps for plan in plans], slots).tolist())
        return chunk, exclude, pruned

    def retrieval(self, question: Question, runs: Sequence[Run], outputs: Sequence[dict],
                  stage_ms: dict[str, float] | None = None, hyper: StemHyper | None = None) -> Retrieval:
        """One question's traces as a :class:`~stem_jax.methods.base.Retrieval` (:meth:`retrievals` of one)."""
        return self.retrievals([question], [runs], [outputs], stage_ms, hyper)[0]

    def retrievals(self, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
                   outputs: Sequence[Sequence[dict]], stage_ms: dict[str, float] | None = None,
                   hyper: StemHyper | None = None) -> list[Retrieval]:
        """Each question's traces (``runs[i]``, ``outputs[i]``) as a :class:`~stem_jax.methods.base.Retrieval`:
        ranked answers and evidence in KG ids (the shared record), STEM's extras (plans, strategies, θ) in
        ``info``. The questions are ranked together (:meth:`fold_chunk`)."""
        hyper = self.resolve(hyper)
        engine = self.engine
        chunk, exclude, pruned = self._fold_chunk(questions, runs, outputs)
        # the gap depends on each question's runs (guided or not)
        # a learned answer scorer (stem_jax/answer/scorer.py) re-ranks the uncut ranking and cuts the set itself
        scorer = self.answer_scorer
        gaps = [self.ranking_gap(mine, hyper) for mine in runs]
        if scorer is None and self.answers_on_device():
            ranked = self.rank_on_device(chunk, gaps, exclude)
        else:
            ranked = chunk.ranked(engine.rank, 0.0 if scorer is not None else engine.answer_cut, gaps, exclude,
                                  never=self.mediators)
        support: list[float | None] = [None] * len(questions)
        if scorer is not None:
            tracer = [dict(r) for r in ranked]
            starts = np.cumsum([0, *map(len, runs)]).tolist()  # each question's runs in the chunk order of ``pruned``
            ranked = scorer(questions, runs, outputs, ranked,
                            pruned=[pruned[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)])
            # confidence stays the plans' agreement: the beam support of the answer the scorer puts first
            support = [tracer[qi].get(r[0][0], 0.0) if r else 0.0 for qi, r in enumerate(ranked)]
        evidence = chunk.evidence()
        theta = round(float(hyper.theta), 6)  # effective θ (calibrated, --tracer.theta or a grid point's)
        results = []
        overflow = chunk.overflow.tolist()
        stage = stage_ms or {}
        for qi, (question, mine, outs) in enumerate(zip(questions, runs, outputs, strict=True)):
            schemas = [r.plan.schema for r in mine]
            info = {
                "strategies": sorted({schema.strategy for schema in schemas}),
                "plans": [schema.describe() for schema in schemas],
                "capacity": max([int(o.get("capacity", 0)) for o in outs], default=0),
                "theta": theta,
                "runs": len(mine),
            }
            if support[qi] is not None:
                info["support"] = round(float(support[qi]), 6)
            results.append(Retrieval(question.qid, answers=ranked[qi], evidence=evidence[qi],
                                     stage_ms=dict(stage), info=info, overflow=overflow[qi]))
        self._note_unmatched(runs, outputs, results, exclude)
        return results

    def _note_unmatched(self, runs: Sequence[Sequence[Run]], outputs: Sequence[Sequence[dict]],
                        results: Sequence[Retrieval], exclude: Sequence[tuple[int, int]]) -> None:
        """``info["unmatched_relations"]``: the plan steps whose bindings all came through other relations
        (:func:`~stem_jax.methods.stem.relation_check.unmatched_steps`), for questions that have answers; here, so
        that an eval, a sweep point and ``ask`` write the same records. ``exclude``: :meth:`fold_chunk`'s
        (question, entity) pairs never returned."""
        from stem_jax.methods.stem.relation_check import runs_with_unmatched_steps, unmatched_steps

        index = self.index
        answered = [qi for qi, result in enumerate(results) if result.answers]
        excluded: dict[int, set[int]] = {qi: set() for qi in answered}
        for qi, entity in exclude:
            if qi in excluded:
                excluded[qi].add(entity)
        owners = [(qi, k) for qi in answered for k in range(len(runs[qi]))]
        flagged = runs_with_unmatched_steps(
            index, [runs[qi][k].plan.steps for qi, k in owners], [outputs[qi][k]["nodes"] for qi, k in owners],
            [outputs[qi][k]["via"] for qi, k in owners], [excluded[qi] for qi, _ in owners])
        for (qi, k), flag in zip(owners, flagged.tolist(), strict=True):
            if not flag:
                continue
            out, lines = outputs[qi][k], results[qi].info.setdefault("unmatched_relations", [])
            for line in unmatched_steps(index, runs[qi][k].plan.steps, np.asarray(out["nodes"]),
                                        np.asarray(out["via"]), excluded[qi], self.context.display):
                if line not in lines:
                    lines.append(line)

    def record(self, question: Question, runs: Sequence[Run], outputs: Sequence[dict],
               stage_ms: dict[str, float] | None = None, hyper: StemHyper | None = None) -> dict[str, Any]:
        """The ``predictions.jsonl`` record of :meth:`retrieval` (the shared record builder)."""
        from_retrieval = self.retrieval(question, runs, outputs, stage_ms, hyper)
        return make_record(self.context, question, from_retrieval, "stem")


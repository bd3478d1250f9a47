"""What STEM's stages read and never change per call: the KG on device, the encoder, the tracer shapes and the
schema-text table, held once per dataset by :class:`StemResources`.

The holder does not plan, anchor, trace or rank: those are the functions of
:mod:`~stem_jax.methods.stem.plan`, :mod:`~stem_jax.methods.stem.anchor`, :mod:`~stem_jax.methods.stem.trace`
and :mod:`~stem_jax.methods.stem.rank`, each taking the holder and the previous stage's data as arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.answer.values import ValueIndex
from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset
from stem_jax.encoder.base import TextEncoder
from stem_jax.encoder.cache import keyed_cache_path, open_or_build
from stem_jax.errors import UNWRITABLE
from stem_jax.eval.sharding import local_sharding
from stem_jax.kg.embeddings import KGEmbeddings
from stem_jax.kg.index import KGIndex
from stem_jax.kg.relation_steps import open_relation_step_table
from stem_jax.kg.step_table import StepTable
from stem_jax.methods.base import MethodContext
from stem_jax.methods.stem.settings import EffectiveSettings, effective_settings
from stem_jax.methods.stem.types import RankRules, Run, StemHyper, fold_name, run_buckets
from stem_jax.shard.trace import sharded_tracing
from stem_jax.trace.tracer import KGArrays, TracerShapes, capacity_ladder

T = TypeVar("T")


class _InContext(Generic[T]):
    """A resource :class:`StemResources` reads from its :class:`MethodContext`, the one place it is held (so a
    stage reading ``res.index`` and a helper reading ``res.context.index`` see the same object)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, holder: None, owner: type | None = None) -> _InContext[T]: ...

    @overload
    def __get__(self, holder: StemResources, owner: type | None = None) -> T: ...

    def __get__(self, holder: StemResources | None, owner: type | None = None) -> Any:
        return self if holder is None else getattr(holder.context, self.name)

    def __set__(self, holder: StemResources, value: T) -> None:
        raise AttributeError(f"{self.name} is read from the holder's context, set when it is made")


class StemResources:
    """The device-side KG, encoder, tracer shapes and schema-text table of one dataset."""

    dataset = _InContext[Dataset]()
    index = _InContext[KGIndex]()
    embeddings = _InContext[KGEmbeddings]()
    encoder = _InContext[TextEncoder]()
    config = _InContext[StemConfig]()
    guidance = _InContext[Any]()  # the guidance provider __init__ takes, or None

    NAMED_WIDTH = 4  # named anchor candidates per run on device
    MIN_BATCH = 4  # a question's beam (B=4) fills it; more padded rows would slow single-question tracing
    # answers per question the device ranking returns in its first call; a question with more is asked again
    DEVICE_ANSWERS = 64
    # one padded shape for every call of up to 64 runs and 256 live bindings (one question's beam): few compiles
    DEVICE_PADDING = {"min_runs": 64, "min_bindings": 256}
    # From this ladder level up, retried runs of every steps bucket share the widest bucket planned so far
    # (note_buckets): few runs overflow that far, and each (bucket, level) shape is a jit trace and lowering
    # per process. A plan's padding steps are skipped, and its outputs are cut back to its own bucket's
    # slots, so nothing else changes.
    SHARED_BUCKET_LEVEL = 2

    def __init__(self, dataset: Dataset, index: KGIndex, embeddings: KGEmbeddings, encoder: TextEncoder,
                 config: StemConfig, *, cache_dir: Path | None = None, guidance: Any = None):
        """``guidance``: optional provider with ``attach(questions, runs_per_question, show_progress=)``
        that sets ``run.guidance`` (e.g. :class:`stem_jax.gnn.provider.GNNGuidance`); None = no guidance."""
        self.context = MethodContext(dataset, index, embeddings, encoder, config, guidance=guidance)
        self.settings: EffectiveSettings = effective_settings(config, embeddings)
        self.engine = self.settings.engine
        self.theta = self.settings.theta
        self.calibration = self.settings.calibration
        self.hyper = StemHyper(float(config.tracer.lam), float(config.tracer.tau), float(self.theta))
        self.cache_dir = cache_dir
        self.names = dataset.entity_names or {}
        self.mediators = self.context.mediators  # walked through, never returned
        self._mediator_mask: jax.Array | None = None  # the mediators on device, made on first use
        self.answer_scorer: Any = None  # the KG's learned answer scorer; StemMethod sets it from its context
        self._values: Any = ...  # the KG's literal values (ValueIndex, or None without any), read on first use
        self.kg = KGArrays.from_index(index, embeddings.trace_rows())  # float16, or compact (encoder.row_format)
        # float32 on device once: anchoring reads the whole table for every batch
        self.entity_emb = jnp.asarray(np.asarray(embeddings.entities.array, dtype=np.float32))
        # batches sharded over the local devices, KG and entity table replicated (identity on 1 device)
        self.sharding = local_sharding()
        self.kg, self.entity_emb = self.sharding.replicate((self.kg, self.entity_emb))
        if config.engine.kg_shards > 1:  # the KG cut over devices, each scoring the triples it holds
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
        # triples incident to each entity: a run's first step matches at most its anchor's, which picks the ladder
        # level a run starts at (stem_jax.methods.stem.trace.first_levels)
        self.degree = np.asarray(index.degree)
        self.shared_bucket = 1  # steps bucket of every retry from SHARED_BUCKET_LEVEL up (see note_buckets)
        self.batch = {True: self.sharding.round_up(engine.batch_precision),
                      False: self.sharding.round_up(engine.batch_breadth)}
        self.text_rows: dict[str, int] = {}
        self.text_emb: np.ndarray | None = None
        self.text_compactions = 0  # times a method dropped unused online rows of the table (StemMethod._compact)
        self._relation_steps: StepTable | None = None
        self._relation_steps_opened = False
        self.relation_step_hits = 0  # online schema texts read from the relation-step table instead of encoded
        self._folded: dict[str, list[int]] | None = None

    def display(self, entity: str) -> str:
        return self.names.get(entity, entity)

    def with_conventions(self, **changes: Any) -> StemResources:
        """This holder (device arrays, compiled tracers, schema-text embeddings shared) with other KG
        conventions (``direction``, ``used_triples``, ``exclude_topic``): a calibration sweep's point."""
        other = copy.copy(self)
        other.engine = dataclasses.replace(self.engine, **changes)
        sources = {**self.settings.conventions_source, **dict.fromkeys(changes, "sweep")}
        other.settings = dataclasses.replace(self.settings, engine=other.engine, conventions_source=sources)
        return other

    def resolve(self, hyper: StemHyper | None) -> StemHyper:
        return self.hyper if hyper is None else hyper

    def note_buckets(self, runs: Iterable[Run], buckets: np.ndarray | None = None) -> int:
        """Widen :attr:`shared_bucket` to the steps bucket of ``runs``' longest plan; returns it (``buckets``: the
        runs' :func:`~stem_jax.methods.stem.types.run_buckets`, when the caller has them).

        Planning a split notes all its runs at once, so every call of an eval shares one bucket above
        :attr:`SHARED_BUCKET_LEVEL`, whatever the hops of the chunk."""
        buckets = run_buckets(list(runs)) if buckets is None else buckets
        self.shared_bucket = max(self.shared_bucket, int(buckets.max(initial=1)))
        return self.shared_bucket

    def folded_names(self) -> dict[str, list[int]]:
        """KG ids by :func:`~stem_jax.methods.stem.types.fold_name` of their display name, built on first use."""
        if self._folded is None:
            self._folded = defaultdict(list)
            for i, entity in enumerate(self.index.entities):
                self._folded[fold_name(self.display(entity))].append(i)
        return self._folded

    # ----- the schema-text table ---------------------------------------------------------------
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

    def relation_steps(self) -> StepTable | None:
        """The KG's placeholder-only step texts and their vectors (:mod:`stem_jax.kg.relation_steps`), opened on
        first use and built then when the KG's embedding cache does not hold them yet; None when
        ``encoder.step_table_max`` turns it off or is below the KG's count, when the KG's embeddings have no cache
        folder, or when that folder is read-only and the table is not built (its texts are then encoded online)."""
        if not self._relation_steps_opened:
            self._relation_steps_opened = True
            path = getattr(self.embeddings.entities, "path", None)
            if path is not None:
                self._relation_steps = open_relation_step_table(
                    self.encoder, self.index, Path(path).parent, chunk_rows=self.config.encoder.chunk_rows,
                    max_texts=self.config.encoder.step_table_max)
        return self._relation_steps

    def encode_steps(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts), d], rounded through float16 as the schema-text table stores them: texts of the
        relation-step table read from it, the rest encoded in one call."""
        table = self.relation_steps()
        if table is None or not len(texts):
            return np.asarray(self.encoder.encode(list(texts)), dtype=np.float16).astype(np.float32)
        where, vectors = table.lookup(texts)
        self.relation_step_hits += len(where)
        out = np.empty((len(texts), vectors.shape[1]), np.float32)
        out[where] = vectors  # float16 rows widened: the same values the encoder's rounded vectors take
        if len(where) < len(texts):
            rest = np.setdiff1d(np.arange(len(texts)), where)
            out[rest] = np.asarray(self.encoder.encode([texts[i] for i in rest]), dtype=np.float16)
        return out

    def step_embeddings(self, run: Run) -> np.ndarray:
        """float32 [steps, d]: the embeddings of ``run``'s schema-triple texts."""
        return self.text_emb[[self.text_rows[t] for t in run.plan.step_texts()]]

    # ----- tracer shapes and switches ----------------------------------------------------------
    def is_precision(self, run: Run) -> bool:
        """Whether ``run`` traces with Precision (the plan says so and ``engine.strategy=planner``)."""
        return run.plan.schema.strategy == "Precision" and self.engine.strategy == "planner"

    def ladder_for(self, precision: bool) -> list[TracerShapes]:
        return [self.shapes[True]] if precision else self.ladder

    def tracer_switches(self) -> dict[str, bool | str]:
        """The tracer's static switches as this run's effective engine sets them: the relation bonus,
        whether τ counts in Breadth's θ test, and the KG conventions (direction, used-triple rule).
        Every caller of the jit tracer (sweep grids included) and the reference's ``TraceOptions`` take
        them from here, so no tool traces under other rules than ``eval``."""
        engine = self.engine
        return {"relation_bonus": engine.relation_bonus, "tau_admits": engine.guidance_admits,
                "direction": engine.direction, "used": engine.used_triples}

    def batch_size(self, capacity: int, n: int) -> int:
        """Padded batch size for ``n`` runs: the configured ``capacity``, or the next power of two
        (at least ``MIN_BATCH``) when fewer runs are waiting, so a single question does not pay for a
        full batch. Powers of two keep compiles few; below 4 rows XLA's CPU dot switches kernels and
        the last float bit of a score can change, so batches never go below 4."""
        small = max(self.MIN_BATCH, 1 << max(n - 1, 0).bit_length())
        return self.sharding.round_up(min(capacity, small))

    # ----- answer ranking ----------------------------------------------------------------------
    def mediator_mask(self) -> jax.Array | None:
        """The mediator mask on device, made on first use: it crosses to the device once, not per call."""
        if self.mediators is not None and self._mediator_mask is None:
            self._mediator_mask = jnp.asarray(self.mediators)
        return self._mediator_mask

    def answers_on_device(self) -> bool:
        """Whether answers are ranked with the jitted kernel (``engine.answers_on``; "auto": on an
        accelerator backend)."""
        where = self.engine.answers_on
        return where == "device" or (where == "auto" and jax.default_backend() != "cpu")

    def value_index(self) -> ValueIndex | None:
        """The KG's literal values when ``engine.value_conditions`` applies them (built once); None when it does
        not, or when no entity of the KG is a literal value."""
        if self.engine.value_conditions != "auto":
            return None
        if self._values is ...:
            index = self.context.index
            self._values = ValueIndex.build([self.names.get(e, e) for e in index.entities], index.relations,
                                            index.triples)
        return self._values

    def rank_rules(self) -> RankRules:
        """The :class:`~stem_jax.methods.stem.types.RankRules` of this holder's effective engine."""
        engine = self.engine
        device = self.answers_on_device()
        # a learned scorer re-ranks the host ranking's uncut list, so with one the ranking stays on the host
        on_device = self.answer_scorer is None and device
        return RankRules(rule=engine.rank, answer_cut=engine.answer_cut, beam_gap=engine.beam_gap,
                         exclude_topic=engine.exclude_topic, on_device=on_device, min_beams=self.config.planner.beam,
                         mediators=self.mediators, mediator_mask=self.mediator_mask() if device else None,
                         scorer=self.answer_scorer, values=self.value_index(), device_answers=self.DEVICE_ANSWERS,
                         device_padding=dict(self.DEVICE_PADDING))

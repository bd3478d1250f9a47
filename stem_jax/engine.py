"""The library API: open a dataset or KG once, then retrieve, evaluate or ask.

    from stem_jax import Engine

    engine = Engine.open("demo")                 # index, embeddings, encoder, the pattern planner
    answer = engine.ask("which actors appear in The Rimloumjaith")
    print(answer.answers[:5], answer.chains[:3], answer.stage_ms)

The default planner is ``pattern``, as the CLI's: learned from the training split by ``stem-jax
train-planner``. On the demo KG it is trained on first use (a few seconds, announced on stderr) and
saved where ``train-planner`` saves it; other datasets ask for ``train-planner`` first. The
``oracle`` planner plans from the dataset's gold relation path, so it answers only the split's own
questions: a question without a gold path is looked up in the loaded split word for word (case and
spacing aside), and one it still cannot plan gets no answers and an :attr:`Answer.reason` saying why.

:class:`Engine` owns every loaded resource (KG index, TensorStore embedding tables, the encoder,
the planner, the optional Triple-GNN guidance provider and, per retrieval method, the compiled
tracers), so a second question costs only its own planning, anchoring and tracing. The CLI turns
flags into a :class:`~stem_jax.config.StemConfig`, a :class:`~stem_jax.data.registry.DatasetSpec`,
a :class:`~stem_jax.plan.factory.PlannerSpec` and a :class:`GuidanceSpec`, and calls this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stem_jax.answer.chains import answer_chains
from stem_jax.compile_cache import enable_compile_cache
from stem_jax.config import StemConfig, as_dict, check, default_cache_dir
from stem_jax.data.linker import EntityLinker
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import Dataset, Question
from stem_jax.errors import StemError
from stem_jax.eval.loop import DEFAULT_OVERLAP, evaluate_method
from stem_jax.eval.overlap import retrieve_overlapped
from stem_jax.eval.records import make_records
from stem_jax.eval.run_folder import engine_fingerprint, selection_of
from stem_jax.gc_pause import collector_paused
from stem_jax.kg.index import KGIndex, build_index
from stem_jax.kg.relation_steps import open_relation_step_table
from stem_jax.methods import MethodContext, RetrievalMethod, build_method
from stem_jax.plan.factory import (
    PlannerSpec,
    build_planner,
    default_planner_path,
    open_plan_store,
    train_planner_flags,
)
from stem_jax.plan.oracle import gold_paths
from stem_jax.plan.training import AUTO_TRAIN_DATASETS, train_default_planner
from stem_jax.validation import (
    checked_cache_dir,
    checked_dataset_spec,
    checked_planner,
    checked_question,
    dataset_spec_fields,
)

Log = Callable[[str], None]
_BRACKET = re.compile(r"\[([^\[\]]+)\]")


def _quiet(_: str) -> None:
    pass


def _compile_counts() -> dict[str, int]:
    """Tracer and anchor jit compilations in this process so far."""
    from stem_jax.trace.tracer import anchor_batch, trace_batch

    return {"trace_batch": trace_batch._cache_size(), "anchor_batch": anchor_batch._cache_size()}


def _normalised(text: str) -> str:
    """Question text for a word-for-word lookup: case, spacing and a final ? or . aside."""
    return " ".join(text.lower().split()).rstrip("?. ")


def _check_distinct_ids(questions: Sequence[Question], *, repeats_allowed: bool) -> None:
    """Answers, prepared runs and run-folder records are kept by question id: two questions of one call with
    one id (the second would get the first's answer, or overwrite its record) are a :class:`StemError`.
    ``repeats_allowed``: the same question twice is fine (``retrieve`` answers it twice)."""
    first: dict[str, tuple[int, Question]] = {}
    for i, question in enumerate(questions):
        if not isinstance(question, Question):
            continue  # checked by the caller
        if question.qid not in first:
            first[question.qid] = (i, question)
            continue
        j, other = first[question.qid]
        if repeats_allowed and other == question:
            continue
        differ = [f for f in ("text", "topic_entities", "answers", "gold_path", "graph")
                  if getattr(other, f) != getattr(question, f)]
        what = f"but differ in {', '.join(differ)}" if differ else "(a repeat)"
        raise StemError(f"questions {j} and {i} of this call share the id {question.qid!r} {what}; answers and "
                        "run-folder records are kept by id, so one would take the other's place\n  how to fix: give "
                        "each question its own qid (dataclasses.replace(q, qid=...)), or drop the repeat")


def _unmatched_reason(record: dict[str, Any]) -> str | None:
    """Why the answers are not matches of the plan's relation (STEM's ``unmatched_relations``), else None."""
    lines = record.get("unmatched_relations") or []
    if not lines or not record.get("prediction"):
        return None
    return ("the answers do not follow the plan: " + "; ".join(lines) + ". Their scores rank them among themselves "
            "only")


@dataclasses.dataclass(frozen=True)
class GuidanceSpec:
    """The global guidance graph: ``none``, or ``gnn`` with a ``train-gnn`` run folder."""

    kind: str = "none"
    checkpoint: Path | None = None


@dataclasses.dataclass
class Answer:
    """One question's retrieval, readable: ranked answers, evidence, chains and timings.

    ``chains``: for each answer, best-ranked first, up to 3 shortest walks through the evidence from a
    topic entity to it (:func:`stem_jax.answer.chains.answer_chains`), so every chain ends at an
    answer and the first k chains end at answers among the first k; the same for every method (the
    chains a method writes itself, SAFE's matches and SCR's paths, are in ``record["chains"]``).

    ``reason``: set when the planner made no plan for the question, saying why (the oracle planner
    on a question without a gold relation path), or when a plan step's KG relation matched no edge and
    its answers came through other relations by similarity (which relation, and why: no such edge, or
    only a self-loop back to the excluded topic); None otherwise, also when plans found no answer."""

    question: Question
    answers: list[tuple[str, float]]
    evidence: list[tuple[str, str, str]]
    chains: list[str]
    stage_ms: dict[str, float]
    record: dict[str, Any]
    topic_link: dict[str, Any] | None = None  # how the topic entity was found (``ask`` without an id)
    reason: str | None = None  # why there is no answer, when the planner could not plan the question
    # STEM: whether the best answer's beam support (summed probability of the plans that reach it) is at least
    # engine.confident_at; when it is not, ``reason`` says so: read the answers as guesses. None for SAFE / SCR.
    confident: bool | None = None

    @property
    def best(self) -> str | None:
        return self.answers[0][0] if self.answers else None


def load_kg(spec: DatasetSpec, *, log: Log = _quiet) -> tuple[Dataset, KGIndex]:
    """Load a dataset and build its integer KG index, logging counts and skips."""
    start = time.perf_counter()
    dataset = load_dataset(spec)
    index = build_index(dataset.triples)
    hops = Counter(q.hops for q in dataset.questions)
    by_hop = ", ".join(f"{h}-hop: {n}" if h is not None else f"hops unknown: {n}"
                       for h, n in sorted(hops.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    log(f"{dataset.name}/{spec.split}: {len(dataset.questions)} questions ({by_hop}), {index.num_entities} entities, "
        f"{index.num_relations} relations, {index.num_triples} triples [{time.perf_counter() - start:.1f}s]")
    for line in dataset.skips.lines():
        log(f"  {line}")
    for line in dataset.notes.lines("kept"):
        log(f"  {line}")
    if dataset.dropped:
        log(f"  {len(dataset.dropped)} of these skipped questions have answers: they count as misses in the metrics "
            "over every question of the split")
    return dataset, index


def open_embeddings(config: StemConfig, dataset: Dataset, index: KGIndex, cache_root: Path, *, rebuild: bool = False,
                    show_progress: bool = False, log: Log = _quiet) -> tuple[Any, Any, list[list[Any]]]:
    """The encoder, the KG's embedding tables (built once, resumable) and a per-table summary."""
    from stem_jax.encoder import get_encoder
    from stem_jax.kg.embeddings import build_kg_embeddings, cache_folder

    enable_compile_cache(cache_root)  # before the first compile: the encoder's and every tracer's
    encoder = get_encoder(config.encoder)
    folder = cache_folder(cache_root, dataset.name, index, encoder, names=dataset.entity_names)
    log(f"embedding cache: {folder}")
    embeddings = build_kg_embeddings(index, encoder, folder, chunk_rows=config.encoder.chunk_rows,
                                     names=dataset.entity_names, rebuild=rebuild, progress=show_progress,
                                     row_format=config.encoder.row_format)
    rows = []
    for kind, table in embeddings.tables().items():
        rate = table.encoded_rows / table.build_seconds if table.build_seconds else 0.0
        rows.append([kind, table.n, table.dim, table.encoded_rows, round(table.build_seconds, 1),
                     round(rate, 1) if table.encoded_rows else "cached"])
    if embeddings.triple_rows is not None:  # the tracer's compact triple rows (encoder.row_format)
        compact = embeddings.triple_rows
        rows.append([f"triples {compact.format} ({compact.bytes_per_row} B/row)", compact.n, compact.width, 0,
                     round(compact.build_seconds, 1), "built" if compact.build_seconds else "cached"])
    if hasattr(encoder, "attach_step_table"):  # the KG's schema-step texts, read online instead of encoded
        from stem_jax.kg.step_table import open_step_table

        steps = open_step_table(encoder, index, folder, chunk_rows=config.encoder.chunk_rows,
                                max_texts=config.encoder.step_table_max, names=dataset.entity_names,
                                rebuild=rebuild, progress=show_progress)
        encoder.attach_step_table(steps)
        if steps is not None:
            table = steps.table
            rows.append(["schema-step texts", table.n, table.dim, table.encoded_rows, round(table.build_seconds, 1),
                         round(table.strings_per_second, 1) if table.encoded_rows else "cached"])
        # relation steps between placeholders (`[ENT1] directed by [ENT2]`): built here so that `index` pays for
        # them, not the first question (the STEM method opens the same cache file)
        relation_steps = open_relation_step_table(encoder, index, folder, chunk_rows=config.encoder.chunk_rows,
                                                  max_texts=config.encoder.step_table_max, progress=show_progress)
        if relation_steps is not None:
            table = relation_steps.table
            rows.append(["relation-step texts", table.n, table.dim, table.encoded_rows,
                         round(table.build_seconds, 1),
                         round(table.strings_per_second, 1) if table.encoded_rows else "cached"])
    return encoder, embeddings, rows


def gnn_example_factory(config: StemConfig, dataset: Dataset, index: KGIndex, embeddings: Any, encoder: Any) -> Any:
    from stem_jax.gnn.data import ExampleFactory
    from stem_jax.gnn.features import SchemaFeaturizer

    featurizer = SchemaFeaturizer(index, embeddings, encoder, dataset.entity_names)
    return ExampleFactory(index, featurizer, config.subgraph, dataset.entity_names)


def build_guidance(spec: GuidanceSpec, config: StemConfig, dataset: Dataset, index: KGIndex, embeddings: Any,
                   encoder: Any, *, cache_root: Path, log: Log = _quiet) -> Any:
    """The Triple-GNN guidance provider ``spec`` names (None for ``none``)."""
    if spec.kind == "none":
        return None
    if spec.kind != "gnn":
        raise StemError(f"unknown guidance {spec.kind!r}\n  how to fix: use none or gnn")
    if spec.checkpoint is None:
        raise StemError("--guidance gnn needs --gnn-checkpoint RUN_FOLDER\n"
                        f"  how to fix: train one with `stem-jax train-gnn {train_planner_flags(dataset.name)} --out "
                        f"runs/gnn-{dataset.name}` and pass --gnn-checkpoint runs/gnn-{dataset.name}")
    from stem_jax.gnn.infer import load_checkpoint
    from stem_jax.gnn.provider import GNNGuidance

    gnn_spec, params, info = load_checkpoint(spec.checkpoint)
    log(f"Triple-GNN: {spec.checkpoint} step {info['step']} (L={gnn_spec.layers}, d={gnn_spec.d_gnn}, "
        f"params {info['params_sha']}); guidance K = |T|·{config.guidance.k_prime}")
    return GNNGuidance(gnn_spec, params, info, gnn_example_factory(config, dataset, index, embeddings, encoder),
                       k_prime=config.guidance.k_prime, width=config.engine.guidance,
                       cache_dir=cache_root / dataset.name / "gnn-guidance")


def checked_guidance(guidance: Any) -> GuidanceSpec:
    """A :class:`GuidanceSpec` from ``None``/``"none"``, a ``train-gnn`` run folder (str or Path), or a spec;
    ``"gnn"`` without a checkpoint, a missing folder or another type is a :class:`StemError`."""
    if guidance is None or (isinstance(guidance, str) and guidance == "none"):
        return GuidanceSpec()
    if isinstance(guidance, str | os.PathLike) and str(guidance) != "gnn":
        guidance = GuidanceSpec("gnn", Path(guidance))
    elif isinstance(guidance, str):
        guidance = GuidanceSpec(guidance)
    if not isinstance(guidance, GuidanceSpec):
        raise StemError(f"guidance={guidance!r:.60}: expected None, a train-gnn run folder or a GuidanceSpec\n"
                        "  how to fix: pass guidance=\"runs/gnn-<dataset>\" (or leave it out)")
    if guidance.kind not in ("none", "gnn"):
        raise StemError(f"unknown guidance {guidance.kind!r}\n  how to fix: use none or gnn")
    if guidance.kind == "gnn":
        if guidance.checkpoint is None:
            raise StemError("guidance \"gnn\" needs a train-gnn run folder\n"
                            "  how to fix: pass guidance=\"runs/gnn-<dataset>\" (the --out of `stem-jax train-gnn`)")
        checkpoint = Path(guidance.checkpoint)
        if not checkpoint.is_dir():
            raise StemError(f"guidance {checkpoint}: no such train-gnn run folder\n"
                            "  how to fix: pass the --out folder of `stem-jax train-gnn`")
        guidance = GuidanceSpec("gnn", checkpoint)
    return guidance


def _cache_root(cache_dir: Any) -> Path:
    if cache_dir is None:
        return default_cache_dir()
    if not isinstance(cache_dir, str | os.PathLike):
        raise StemError(f"cache_dir={cache_dir!r:.60}: expected a folder path (str or Path)\n"
                        "  how to fix: pass e.g. cache_dir=\"~/.cache/stem_jax\"")
    return checked_cache_dir(Path(cache_dir), flag="cache_dir")


class Engine:
    """A dataset's KG, embeddings, encoder, planner and guidance, loaded once (see the module docstring).

    Build it with :meth:`open`; then :meth:`ask` / :meth:`retrieve` answer questions and
    :meth:`evaluate` scores a split into a resumable run folder. Methods (``stem``, ``safe``,
    ``scr``) are built on first use and kept, with their compiled functions.

    Thread safety: an engine may be shared by several threads (a server). Its public calls
    (:meth:`ask`, :meth:`retrieve`, :meth:`evaluate`, :meth:`warm_up`, :meth:`method`, :meth:`question`)
    hold one re-entrant lock for their whole duration, because they grow shared state (the
    prepared plans of a method, the schema-text embedding table, lazily built planner, guidance and
    linker): calls from several threads run one after another and each gets exactly the answer it
    would get alone. For parallel throughput, batch questions into one :meth:`retrieve` call.

    ``keep_prepared``: 0 (default) plans, grounds and guides every question of :meth:`retrieve` afresh,
    so that ``ask`` times a repeated question end to end; N > 0 keeps the prepared runs of the N
    questions used last (a server: a repeated question is only traced and answered again). Answers
    are the same either way.
    """

    def __init__(self, dataset_spec: DatasetSpec, dataset: Dataset, index: KGIndex, encoder: Any, embeddings: Any,
                 config: StemConfig, *, cache_root: Path, planner: PlannerSpec = PlannerSpec("pattern"),
                 guidance: GuidanceSpec = GuidanceSpec(), method_options: dict[str, dict[str, Any]] | None = None,
                 show_progress: bool = False, log: Log = _quiet, embed_rows: list[list[Any]] | None = None):
        self.dataset_spec = dataset_spec
        self.dataset = dataset
        self.index = index
        self.encoder = encoder
        self.embeddings = embeddings
        self.config = config
        self.cache_root = Path(cache_root)
        self.planner_spec = planner
        self.guidance_spec = guidance
        self.method_options = method_options or {}
        self.show_progress = show_progress
        self.log = log
        self.embed_rows = embed_rows or []
        self._planner: Any = None
        self.planner_info: dict[str, Any] = {}
        self._planner_fn: Any = None
        self._guidance: Any = None
        self._guidance_built = False
        self._methods: dict[str, RetrievalMethod] = {}
        self._linker: Any = None
        self._by_name: dict[str, str] | None = None
        self._same_name: dict[str, list[str]] = {}  # names that several entities carry -> their ids
        self._by_text: dict[str, list[Question]] | None = None
        self._qids: set[str] | None = None
        self._lock = threading.RLock()  # see the class docstring: one call at a time
        self.keep_prepared = 0

    @classmethod
    def open(cls, dataset: str | DatasetSpec = "demo", *, config: StemConfig | None = None,
             planner: str | PlannerSpec = "pattern", guidance: str | Path | GuidanceSpec | None = None,
             cache_dir: Path | str | None = None, rebuild: bool = False, show_progress: bool = False,
             log: Log | None = None, method_options: dict[str, dict[str, Any]] | None = None,
             **dataset_fields: Any) -> Engine:
        """Load ``dataset`` (a name plus DatasetSpec fields such as ``split=``, ``hops=``, ``limit=``, or a
        spec), build its index and embedding caches, and return an engine.

        ``planner`` is a planner name or a :class:`PlannerSpec` (default ``pattern``, as the CLI's; on the
        demo KG trained on first use, see the module docstring); ``guidance`` is None, ``"gnn"`` with
        the checkpoint in ``method_options``, a checkpoint folder, or a :class:`GuidanceSpec`. ``log``
        receives progress lines (default: silent).

        Every argument is checked before any loading work, by the same rules as the CLI's flags
        (:mod:`stem_jax.validation`): paths may be ``str`` or :class:`Path`, ``hops`` an int, a
        string such as ``"1,2"`` or a sequence, ``limit`` a positive whole number; anything else is a
        :class:`StemError` naming the argument and how to fix it."""
        if config is None:
            config = StemConfig()
        if not isinstance(config, StemConfig):
            raise StemError(f"config={config!r:.60}: expected a StemConfig\n"
                            "  how to fix: pass config=StemConfig(...) or apply_overrides(StemConfig(), {...})")
        check(config)
        log = log or _quiet
        if isinstance(dataset, DatasetSpec):
            spec = checked_dataset_spec(dataset)
            if dataset_fields:
                spec = dataset_spec_fields(spec.name, {**{f.name: getattr(spec, f.name) for f in
                                                          dataclasses.fields(spec) if f.name != "name"},
                                                       **dataset_fields})
        else:
            spec = dataset_spec_fields(dataset, dataset_fields, seed=config.seed)
        planner = checked_planner(planner)
        guidance = checked_guidance(guidance)
        cache_root = _cache_root(cache_dir)
        with collector_paused():
            loaded, index = load_kg(spec, log=log)
            encoder, embeddings, rows = open_embeddings(config, loaded, index, cache_root, rebuild=rebuild,
                                                        show_progress=show_progress, log=log)
        return cls(spec, loaded, index, encoder, embeddings, config, cache_root=cache_root, planner=planner,
                   guidance=guidance, method_options=method_options, show_progress=show_progress, log=log,
                   embed_rows=rows)

    # ----- lazily built parts -----------------------------------------------------------------
    @property
    def planner(self) -> Any:
        """The :class:`~stem_jax.plan.base.BatchPlanner` (None when plans come from a plan store)."""
        with self._lock:
            if self._planner is None and self.planner_spec.plans is None:
                self._train_on_first_use()
                self._planner, self.planner_info = build_planner(
                    self.planner_spec, self.config, self.dataset, self.index, cache_root=self.cache_root,
                    dataset_spec=self.dataset_spec, encoder=self.encoder)
            return self._planner

    def _train_on_first_use(self) -> None:
        """Train the demo's pattern planner where ``stem-jax train-planner`` saves it, when it is missing.

        Only for :data:`~stem_jax.plan.training.AUTO_TRAIN_DATASETS` (seconds of training) and the default
        planner folder: other datasets, or an explicit ``path``, keep the "run train-planner" error."""
        from stem_jax.plan.pattern import PLANNER_FILE  # loads tensorstore: imported on use

        spec = self.planner_spec
        if spec.name not in ("pattern", "hybrid") or spec.path is not None:
            return
        if self.dataset_spec.name not in AUTO_TRAIN_DATASETS:
            return
        path = default_planner_path(self.cache_root, self.config, self.dataset.name)
        if (path / PLANNER_FILE).exists():  # not the folder: an interrupted train-planner leaves its .lock
            return
        # stderr, also for the silent Python API: a pause of seconds and a folder written into the cache
        print(f"no trained pattern planner for {self.dataset.name} yet: training one on its "
              f"{self.dataset.name}/train questions (first use only; `stem-jax train-planner --dataset "
              f"{self.dataset.name}` does the same) ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        train_default_planner(self.dataset_spec, self.config, path, encoder=self.encoder, cache_root=self.cache_root,
                              show_progress=self.show_progress, log=_quiet)
        print(f"trained the {self.dataset.name} pattern planner in {time.perf_counter() - began:.1f}s; saved {path}",
              file=sys.stderr, flush=True)

    def _stored_plans(self) -> Any:
        with self._lock:
            if self.planner_spec.plans is not None and self._planner_fn is None:
                self._planner_fn, self.planner_info = open_plan_store(self.planner_spec.plans, self.index)
            return self._planner_fn

    @property
    def guidance(self) -> Any:
        with self._lock:
            if not self._guidance_built:
                self._guidance = build_guidance(self.guidance_spec, self.config, self.dataset, self.index,
                                                self.embeddings, self.encoder, cache_root=self.cache_root, log=self.log)
                self._guidance_built = True
            return self._guidance

    def context(self, method: str = "stem") -> MethodContext:
        """The shared resources a method is built from."""
        options = {"log": self.log, **self.method_options.get(method, {})}
        planner = None
        if method in ("stem", "safe"):
            options["planner_fn"] = self._stored_plans()
            planner = self.planner if options["planner_fn"] is None else None
        return MethodContext(self.dataset, self.index, self.embeddings, self.encoder, self.config,
                             cache_dir=self.cache_root / self.dataset.name, planner=planner,
                             guidance=self.guidance if method == "stem" else None, options=options)

    def method(self, name: str = "stem") -> RetrievalMethod:
        """The retrieval method ``name``, built once over this engine's resources."""
        with self._lock:
            if name not in self._methods:
                self._methods[name] = build_method(name, self.context(name))
            return self._methods[name]

    # ----- questions --------------------------------------------------------------------------
    def display(self, entity: str) -> str:
        return (self.dataset.entity_names or {}).get(entity, entity)

    def _entity_by_name(self) -> dict[str, str]:
        with self._lock:
            return self._entity_by_name_locked()

    def _entity_by_name_locked(self) -> dict[str, str]:
        if self._by_name is None:  # built once: a dict over every entity is too costly to build per question
            names = self.dataset.entity_names or {}
            by_name: dict[str, str] = {}
            same: dict[str, list[str]] = {}
            for e in self.index.entities:
                name = names.get(e, e)
                if name in by_name:
                    same.setdefault(name, [by_name[name]]).append(e)
                else:
                    by_name[name] = e
            self._same_name = same
            self._by_name = by_name
        return self._by_name

    def _ambiguous(self, mention: str, entities: Sequence[str]) -> StemError:
        """The error for a name that several KG entities carry: which ones, and how to name one."""
        shown = ", ".join(sorted(entities)[:5]) + (f" and {len(entities) - 5} more" if len(entities) > 5 else "")
        first = sorted(entities)[0]
        return StemError(f"topic [{mention}] names {len(entities)} KG entities ({shown}); which one is meant is not "
                         f"known\n  how to fix: name it by its KG id, e.g. [{first}] in the question or "
                         f"topic=\"{first}\" (--topic {first})")

    def question(self, text: str, *, topic: str | None = None, qid: str | None = None) -> tuple[Question, dict]:
        """A :class:`Question` from free text, and how its topic entity was found.

        ``[brackets]`` name the topic (MetaQA style); its KG entity is found by exact name, then
        case-insensitively. Without brackets (and without ``topic``) the entity linker matches the
        question's n-grams against the KG's entity names (exact, case-insensitive, fuzzy)."""
        text = checked_question(text)
        if not isinstance(text, str):
            raise StemError("Engine.question takes text; pass a Question to retrieve() directly")
        if topic is not None and (not isinstance(topic, str) or not topic.strip()):
            raise StemError(f"topic={topic!r:.60}: expected an entity name (str)\n  how to fix: pass e.g. topic=\"Tom Hanks\"")
        with self._lock:
            return self._question(text, topic, qid)

    def _plans_from_gold(self) -> bool:
        return self.planner_spec.name == "oracle" and self.planner_spec.plans is None

    def _with_gold_path(self, question: Question) -> Question:
        """For the oracle planner: a question without a gold relation path that is, word for word (case,
        spacing and a final ? aside), a question of the loaded split about the same topic entities
        becomes that question. Another topic keeps the question as asked (the split's gold path
        leaves another entity): it gets no plan, and :attr:`Answer.reason` says why."""

        if gold_paths(question).paths:
            return question
        for q in self._split_by_text(question.text):
            if not question.topic_entities or set(q.topic_entities) == set(question.topic_entities):
                return q
        return question

    def _split_by_text(self, text: str) -> list[Question]:
        if self._by_text is None:
            self._by_text = {}
            for q in self.dataset.questions:
                self._by_text.setdefault(_normalised(q.text), []).append(q)
        return self._by_text.get(_normalised(text), [])

    def _question(self, text: str, topic: str | None, qid: str | None) -> tuple[Question, dict]:
        # the topic is part of the id: one text asked about two entities is two questions (their prepared runs
        # are kept by qid, see keep_prepared)
        qid = qid or "ask/" + hashlib.sha256((text if topic is None else f"{text}\0{topic}").encode()).hexdigest()[:12]
        by_name = self._entity_by_name()
        mentions = [m.strip() for m in _BRACKET.findall(text)] if topic is None else [topic.strip()]
        resolved: dict[str, tuple[str, str]] = {}
        if mentions:
            for mention in mentions:
                resolved[mention] = self._resolve_mention(mention, by_name)

        def unbracket(match: re.Match) -> str:  # [Q1] (an entity named by its id) reads as its name
            entity, kind = resolved.get(match.group(1).strip(), (None, None))
            return self.display(entity) if kind == "id" else match.group(1)

        clean = _BRACKET.sub(unbracket, text).strip()
        if mentions:
            entities = [resolved[m][0] for m in mentions]
            kinds = [resolved[m][1] for m in mentions]
            link = {"mentions": mentions, "entities": [self.display(e) for e in entities], "match": kinds}
            return Question(qid, clean, tuple(entities), ()), link
        links = self.linker().link(clean)
        if not links:
            raise StemError(f"no KG entity found in {text!r}\n  how to fix: mark the topic entity with "
                            "[brackets], e.g. 'what films did [Tom Hanks] star in'")
        best = links[0]
        twins = sorted({link.entity for link in links if (link.start, link.end, link.kind, link.name)
                        == (best.start, best.end, best.kind, best.name)})
        if len(twins) > 1:
            raise self._ambiguous(best.mention, twins)
        link = {"mentions": [best.mention], "entities": [self.display(best.entity)], "match": [best.kind],
                "score": round(float(best.score), 4)}
        return Question(qid, clean, (best.entity,), ()), link

    def _resolve_mention(self, mention: str, by_name: dict[str, str]) -> tuple[str, str]:
        """(entity id, how it matched) for a topic mention: a name (exact, then case-insensitive, then the
        linker's), else an entity id; a name several entities carry is an error naming them."""
        if mention in by_name:
            if mention in self._same_name:
                raise self._ambiguous(mention, self._same_name[mention])
            return by_name[mention], "exact"
        if mention in self.index.entity_ids:  # an opaque id named directly (how a shared name is disambiguated)
            return mention, "id"
        lowered = sorted({e for name, e in by_name.items() if name.lower() == mention.lower()}
                         | {e for name, ids in self._same_name.items() if name.lower() == mention.lower() for e in ids})
        if len(lowered) > 1:
            raise self._ambiguous(mention, lowered)
        if lowered:
            return lowered[0], "case-insensitive"
        links = [link for link in self.linker().link(mention) if link.mention.lower() == mention.lower()]
        if links:
            twins = sorted({link.entity for link in links if (link.kind, link.name) == (links[0].kind, links[0].name)})
            if len(twins) > 1:
                raise self._ambiguous(mention, twins)
            return links[0].entity, links[0].kind
        raise StemError(f"topic entity [{mention}] is not in the KG\n  how to fix: use an entity name as it "
                        "appears in the KG (or drop the brackets to let the entity linker search)")

    def linker(self) -> Any:
        with self._lock:
            if self._linker is None:

                self._linker = EntityLinker.from_index(self.index, self.dataset.entity_names)
            return self._linker

    # ----- retrieval --------------------------------------------------------------------------
    def retrieve(self, questions: str | Question | Sequence[str | Question], *, method: str = "stem") -> list[Answer]:
        """Answer one question or a batch (strings or :class:`Question`) with ``method``.

        Safe to call from several threads (they take turns; see the class docstring)."""
        if isinstance(questions, str | Question):
            items = [questions]
        elif isinstance(questions, Sequence) and not isinstance(questions, bytes | bytearray):
            items = list(questions)
        else:
            items = [checked_question(questions)]  # raises: not a question, nor a list of them
        items = [checked_question(q) for q in items]
        with self._lock:
            return self._retrieve(items, method)

    def _retrieve_chunks(self, chosen: Any, batch: list[Question]) -> list[Any]:
        """``chosen.retrieve(batch)``; a batch of more than ``engine.chunk_questions`` is retrieved in chunks of
        that size with the next chunk planned, encoded and traced while the one before is ranked
        (:func:`~stem_jax.eval.overlap.retrieve_overlapped`), as ``eval`` does: the same answers."""
        size = self.config.engine.chunk_questions
        if len(batch) <= size:
            return chosen.retrieve(batch)
        chunks = [batch[start : start + size] for start in range(0, len(batch), size)]
        with contextlib.closing(retrieve_overlapped(chosen, chunks)) as pairs:
            return [retrieval for _, retrievals in pairs for retrieval in retrievals]

    def _retrieve(self, items: list[str | Question], method: str) -> list[Answer]:

        parsed: list[tuple[Question, dict | None]] = [
            self.question(q) if isinstance(q, str) else (q, None) for q in items]
        if self._plans_from_gold() and method in ("stem", "safe"):
            parsed = [(self._with_gold_path(q), link) for q, link in parsed]
        batch = [q for q, _ in parsed]
        _check_distinct_ids(batch, repeats_allowed=True)
        chosen = self.method(method)
        if hasattr(chosen, "keep_online"):
            chosen.keep_online = self.keep_prepared
        if hasattr(chosen, "forget") and not self.keep_prepared:
            # plan again: a question asked twice is timed end to end both times
            chosen.forget([q.qid for q in batch])
        began = time.perf_counter()
        retrievals = self._retrieve_chunks(chosen, batch)
        total_ms = 1000 * (time.perf_counter() - began) / max(len(batch), 1)
        answers = []
        index = chosen.context.index
        records = make_records(chosen.context, batch, retrievals, chosen.name)
        for (question, link), retrieval, record in zip(parsed, retrievals, records, strict=True):
            evidence = [tuple(t) for t in record.get("evidence", [])]
            # from all the evidence (the record lists at most 256 triples), by KG id (names may repeat); for
            # every method, so that each chain is a reason for an answer (SAFE's matches, SCR's paths stay
            # in record["chains"]: SAFE's include matches that end at no answer)
            chains = answer_chains(
                index.triple_strings(sorted(set(retrieval.evidence))), question.topic_entities,
                [index.entities[e] for e, _ in retrieval.answers], display=self.display)
            stage_ms = dict(record.get("ms", {}))
            stage_ms["total"] = round(total_ms, 3)
            scored = list(zip(record["prediction"], record.get("scores", []), strict=False))
            reason = ((self._no_plan_reason(question, record) if method in ("stem", "safe") else None)
                      or _unmatched_reason(record))
            confident = None
            if method == "stem" and scored:
                threshold = self.config.engine.confident_at
                support = float(record.get("support", scored[0][1]))  # an answer scorer's ranking keeps it apart
                confident = support >= threshold
                if not confident and reason is None:
                    reason = (f"not confident: the plans that reach the best answer hold {support:.2f} of the "
                              f"planner's probability, below engine.confident_at={threshold:g}; the answers may be wrong")
            answers.append(Answer(question, scored, evidence, chains, stage_ms, record, link, reason, confident))
        return answers

    def _no_plan_reason(self, question: Question, record: dict[str, Any]) -> str | None:
        """Why the planner made no plan for ``question`` (the oracle: no gold path), else None."""
        if record["prediction"] or record.get("plans") or not self._plans_from_gold():
            return None

        found = gold_paths(question)
        if found.paths:
            return None
        why = f"it has none ({found.reason})"
        same_text = [q for q in self._split_by_text(question.text)
                     if set(q.topic_entities) != set(question.topic_entities)]
        if question.qid not in self._split_qids() and same_text:
            about = ", ".join(sorted({self.display(t) for q in same_text for t in q.topic_entities})) or "no entity"
            asked = ", ".join(self.display(t) for t in question.topic_entities)
            why = (f"the split's question with this text is about {about}, not {asked} (the topic given), and a "
                   "gold path leaves its own topic only")
        elif question.qid not in self._split_qids():
            why = (f"it is not a question of {self.dataset.name}/{self.dataset_spec.split} ({len(self.dataset.questions)} "
                   "questions, compared word for word, case and spacing aside)")
        return (f"the oracle planner plans from the dataset's gold relation path, and {why}; the pattern planner "
                "(--planner pattern, planner=\"pattern\") plans from the question's words")

    def _split_qids(self) -> set[str]:
        if self._qids is None:
            self._qids = {q.qid for q in self.dataset.questions}
        return self._qids

    def warm_up(self, batch_questions: int = 1, *, method: str = "stem",
                step_buckets: Sequence[int] | None = None, log: Log | None = None,
                topics: int | None = None) -> dict[str, Any]:
        """Compile, ahead of the first question, what a :meth:`retrieve` of up to ``batch_questions``
        questions can reach: the encoder's short-row forwards, every tracer shape of the capacity
        ladder at the padded batch sizes those runs can take, and (with GNN guidance) the reach bin
        shapes of such calls over a sample of the split, so that warm calls (almost) never compile.

        ``step_buckets``: schema-graph lengths to cover (default: those of the pattern planner's
        templates, else 1, 2 and 4 steps). ``log`` receives a line before and after each part (what it
        compiles, then how many shapes in how long). ``topics``: the topic entities per question to cover (a
        plan is traced from each topic it names: a run per beam and topic at most; default the most a question
        of the split has). Returns what was compiled and how long it took.

        A server that wants to answer sooner warms for one question with one topic here, then calls
        :meth:`warm_up_rest` for the larger batches while it serves."""
        with self._lock:
            return self._warm_up(batch_questions, method, step_buckets, log or _quiet, topics)

    def _warm_step_buckets(self, step_buckets: Sequence[int] | None) -> list[int]:
        if step_buckets is None:
            templates = getattr(self.planner, "templates", None) if self.planner_spec.plans is None else None
            step_buckets = sorted({len(t.triples) for t in templates}) if templates else (1, 2, 4)
        return list(step_buckets)

    def _warm_runs(self, batch_questions: int, topics: int | None = None) -> int:
        """The most runs a call of ``batch_questions`` questions of ``topics`` topic entities each (default the most
        a question of the split has) can trace: a run per beam and topic."""
        if topics is None:
            topics = max((len(q.topic_entities) for q in self.dataset.questions), default=1)
        return batch_questions * self.config.planner.beam * max(topics, 1)

    def _warm_up(self, batch_questions: int, method: str, step_buckets: Sequence[int] | None,
                 log: Log = _quiet, topics: int | None = None) -> dict[str, Any]:
        began = time.perf_counter()
        info: dict[str, Any] = {}
        if hasattr(self.encoder, "warm_up"):
            log(f"  compiling the encoder ({getattr(self.encoder, 'name', 'encoder')}): one forward per short row shape ...")
            part = time.perf_counter()
            info["encoder_compiles"] = self.encoder.warm_up()
            log(f"  encoder: {info['encoder_compiles']} shapes in {time.perf_counter() - part:.1f}s")
        log(f"  building the {method} method (planner, plans' text table) ...")
        part = time.perf_counter()
        warm_up = getattr(self.method(method), "warm_up", None)  # methods with compiled tracers offer one
        log(f"  {method}: ready in {time.perf_counter() - part:.1f}s")
        if warm_up is not None:
            step_buckets = self._warm_step_buckets(step_buckets)
            runs = self._warm_runs(batch_questions, topics)
            log(f"  compiling the tracer: plans of {', '.join(map(str, step_buckets))} steps, batches up to {runs} runs "
                "(every capacity of the ladder) ...")
            part = time.perf_counter()
            info["tracer_shapes"] = warm_up(step_buckets, runs)
            log(f"  tracer: {info['tracer_shapes']} shapes in {time.perf_counter() - part:.1f}s")
            info["step_buckets"] = list(step_buckets)
            info["max_runs"] = runs
            if method == "stem" and self.guidance is not None:
                log("  compiling the Triple-GNN guidance over a sample of the split ...")
                part = time.perf_counter()
                info["gnn_shapes"] = self._warm_up_guidance(batch_questions)
                log(f"  guidance: {info['gnn_shapes']} shapes in {time.perf_counter() - part:.1f}s")
        info["seconds"] = round(time.perf_counter() - began, 3)
        return info

    def warm_up_rest(self, batch_questions: int, *, after_questions: int = 1, after_topics: int | None = None,
                     method: str = "stem", step_buckets: Sequence[int] | None = None,
                     stop: threading.Event | None = None, progress: Callable[[int, int], None] | None = None,
                     log: Log | None = None) -> dict[str, Any]:
        """What :meth:`warm_up` of ``batch_questions`` compiles beyond :meth:`warm_up` of ``after_questions`` with
        ``after_topics`` (which must have run): the tracer shapes of the larger calls, one at a time, the smaller
        padded batches and capacities first (those a few questions reach), and (with GNN guidance) the guidance
        shapes.

        Made for a server that already answers: a tracer shape compiles without holding the engine's lock
        (compiling reads the method's tables only), so requests keep being answered meanwhile; one that needs a
        shape not compiled yet compiles it itself. A shape that no call can use any more is skipped. ``stop``:
        when set, returns after the shape being compiled. ``progress(done, total)`` is called after each shape.
        Returns the shapes compiled and skipped, and the seconds."""
        log = log or _quiet
        began = time.perf_counter()
        with self._lock:
            rest = getattr(self.method(method), "warm_up_rest", None)  # methods with compiled tracers offer one
            buckets = self._warm_step_buckets(step_buckets)
        if rest is None:  # no compiled tracer (SAFE, SCR)
            return {"tracer_shapes": 0, "tracer_skipped": 0, "stopped": False,
                    "seconds": round(time.perf_counter() - began, 3)}
        info = rest(buckets, self._warm_runs(after_questions, after_topics), self._warm_runs(batch_questions),
                    stop=stop, progress=progress, log=log)
        log(f"  tracer: {info['tracer_shapes']} shapes in {time.perf_counter() - began:.1f}s"
            + (f" ({info['tracer_skipped']} no call can use any more, skipped)" if info["tracer_skipped"] else ""))
        if not info["stopped"] and method == "stem" and self.guidance is not None:
            with self._lock:
                part = time.perf_counter()
                info["gnn_shapes"] = self._warm_up_guidance(batch_questions)
                log(f"  guidance: {info['gnn_shapes']} shapes in {time.perf_counter() - part:.1f}s")
        info["seconds"] = round(time.perf_counter() - began, 3)
        return info

    def _warm_up_guidance(self, batch_questions: int, calls: int = 64, max_questions: int = 4096) -> int:
        """Run GNN guidance, uncached, on up to ``calls`` batches of ``batch_questions`` questions
        (``max_questions`` in all) spread over the loaded split, so that the reach bin shapes such
        calls need are compiled (their sizes spread over three orders of magnitude on MetaQA: a hub in
        a question's subgraph). Returns how many shapes compiled."""
        from stem_jax.gnn.infer import reach_forward_fn

        questions = list(self.dataset.questions)
        if not questions:
            return 0
        stem = self.method("stem")
        guidance = self.guidance
        count = min(len(questions), calls * batch_questions, max(max_questions, batch_questions))
        sample = questions[:: max(1, len(questions) // count)][:count]
        plan, _ = stem.planner_for(sample)
        runs, _ = stem.plan_runs(sample, plan)
        forward = reach_forward_fn(guidance.spec.layers)
        before = forward._cache_size()
        cache_dir, guidance.cache_dir = guidance.cache_dir, None
        try:
            for lo in range(0, len(sample), batch_questions):
                pairs, _ = guidance.queries(sample[lo : lo + batch_questions], runs[lo : lo + batch_questions])
                guidance.table(pairs, show_progress=False)
        finally:
            guidance.cache_dir = cache_dir
        return forward._cache_size() - before

    def ask(self, question: str | Question, *, method: str = "stem") -> Answer:
        """Answer one question."""
        return self.retrieve([question], method=method)[0]

    def evaluate(self, out: Path | str, *, questions: Sequence[Question] | None = None, method: str = "stem",
                 show_progress: bool | None = None, overwrite: bool = False,
                 overlap: int = DEFAULT_OVERLAP) -> dict[str, Any]:
        """Evaluate ``questions`` (default: the loaded split) into the run folder ``out`` (resumable).

        ``overlap``: chunks traced ahead on a background thread while the one before is ranked and written
        (0: none; the predictions are the same).

        ``out`` is fingerprinted (:meth:`results_fingerprint`): a folder holding another run's results is
        refused unless ``overwrite`` (which drops them). Leaves what ``stem-jax eval`` leaves there:
        ``predictions.jsonl``, ``fingerprint.json`` (the settings), ``metrics.json`` (the summary returned,
        with the dataset, split, method, planner, config and machine) and ``metrics.md``."""

        if not isinstance(out, str | os.PathLike):
            raise StemError(f"out={out!r:.60}: expected a run folder path (str or Path)\n"
                            "  how to fix: pass e.g. \"runs/my-eval\"")
        with self._lock:

            chosen_questions = list(self.dataset.questions if questions is None else questions)
            _check_distinct_ids(chosen_questions, repeats_allowed=False)
            fingerprint = self.results_fingerprint(method)
            chosen = self.method(method)
            started = time.perf_counter()

            def report(summary: dict[str, Any]) -> dict[str, Any]:
                rest = {k: v for k, v in summary.items() if k != "planning"}
                return {"dataset": self.dataset.name, "split": self.dataset_spec.split, "method": method,
                        "planner": self.planner_spec.label if method != "scr" else "scr",
                        "planner_info": {**self.planner_info, **summary.get("planning", {})},
                        "config": as_dict(self.config),
                        "dataset_skips": dict(self.dataset.skips.counts), "compiles": _compile_counts(),
                        "wall_seconds": time.perf_counter() - started, **rest}

            # the loaded split is what ``questions`` are a share of (a shard of `eval --num-processes N`)
            return evaluate_method(chosen, chosen_questions, Path(out),
                                   selection=selection_of(self.dataset.questions),
                                   chunk_size=self.config.engine.chunk_questions,
                                   show_progress=self.show_progress if show_progress is None else show_progress,
                                   log=self.log, fingerprint=fingerprint, overwrite=overwrite, report=report,
                                   overlap=overlap)

    def results_fingerprint(self, method: str = "stem") -> dict[str, Any]:
        """Everything that changes ``method``'s results here: config, method, planner, KG, encoder, data."""

        return engine_fingerprint(self, method)

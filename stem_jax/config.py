"""Frozen configuration dataclasses: the engine's defaults.

The defaults are the best measured configuration, not the paper's literal engine: the paper's
hyper-parameters (λ, τ, θ, K', N, B, L) keep its values, while the engine fields (relation bonus,
exact anchoring, topic exclusion, beam ranking, ...) follow the evidence noted beside them and θ and
the KG's conventions come from `stem-jax calibrate` where stored. ``--engine.preset=paper`` gives
the paper-literal engine (:mod:`stem_jax.methods.stem.settings`).

Every field can be overridden from the command line as ``--<section>.<field>=VALUE``
(for example ``--tracer.lam=1.2 --tracer.theta=0.5``); see :func:`apply_overrides`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

from stem_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class TracerConfig:
    """Structure-tracing retrieval (paper §3.4-3.5, Algorithms 1-2)."""

    lam: float = 1.5  # λ: anchor-score multiplier for entities inside the guidance graph
    tau: float = 0.5  # τ: T-Score bonus for KG triples inside the guidance graph
    theta: float = 0.6  # θ: Breadth-strategy threshold on T-Score
    top_n: int = 50  # N: anchor candidates per question entity
    breadth_cap: int = 0  # per-node cap on Breadth matches; 0 = no cap (the authors' code uses 12)
    # How the jit tracer reads a step's edges (same outputs either way): "blocks" (small blocks, CPUs), "flat" (one
    # wide block per step, accelerators) or "auto" (blocks on the CPU backend, flat on GPU/TPU; docs/performance.md)
    backend: str = "auto"


@dataclasses.dataclass(frozen=True)
class GuidanceConfig:
    """Global guidance graph (paper §3.3)."""

    k_prime: int = 4  # K': guidance-graph size is |T|·K' entities


@dataclasses.dataclass(frozen=True)
class GNNConfig:
    """Triple-GNN (paper appendix A)."""

    layers: int = 6  # L
    d_gnn: int = 512


@dataclasses.dataclass(frozen=True)
class PlannerConfig:
    """Schema-graph planner (paper §3.1-3.2)."""

    beam: int = 4  # B: candidate schema graphs per question
    retries: int = 5  # planner retries before falling back to Precision (paper footnote 5)
    min_prob: float = 0.0  # pattern planner: drop beams (after the first) below this probability; 0 keeps B
    max_triples: int = 8  # T_max of a plan store: longer schema graphs are dropped and counted
    llm_prompts: str = "compact"  # LLM planner prompts: compact (small models) or full (the paper's P1/P2 rules)
    llm_grammar: bool = True  # constrain LLM output with a GBNF grammar (needs llm_prompts=compact)
    llm_server: str = "auto"  # OpenAI-compatible server flavour: auto (asks /v1/models), vllm or llama.cpp
    paths: str = "auto"  # pattern planner: "templates", "paths" (KG-constrained path ranker), "both", or "auto" (chosen on dev)
    mix_weight: float = 0.0  # planner.paths=both: the templates' share of a plan's probability (0: train-planner's choice)
    path_pairs: bool = False  # path ranker: also train on relation-paths.jsonl's topic-less pairs (webqsp-r dev: worse)
    # path ranker's question side: "frozen" (the sentence encoder's vectors), "tuned" (its top path_tune_layers layers
    # fine-tuned with the ranker, stored in the planner) or "auto" (both trained, chosen on held-out questions)
    path_question: str = "frozen"
    path_tune_layers: int = 1
    # path ranker: the longest relation path it enumerates from a topic (a hop through a CVT counts as a step);
    # 3 reaches "the X of the Y that Z" questions through a mediator, at a larger candidate list per topic
    path_max_hops: int = 2
    # "auto": train-planner also trains a ranker one step longer (path_max_hops + 1, at most 4) and the held-out
    # questions choose between them as between templates and paths; "fixed": path_max_hops only
    path_hops: str = "auto"
    # constraint branches for questions with several topic entities (plan/branch_planner.py): "auto" plans them with
    # the branch model train-planner stored beside the path ranker (none on templated KGs), "off" never does
    branches: str = "auto"
    hybrid_consult_below: float = 0.5  # hybrid: ask the LLM only where the pattern's top probability is below this
    # (>1: always; always asking SmolLM2-135M made plans worse than the pattern planner's on MetaQA)


@dataclasses.dataclass(frozen=True)
class SubgraphConfig:
    """Per-question k-hop neighbourhoods for datasets with one global KG."""

    hops: int = 0  # 0 = use the question's own hop count (MetaQA), else a fixed radius
    hub_cap: int = 2000  # nodes with more incident triples are kept but not expanded through


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
    """Text encoder (the paper's PEM)."""

    name: str = "minilm"  # "minilm" (all-MiniLM-L6-v2 in Flax) or "hashing" (unit tests only)
    batch_size: int = 128
    max_length: int = 64  # longest token bucket; longer strings are truncated (counted)
    chunk_rows: int = 4096  # rows per TensorStore chunk (also the resume granularity)
    # Matmul operands of the online encodes (questions, schema texts, mentions): "bfloat16" (float32 accumulation;
    # faster on CPUs with bfloat16 matmuls, answers unchanged on the KGs tested: experiments/results/
    # encoder-precision-accuracy.md), "float32" (slower there, faster on CPUs without them: encoder-dot-dtype-auto.md)
    # or "auto": bfloat16 on accelerators and on CPUs whose flags name bfloat16 matmuls, else float32.
    # Embedding caches are always built in float32.
    dot_dtype: str = "auto"
    # What encodes a question online (the planners' question vectors): "minilm" (the model above, the same vectors
    # as every cache) or "student" (a one-layer encoder distilled into MiniLM's space, stem_jax/encoder/student.py:
    # about a sixth of MiniLM's work; its vectors are close to MiniLM's, not equal, so plans and answers can move:
    # docs/question-encoder.md). KG rows, schema texts and every cache stay MiniLM's either way.
    question_encoder: str = "minilm"
    # How the tracer stores and reads triple rows (stem_jax/encoder/compact.py): float16 (768 B a row at d=384),
    # int8 (d + 4 B), pca<k> (float16, 2k B) or pca<k>-int8 (k + 4 B), the projection fitted on the KG's own rows.
    # pca128-int8: 132 B a row (5.8x fewer), Hit@1 and F1 within 0.1 point of float16 or better on MetaQA (each hop),
    # WorldCup2014 (P1/P2/C) and the demo KG (experiments/results/compact-rows.md)
    row_format: str = "pca128-int8"
    # Schema-step texts naming an entity (``Kismet directed by [ENT1]``: every (entity, relation) pair of the KG,
    # both orientations) encoded once per KG into a cache and read online instead of encoded, when the KG has at
    # most this many (MetaQA: 219,678; 0: never); the same cap holds for the relation steps between placeholders
    # (``[ENT1] directed by [ENT2]``, stem_jax/kg/relation_steps.py). Questions are always encoded (kg/step_table.py)
    step_table_max: int = 250_000


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Capacities and batching of the JAX tracer (not paper hyper-parameters)."""

    frontier: int = 64  # bindings kept per schema node in Breadth runs (Precision needs 1)
    node_matches: int = 16  # Breadth matches per node and step when tracer.breadth_cap is 0
    window: int = 512  # incident edges scored per block (all runs of a batch share blocks)
    guidance: int = 64  # guidance entities per run
    batch_precision: int = 256  # runs per compiled Precision batch
    batch_breadth: int = 64  # runs per compiled Breadth batch
    relation_bonus: bool = True  # the authors' code: +1 T-Score for exact relation matches (MetaQA evidence)
    chunk_questions: int = 2048  # questions written to predictions.jsonl per resumable chunk
    preset: str = "default"  # "paper": the paper-literal engine (no bonus/exact anchor/topic exclusion, max rank)
    exact_anchor: bool = True  # the topic entity the question names is its anchor (wins case/accent twins)
    exclude_topic: bool = True  # drop the question's topic entities from its answers (MetaQA convention)
    confident_at: float = 0.9  # best answer's beam support below this: not confident (chosen on webqsp-r dev)
    skip_mediators: bool = True  # never return mediator nodes (Freebase CVT mids, unnamed joins) as answers
    # "auto": re-rank and cut answers with the KG's learned answer scorer when train-planner stored one
    # (stem_jax/answer/scorer.py; kept only where it beat the tracer's ranking on held-out questions); "off": never
    answer_scorer: str = "auto"
    # "auto": a value condition the question states ("after 1990", "the largest") is applied to the answers where
    # the KG holds the values as literal entities (stem_jax/answer/values.py); "off": never
    value_conditions: str = "auto"
    # where the runs of a batch are ranked into answers when no answer scorer is used: "host" (numpy,
    # stem_jax/answer/rank.py), "device" (one jitted call, kernels/answers.py; identical answers), "auto": device
    # on an accelerator, host on CPU (where the host measured faster: docs/performance.md)
    answers_on: str = "host"
    max_frontier: int = 1024  # overflowing Breadth runs are re-traced with 2x, 4x, ... capacity up to this
    # >1: the KG's triples cut over this many devices (stem_jax/shard, docs/sharded-kg.md), each scoring the triples
    # it holds, candidates merged with collectives; answers identical to 1 (one replicated copy)
    kg_shards: int = 1
    rank: str = "beam"  # "beam": beam support, then length-fair score; "max": best cumulative score (paper)
    answer_cut: float = 0.5  # keep answers whose beam support >= this x the best answer's support
    beam_gap: float = 0.5  # a beam supports only entities within this of its best length-fair score (inf: off)
    strategy: str = "breadth"  # "breadth": trace every plan as Breadth (MetaQA dev evidence); "planner": its own
    calibrated: bool = True  # use the encoder's dev-calibrated θ (stem_jax.methods.stem.settings) when one is stored
    guidance_admits: bool = False  # True (paper): τ counts in Breadth's θ test; False: θ tests T without τ
    # Per-KG conventions: `stem-jax calibrate` stores the ones a KG's dev split prefers, and
    # they apply where these and exclude_topic are left at their defaults (methods/stem/settings.py).
    direction: str = "undirected"  # "directed": a schema triple matches KG triples of its own orientation only
    used_triples: str = "run"  # a KG triple is used once per "run" (Algorithm 2), per "branch", or per "step"


@dataclasses.dataclass(frozen=True)
class ScrConfig:
    """SCR, stepwise contrastive reasoning (the SCR paper; departures in stem_jax/methods/scr)."""

    layers: int = 3  # L relational message-passing (GAT-style) layers
    dim: int = 128  # d of the GNN and question head (paper: BERT's 768; smaller keeps CPU training short)
    head_layers: int = 1  # trainable attention layers over the frozen MiniLM segments of the context
    tau: float = 0.05  # InfoNCE / selection temperature τ (eq. 11)
    beam: int = 10  # K: beam width and number of (path, answer) hypotheses kept (eqs. 12-15)
    threshold: float = 0.02  # drop hypotheses whose path probability (eq. 14) is below this
    max_steps: int = 4  # reasoning steps before a beam is forced to stop (MetaQA: 3 hops + stop)
    neighbours: int = 256  # candidate cap per entity (hubs: deterministic sample) and GNN in-degree cap
    batch_questions: int = 64  # questions per jitted search batch
    lr: float = 1e-3
    steps: int = 400  # optimiser steps (batches of train_batch questions)
    train_batch: int = 128  # questions per training batch (all their steps; the whole-KG GNN pass dominates a step)
    eval_every: int = 25  # validation loss/accuracy every N steps (also the checkpoint interval)
    min_hops: int = 1  # search: no stop before this many hops (a topic answer is dropped anyway); 0 = paper
    answer_cut: float = 0.0  # search: keep answers with at least this share of the best answer's probability (0: all)
    relation_aware: bool = False  # scr+rel: a candidate's feature includes its linking relation (not the paper)
    patience: int = 4  # early stopping: end after this many validations without a better one (0: off)
    question_encoder: str = "segments"  # segments: head over frozen MiniLM segment vectors; minilm: fine-tuned MiniLM
    finetune_layers: int = 2  # minilm: trainable top layers of MiniLM-L6 (the rest frozen, to fit the CPU)
    context_tokens: int = 64  # minilm: tokens of a context string [CLS] q [SEP] e0 [SEP] r1 [SEP] e1 ... (cut past)
    encoder_lr: float = 1e-4  # minilm: learning rate of the pretrained MiniLM layers (lr: everything else)


@dataclasses.dataclass(frozen=True)
class SafeConfig:
    """SAFE, schema-driven approximate distance join (the SAFE paper; departures in stem_jax/methods/safe)."""

    k_schema: int = 3  # candidate schema edges per pseudo edge (ADJ step 1)
    delta: int = 1  # δ: edge-distance threshold of the distance edge join (Algorithm 1)
    k_qg: int = 5  # schema-aligned query graphs kept per pseudo query graph
    k_ent: int = 3  # |SimEnt|: KG entities per named query node (value retrieval)
    k_rel: int = 10  # |SimRel|: KG relations per query relation
    k_typ: int = 8  # |SimTyp|: entity types a variable node may take
    k_retrieval: int = 100  # top matches per query graph (more: better 3-hop recall, a slower search)
    beams: int = 1  # planner beams used as pseudo query graphs (the paper's LLM writes one)
    containment: float = 0.75  # merge relation roles into one entity type when this share of the smaller overlaps
    min_support: int = 1  # θ_supp: schema edges need this many KG triples (paper C.2)
    min_confidence: float = 0.0001  # θ_conf: ... and this share of the domain type's entities (paper C.2)
    min_share: float = 0.01  # ... and this share of its relation's triples (drops name-collision noise; not in the paper)
    injective: bool = True  # a KG entity binds at most one query node (MetaQA dev: 3-hop Hit@1 90.5 -> 97.5); False: Def. 1
    answer_margin: float = 0.0  # keep answers within this distance of the best (MetaQA dev: 0 best, phrases too); < 0: all
    use_adj: bool = True  # False: match the pseudo query graph as written (the paper's "w/o ADJ" ablation)
    relation_phrases: bool = False  # True: planner templates rendered with relation phrases, not KG ids (ADJ aligns them)


@dataclasses.dataclass(frozen=True)
class StemConfig:
    tracer: TracerConfig = TracerConfig()
    guidance: GuidanceConfig = GuidanceConfig()
    gnn: GNNConfig = GNNConfig()
    planner: PlannerConfig = PlannerConfig()
    subgraph: SubgraphConfig = SubgraphConfig()
    encoder: EncoderConfig = EncoderConfig()
    engine: EngineConfig = EngineConfig()
    scr: ScrConfig = ScrConfig()
    safe: SafeConfig = SafeConfig()
    seed: int = 0  # the demo KG, WorldCup2014's 8:1:1 split, and planner, GNN and SCR training
    # The dotted options a flag or an override set (apply_overrides records them), whatever their value: an explicit
    # --tracer.theta=0.6 wins over a stored calibration although 0.6 is the default. Not an option itself.
    given: frozenset[str] = dataclasses.field(default=frozenset(), compare=False, repr=False,
                                              metadata={"option": False})


def default_data_dir() -> Path | None:
    """``$STEM_DATA_DIR`` (the shared benchmark data), or None when unset."""
    value = os.environ.get("STEM_DATA_DIR")
    return Path(value) if value else None


def default_cache_dir() -> Path:
    """``$STEM_CACHE_DIR``, else ``~/.cache/stem_jax``: embeddings and plans live here."""
    value = os.environ.get("STEM_CACHE_DIR")
    return Path(value) if value else Path.home() / ".cache" / "stem_jax"


def _convert(value: str, annotation: Any, name: str) -> Any:
    if isinstance(annotation, str):
        annotation = {"float": float, "int": int, "str": str, "bool": bool}.get(annotation, annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    try:
        if annotation is bool:
            lowered = value.lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return lowered in ("1", "true", "yes")
        return annotation(value)
    except (TypeError, ValueError):
        raise ValueError(f"--{name}={value!r}: expected a value of type {getattr(annotation, '__name__', annotation)}") from None


def config_fields(config: Any = None, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """All overridable leaves as (dotted name, default value, type annotation)."""
    config = StemConfig() if config is None else config
    hints = typing.get_type_hints(type(config))
    leaves = []
    for field in dataclasses.fields(config):
        if not field.metadata.get("option", True):
            continue
        value = getattr(config, field.name)
        name = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            leaves.extend(config_fields(value, name + "."))
        else:
            leaves.append((name, value, hints[field.name]))
    return leaves


def apply_overrides(config: Any, overrides: dict[str, str]) -> Any:
    """Return ``config`` with dotted ``{"tracer.lam": "1.2"}`` overrides applied (values as strings)."""
    known = {name: annotation for name, _, annotation in config_fields(config)}
    for name in overrides:
        if name not in known:
            close = [k for k in known if k.split(".")[-1] == name.split(".")[-1]]
            hint = f" Did you mean --{close[0]}?" if close else " See `stem-jax config` for the list."
            raise ValueError(f"unknown config option --{name}.{hint}")
    config = _apply(config, overrides, known, "")
    if isinstance(config, StemConfig) and overrides:
        config = dataclasses.replace(config, given=config.given | frozenset(overrides))
    return check(config)


def given(config: StemConfig, name: str) -> bool:
    """Whether the option ``name`` (dotted) was set explicitly, by a flag or an override, or holds a value other
    than its default (a config built in code): else it is unset, and a stored calibration may choose it."""
    section, _, field = name.rpartition(".")
    value = getattr(getattr(config, section) if section else config, field)
    default = getattr(getattr(StemConfig(), section) if section else StemConfig(), field)
    return name in config.given or value != default


def _apply(config: Any, overrides: dict[str, str], known: dict[str, Any], prefix: str) -> Any:
    changes = {}
    for field in dataclasses.fields(config):
        name = f"{prefix}{field.name}"
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            if any(k.startswith(name + ".") for k in overrides):
                changes[field.name] = _apply(value, overrides, known, name + ".")
        elif name in overrides:
            changes[field.name] = _convert(overrides[name], known[name], name)
    return dataclasses.replace(config, **changes) if changes else config


def as_dict(config: Any) -> dict[str, Any]:
    """The options of ``config`` as nested dicts (what fingerprints and reports store; not ``given``)."""
    values = dataclasses.asdict(config)
    if isinstance(config, StemConfig):
        del values["given"]
    return values


# ---------------------------------------------------------------------------------------------
# Validation: every range and relation between fields, checked before any work starts
# ---------------------------------------------------------------------------------------------

MAX_PATH_HOPS = 4  # the longest relation path the path ranker enumerates (a topic has up to fan_cap ** hops)

# A compiled batch's arrays grow with runs x frontier x steps (step embeddings, bindings, sorted used-triple
# rows, candidate buffers), indexed with int32: the cap keeps a mistyped batch size from failing later, inside
# XLA, with an allocation error or a traceback instead of this message.
MAX_BATCH_RUNS = 16384
_MAX_BATCH_WHY = ("a compiled batch holds runs x frontier x steps bindings, used-triple rows and candidate buffers "
                  "(int32-indexed); the default batch sizes are 64-256")
_CHOICES = {
    "tracer.backend": ("auto", "blocks", "flat"),
    "encoder.name": ("minilm", "hashing"),
    "encoder.dot_dtype": ("auto", "float32", "bfloat16"),
    "encoder.question_encoder": ("minilm", "student"),
    "engine.preset": ("default", "paper"),
    "engine.rank": ("beam", "max"),
    "engine.answer_scorer": ("auto", "off"),
    "engine.value_conditions": ("auto", "off"),
    "engine.answers_on": ("host", "device", "auto"),
    "engine.strategy": ("planner", "breadth"),
    "engine.direction": ("undirected", "directed"),
    "engine.used_triples": ("run", "branch", "step"),
    "planner.llm_prompts": ("compact", "full"),
    "planner.llm_server": ("auto", "vllm", "llama.cpp"),
    "planner.paths": ("auto", "templates", "paths", "both"),
    "planner.path_question": ("frozen", "tuned", "auto"),
    "planner.branches": ("auto", "off"),
    "planner.path_hops": ("auto", "fixed"),
    "scr.question_encoder": ("segments", "minilm"),
}
_ROW_FORMAT = re.compile(r"^(float16|int8|pca[1-9][0-9]*(-int8|-float16)?)$")  # encoder.row_format (encoder/compact.py)
_INT_MIN = {  # integer fields and their smallest allowed value
    "tracer.top_n": 1, "tracer.breadth_cap": 0, "guidance.k_prime": 1, "gnn.layers": 1, "gnn.d_gnn": 1,
    "planner.beam": 1, "planner.retries": 0, "planner.path_tune_layers": 1, "planner.max_triples": 1,
    "planner.path_max_hops": 1,
    "subgraph.hops": 0, "subgraph.hub_cap": 1,
    "encoder.batch_size": 1, "encoder.max_length": 1, "encoder.chunk_rows": 1, "encoder.step_table_max": 0,
    "engine.frontier": 1, "engine.kg_shards": 1, "engine.node_matches": 1, "engine.window": 1, "engine.guidance": 1,
    "engine.batch_precision": 1, "engine.batch_breadth": 1, "engine.chunk_questions": 1, "engine.max_frontier": 1,
    "scr.layers": 1, "scr.dim": 1, "scr.head_layers": 0, "scr.beam": 1, "scr.max_steps": 1, "scr.neighbours": 1,
    "scr.batch_questions": 1, "scr.steps": 0, "scr.train_batch": 1, "scr.eval_every": 1, "scr.min_hops": 0, "scr.patience": 0,
    "scr.finetune_layers": 0, "scr.context_tokens": 8,
    "seed": 0,
    "safe.k_schema": 1, "safe.delta": 0, "safe.k_qg": 1, "safe.k_ent": 1, "safe.k_rel": 1, "safe.k_typ": 1,
    "safe.k_retrieval": 1, "safe.beams": 1, "safe.min_support": 0,
}
_INT_MAX = {  # integer fields with an upper bound, and why
    "engine.batch_precision": (MAX_BATCH_RUNS, _MAX_BATCH_WHY),
    "engine.batch_breadth": (MAX_BATCH_RUNS, _MAX_BATCH_WHY),
    "encoder.max_length": (512, "MiniLM has 512 position embeddings"),
    "encoder.batch_size": (1 << 16, "the encoder packs batch_size strings per device call"),
    "engine.window": (1 << 20, "a block of window edges is scored per run and step"),
    "engine.frontier": (1 << 16, "bindings per schema node are kept for every run of a batch"),
    "engine.max_frontier": (1 << 16, "bindings per schema node are kept for every run of a batch"),
    "engine.node_matches": (1 << 16, "matches per node are buffered for every run of a batch"),
    "seed": ((1 << 32) - 1, "numpy seeds are 32-bit"),
    "scr.finetune_layers": (6, "all-MiniLM-L6-v2 has 6 layers"),
    "planner.path_max_hops": (MAX_PATH_HOPS, "a topic's paths are enumerated up to fan_cap ** hops"),
    "scr.context_tokens": (512, "MiniLM has 512 position embeddings"),
}
_FLOAT_RANGE = {  # float fields: (low, high, low inclusive, high inclusive, why)
    "tracer.lam": (0.0, math.inf, False, False, "λ multiplies anchor scores"),
    "tracer.tau": (0.0, math.inf, True, False, "τ is a T-Score bonus"),
    "tracer.theta": (0.0, 1.0, True, True, "θ thresholds a cosine-based T-Score"),
    "planner.min_prob": (0.0, 1.0, True, True, "a probability"),
    "engine.answer_cut": (0.0, 1.0, True, True, "a share of the best answer's support"),
    "engine.confident_at": (0.0, 1.0, True, True, "a beam support (summed plan probability)"),
    "planner.mix_weight": (0.0, 1.0, True, True, "the templates' share of a mixed beam (0: chosen by train-planner)"),
    "engine.beam_gap": (0.0, math.inf, True, True, "a length-fair T-Score difference (inf: off)"),
    "scr.tau": (0.0, math.inf, False, False, "a temperature"),
    "scr.threshold": (0.0, 1.0, True, True, "a probability"),
    "scr.lr": (0.0, math.inf, False, False, "a learning rate"),
    "scr.answer_cut": (0.0, 1.0, True, True, "a share of the best answer's probability"),
    "scr.encoder_lr": (0.0, math.inf, True, False, "a learning rate (0: the pretrained layers stay as loaded)"),
    "safe.containment": (0.0, 1.0, True, True, "a share"),
    "safe.min_confidence": (0.0, 1.0, True, True, "a share"),
    "safe.min_share": (0.0, 1.0, True, True, "a share"),
}


def _float_range_text(low: float, high: float, low_in: bool, high_in: bool) -> str:
    if high == math.inf:
        bound = f"a finite number {'>=' if low_in else '>'} {low:g}"
        return bound + " or inf" if high_in else bound
    return f"a number in {'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}"


def validate(config: Any) -> list[str]:
    """Every violated range or relation of ``config``, one line each naming the flag and what it allows.

    An empty list means the config is usable. Fields without a rule are only checked for being
    finite (floats). Unknown sections or fields added later are skipped, not rejected.
    """
    problems = []
    for name, value, _ in config_fields(config):
        problem = field_problem(name, value)
        if problem is not None:
            problems.append(problem)
    return problems


def field_problem(name: str, value: Any, flag: str | None = None) -> str | None:
    """What is wrong with ``value`` for the dotted config field ``name`` (None: nothing), in the words of
    :func:`validate`. ``flag`` names the value in the message (default ``--name=value``): a sweep's
    ``--theta nan`` is checked by the same rule as ``--tracer.theta=nan``."""
    if flag is None:
        flag = f"--{name}={value!r}" if isinstance(value, str) else f"--{name}={value}"
    if name in _CHOICES and value not in _CHOICES[name]:
        return f"{flag}: expected one of {', '.join(_CHOICES[name])}"
    if name == "encoder.row_format" and not _ROW_FORMAT.match(str(value)):
        return f"{flag}: expected float16, int8, pca<k> or pca<k>-int8 (e.g. pca128-int8)"
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        low = _INT_MIN.get(name)
        high, why = _INT_MAX.get(name, (None, ""))
        if low is not None and value < low:
            allowed = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
            return f"{flag}: expected {allowed}"
        if high is not None and value > high:
            return f"{flag}: expected an integer <= {high} ({why})"
    elif isinstance(value, float):
        if name in _FLOAT_RANGE:
            low, high, low_in, high_in, why = _FLOAT_RANGE[name]
            unbounded = value == math.inf and high == math.inf and high_in  # "inf" means "off" there
            ok = (math.isfinite(value) or unbounded) and (value >= low if low_in else value > low) and (
                value <= high if high_in else value < high)
            if not ok:
                return f"{flag}: expected {_float_range_text(low, high, low_in, high_in)} ({why})"
        elif not math.isfinite(value):
            return f"{flag}: expected a finite number"
    return None


def check(config: Any) -> Any:
    """``config`` itself when :func:`validate` finds nothing, else :class:`~stem_jax.errors.ConfigError`."""
    problems = validate(config)
    if problems:
        raise ConfigError(problems)
    return config

"""The data STEM's stages hand each other: runs, hyper-parameters, anchored runs and traced runs.

``plan`` makes :class:`Run` s, ``anchor`` turns them into :class:`Anchored`, ``trace`` into :class:`Traced`,
and ``rank`` reads a :class:`Traced` under :class:`RankRules`. Every field is host data (numpy arrays or
plain Python), so each stage can be called, inspected and tested on its own.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import GroundedPlan, SchemaGraph
from stem_jax.trace.tracer import Hyper

STEP_BUCKETS = (1, 2, 4, 8, 16)

Planner = Callable[[Question, KGIndex], list[SchemaGraph]]
Output = dict[str, np.ndarray]  # one traced run's host arrays: nodes, scores, via, parents, overflow, capacity


@dataclasses.dataclass
class Run:
    """One (question, schema graph, anchor) combination: the unit that is anchored and traced."""

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
    ranking's beam gap on guided runs (:func:`~stem_jax.methods.stem.rank.ranking_gap`)."""

    lam: float
    tau: float
    theta: float

    def traced(self) -> Hyper:
        return Hyper(jnp.float32(self.tau), jnp.float32(self.theta))

    def replace(self, **changes: float) -> StemHyper:
        return dataclasses.replace(self, **{k: float(v) for k, v in changes.items()})

    def as_dict(self) -> dict[str, float]:
        return {"lam": self.lam, "tau": self.tau, "theta": self.theta}


@dataclasses.dataclass(frozen=True)
class Anchored:
    """What ``anchor`` gives ``trace``: the runs, each point's guidance rows and each run's anchor at each point.

    ``P`` points (hyper-parameter settings), ``R`` runs, ``G`` guidance entities per run."""

    runs: Sequence[Run]
    hypers: tuple[StemHyper, ...]
    guidance: np.ndarray  # int32 [P, R, G], -1 padded
    entity: np.ndarray  # int32 [P, R]: the anchor entity
    score: np.ndarray  # float32 [P, R]: its (λ-boosted) anchoring score
    seconds: float = 0.0

    @property
    def points(self) -> int:
        return len(self.hypers)


@dataclasses.dataclass(frozen=True)
class Traced:
    """What ``trace`` gives ``rank``: per point, per run, the traced host arrays (:data:`Output`)."""

    runs: Sequence[Run]
    hypers: tuple[StemHyper, ...]
    outputs: list[list[Output]]  # [P][R]
    seconds: dict[str, float]  # "anchor" and "trace" wall seconds


@dataclasses.dataclass(frozen=True)
class RankRules:
    """How ``rank`` turns traced runs into answers: the engine's ranking rule and cut, the beam gap, topic
    exclusion, where the ranking runs, and the entities never returned (mediators)."""

    rule: str
    answer_cut: float
    beam_gap: float
    exclude_topic: bool
    on_device: bool
    min_beams: int
    mediators: np.ndarray | None  # bool [entities], walked through and never returned
    mediator_mask: Any = None  # the same mask on device (used when ``on_device``)
    scorer: Any = None  # a learned answer scorer, or None
    values: Any = None  # the KG's literal values (stem_jax.answer.values.ValueIndex) when conditions are applied
    device_answers: int = 64  # answers per question the device ranking returns in its first call
    device_padding: dict[str, int] = dataclasses.field(default_factory=dict)  # pack_runs' minimum shapes


def steps_bucket(n_steps: int) -> int:
    """The smallest of :data:`STEP_BUCKETS` that holds a plan of ``n_steps`` steps."""
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


def split_by_question(flat: Sequence[Any], runs: Sequence[Sequence[Run]]) -> list[list[Any]]:
    """``flat`` (one item per run, questions' runs one after another) cut into one list per question."""
    out, cursor = [], 0
    for mine in runs:
        out.append(list(flat[cursor : cursor + len(mine)]))
        cursor += len(mine)
    return out

"""What every planner returns, and adapters between per-question and batched planners.

A planner maps a question to up to ``B`` candidate schema graphs in beam order (paper §3.1: the
SGDA's beam of ``B`` assertion-strategy pairs). The evaluator's :data:`Planner` signature takes
one question at a time; planners that batch (the pattern head encodes all questions in one
forward, vLLM sends a whole batch through one ``generate`` call) implement :class:`BatchPlanner`
and are turned into a per-question callable by :func:`precomputed_planner`. LLM planners, answer
generation and synthetic-data export talk to a language model through :class:`LLMBackend`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, is_placeholder


@dataclasses.dataclass(frozen=True)
class ScoredSchema:
    """One beam entry: a schema graph and the planner's confidence in it (probability or 1.0)."""

    schema: SchemaGraph
    score: float = 1.0


@runtime_checkable
class BatchPlanner(Protocol):
    """Plans a batch of questions at once; entry ``i`` of the result is question ``i``'s beam."""

    name: str

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        ...


@dataclasses.dataclass
class SingleQuestionPlanner:
    """Wraps a per-question planner (the oracle) as a :class:`BatchPlanner`."""

    fn: Callable[[Question, KGIndex | None], list[SchemaGraph]]
    name: str = "planner"
    index: KGIndex | None = None

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        return [[ScoredSchema(s) for s in self.fn(q, self.index)] for q in questions]


def display_named_schema(schema: SchemaGraph, names: Mapping[str, str] | None) -> SchemaGraph:
    """``schema`` with every constant that is a KG id in ``names`` written as its display name.

    The oracle builds schema graphs from gold paths over KG ids (``Q1``); every other planner writes
    the names the question text uses (``Kismet``), and the pipeline matches topics, embeds schema
    texts and derives pattern templates by those names. With opaque ids the oracle's plans must
    read the same way. Two constants sharing one name would merge into one node, so such a schema
    keeps its ids (the pipeline anchors an id exactly too).
    """
    if not names:
        return schema
    constants = schema.constants()
    renamed = {c: names.get(c, c) for c in constants}
    if len(set(renamed.values())) < len(constants) or all(k == v for k, v in renamed.items()):
        return schema

    def node(name: str) -> str:
        return name if is_placeholder(name) else renamed[name]

    return dataclasses.replace(
        schema, triples=tuple(SchemaTriple(node(t.head), t.relation, node(t.tail)) for t in schema.triples),
        answer=node(schema.answer))


@runtime_checkable
class LLMBackend(Protocol):
    """Text generation for a batch of prompts; returns ``n`` completions per prompt, in prompt order.

    ``beam=True`` asks for beam search of width ``n`` (deterministic); otherwise ``n`` samples
    at ``temperature`` (0 = greedy). Backends that constrain decoding also take ``grammar=`` (GBNF);
    the planner passes it only when asked to (``VLLMPlanner.constrained``).
    """

    def generate(self, prompts: Sequence[str], *, n: int = 1, beam: bool = False, temperature: float = 0.0,
                 max_tokens: int = 256, seed: int | None = None) -> list[list[str]]:
        ...


def precomputed_planner(
    planner: BatchPlanner, questions: Sequence[Question], batch_size: int = 1024
) -> tuple[Callable[[Question, KGIndex], list[SchemaGraph]], dict[str, list[ScoredSchema]]]:
    """Plan ``questions`` in batches once; return the evaluator's per-question callable and the beams.

    The callable looks each question up by ``qid`` and plans unseen questions on the fly, one
    at a time (slower, but never wrong).
    """
    beams: dict[str, list[ScoredSchema]] = {}
    for start in range(0, len(questions), batch_size):
        chunk = questions[start : start + batch_size]
        for question, beam in zip(chunk, planner.plan_batch(chunk), strict=True):
            beams[question.qid] = beam

    def plan(question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
        del index
        if question.qid not in beams:
            beams[question.qid] = planner.plan_batch([question])[0]
        return [entry.schema for entry in beams[question.qid]]

    plan.beams = beams  # the scored beams, read by StemPipeline.plan_all for beam-aware answer ranking
    return plan, beams

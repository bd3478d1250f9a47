"""The hybrid planner: an LLM proposes schema graphs, the pattern planner fills in where they fail.

Per question, the LLM planner's beam (:class:`~stem_jax.plan.llm_planner.VLLMPlanner`) is kept when at
least one of its schema graphs *grounds* (:func:`grounding_failure`); otherwise the fallback
planner's beam is used. A graph grounds when every relation is in the KG vocabulary, a schema
constant names one of the question's entities, the answer node is reachable from it, and following
the graph's relations through the KG from that entity reaches at least one entity for the answer
node (edges in either direction, as the tracer follows them). LLM beam entries that do not ground
are dropped. A question the LLM could not answer at all (unparseable output after retries, a
server error) also takes the fallback's beam.

``consult_below`` makes the LLM a second opinion rather than the first: the LLM is asked only where
the fallback's top beam score is below it (the pattern planner's template probability), so
questions the pattern planner is sure of never depend on the LLM.

:attr:`HybridPlanner.records` says, per question id, which planner produced its plan and why
(``{"planner": "llm" | "pattern", "reason": ...}``); :attr:`HybridPlanner.stats` counts them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import csr_gather
from stem_jax.plan.base import BatchPlanner, ScoredSchema
from stem_jax.plan.schema import SchemaGraph, match_anchor

log = logging.getLogger(__name__)


def reaches_answer(schema: SchemaGraph, anchor: str, topic: int, index: KGIndex) -> bool:
    """Whether following ``schema`` from ``anchor`` (KG entity ``topic``) binds its answer node to some entity.

    Each DFS step takes the KG triples with the step's relation at the parent's entities, in either
    direction; the topic itself is excluded from every later binding (MetaQA's convention).
    """
    bound: dict[str, np.ndarray] = {anchor: np.asarray([topic], np.int64)}
    for step in schema.dfs_order(anchor):
        frontier = bound[step.parent]
        relation = index.relation_ids.get(schema.triples[step.edge].relation)
        if relation is None or frontier.size == 0:
            return False
        rows = index.triples[np.unique(csr_gather(index.csr_offsets, index.csr_triples, frontier))]
        rows = rows[rows[:, 1] == relation]
        heads_in = np.isin(rows[:, 0], frontier)
        reached = np.unique(np.concatenate([rows[heads_in, 2], rows[np.isin(rows[:, 2], frontier), 0]]))
        bound[step.child] = reached[reached != topic]
    return schema.answer in bound and bound[schema.answer].size > 0


def grounding_failure(schema: SchemaGraph, question: Question, index: KGIndex,
                      names: dict[str, str] | None = None) -> str | None:
    """Why ``schema`` does not ground for ``question`` in ``index`` (see the module docstring), or None."""
    names = names or {}
    if any(t.relation not in index.relation_ids for t in schema.triples):
        return "relation not in the KG"
    reason = "no schema node names a question entity"
    for topic in question.topic_entities:
        anchor = match_anchor(schema, names.get(topic, topic))
        if anchor is None:
            continue
        if schema.answer not in {step.child for step in schema.dfs_order(anchor)}:
            reason = "answer unreachable from the question entity"
            continue
        if topic not in index.entity_ids:
            return None  # nothing to check against; the tracer decides
        if reaches_answer(schema, anchor, index.entity_ids[topic], index):
            return None
        reason = "no KG path along the plan"
    return reason


@dataclasses.dataclass
class HybridPlanner:
    """LLM first, ``fallback`` where the LLM's plan fails to parse or to ground; see the module docstring."""

    llm: BatchPlanner
    fallback: BatchPlanner
    index: KGIndex
    names: dict[str, str] | None = None
    consult_below: float | None = None
    name: str = "hybrid"
    stats: Counter = dataclasses.field(default_factory=Counter)
    records: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        if not questions:
            return []
        fallback = self.fallback.plan_batch(questions)
        ask = [i for i, beam in enumerate(fallback)
               if self.consult_below is None or not beam or beam[0].score < self.consult_below]
        proposals: dict[int, list[ScoredSchema]] = {}
        llm_failures: dict[int, str | None] = {}
        if ask:
            try:
                beams = self.llm.plan_batch([questions[i] for i in ask])
                failures = list(getattr(self.llm, "failures", None) or [None] * len(ask))
            except StemError as err:  # the server went away: plan on without it, loudly
                log.warning("LLM planner failed (%s); using the %s planner for these %d questions",
                            str(err).splitlines()[0], getattr(self.fallback, "name", "fallback"), len(ask))
                beams, failures = [[] for _ in ask], ["llm error"] * len(ask)
            for i, beam, failure in zip(ask, beams, failures, strict=True):
                proposals[i], llm_failures[i] = beam, failure
        out = []
        for i, question in enumerate(questions):
            if i not in proposals:
                out.append(fallback[i])
                self._record(question, "pattern", "fallback confident")
                continue
            kept, reasons = [], Counter()
            for entry in proposals[i]:
                why = grounding_failure(entry.schema, question, self.index, self.names)
                if why is None:
                    kept.append(entry)
                else:
                    reasons[why] += 1
                    self.stats[f"llm_beams_dropped: {why}"] += 1
            if kept:
                out.append(kept)
                self._record(question, "llm", None)
            elif proposals[i]:
                out.append(fallback[i])
                self._record(question, "pattern", "llm plan does not ground: " + reasons.most_common(1)[0][0])
            else:
                out.append(fallback[i])
                self._record(question, "pattern", f"llm plan failed: {llm_failures[i] or 'parse'}")
        return out

    def _record(self, question: Question, planner: str, reason: str | None) -> None:
        self.records[question.qid] = {"planner": planner, "reason": reason}
        self.stats[f"plans_from_{planner}"] += 1
        if reason:
            self.stats[reason] += 1

    def plan(self, question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
        del index
        return [entry.schema for entry in self.plan_batch([question])[0]]

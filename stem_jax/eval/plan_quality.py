"""Planner quality against the oracle: schema-graph P/R/F1 (paper eqs. 45-47) and strategy accuracy.

What is compared. The gold side ``R`` is the oracle's schema graph (the gold relation path with
placeholders), not KG triples: a planner never names intermediate entities, so its triples can
only be compared with the path's *shape*. Both sides are canonicalised by
:func:`canonical_triples`: question entities become ``<Q0>``, ``<Q1>``, ... (their position in
the question's entity list) and placeholders become ``<v1>``, ``<v2>``, ... in depth-first visit
order from the first question entity (:meth:`SchemaGraph.dfs_order`), so placeholder numbering
and triple order do not matter. Two scores per question:

* ``structural``: P/R/F1 over the sets of canonical ``(head, relation, tail)`` triples, direction
  and position in the chain included; ``(Kismet, directed_by, [ENT1])`` matches
  ``(Heat, directed_by, [ENT3])`` when both are the first hop from the topic.
* ``relation``: P/R/F1 over the multisets of relation names (:func:`schema_prf` with
  ``relation_only=True``), direction and order ignored: the lenient, paper-like reading.

Per question, the top-1 beam is scored; ``best_of_beam`` takes the beam with the best structural
F1 (what a perfect re-ranker could pick). ``template_top1`` / ``template_in_beam`` ask for an
exact canonical match including the answer node. Strategy accuracy compares the top-1 beam's
strategy with the oracle's rule (one gold answer -> Precision), overall and split by answer count
as the paper's Table 15 does.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import DataError
from stem_jax.eval.metrics import schema_prf
from stem_jax.kg.index import KGIndex
from stem_jax.kg.paths import follow_relation_path
from stem_jax.plan.oracle import metaqa_gold_path, strategy_for
from stem_jax.plan.schema import SchemaGraph, is_placeholder

Canonical = tuple[frozenset[tuple[str, str, str]], str]


def canonical_triples(schema: SchemaGraph, topics: Sequence[str]) -> Canonical:
    """(canonical triple set, canonical answer node) of ``schema`` for a question with entities ``topics``.

    Constants that are not question entities keep their (lower-cased) name. Placeholders that
    the DFS from the first question entity never reaches are numbered after the reached ones,
    in triple order.
    """
    lowered = {t.lower(): i for i, t in reversed(list(enumerate(topics)))}
    names: dict[str, str] = {}
    for node in schema.nodes():
        if not is_placeholder(node):
            names[node] = f"<Q{lowered[node.lower()]}>" if node.lower() in lowered else node.lower()
    order: list[str] = []
    anchor = next((n for n in schema.nodes() if not is_placeholder(n) and n.lower() in lowered
                   and lowered[n.lower()] == 0), None)
    if anchor is None:
        anchor = next((n for n in schema.nodes() if not is_placeholder(n)), None)
    if anchor is not None:
        order = [step.child for step in schema.dfs_order(anchor) if is_placeholder(step.child)]
    order += [n for n in schema.nodes() if is_placeholder(n) and n not in order]
    for i, node in enumerate(order, start=1):
        names[node] = f"<v{i}>"
    triples = frozenset((names[t.head], t.relation, names[t.tail]) for t in schema.triples)
    return triples, names[schema.answer]


def _prf(gold: Canonical, predicted: Canonical) -> dict[str, float]:
    structural = schema_prf(gold[0], predicted[0])
    relation = schema_prf(gold[0], predicted[0], relation_only=True)
    return {"structural_" + k: v for k, v in structural.items()} | {"relation_" + k: v for k, v in relation.items()}


def question_plan_quality(question: Question, gold: Sequence[SchemaGraph], beam: Sequence[SchemaGraph],
                          topics: Sequence[str]) -> dict[str, float] | None:
    """Scores of one question's beam against its oracle schema graphs; None when there is no gold plan.

    With several gold graphs (RoG shortest paths) each prediction is scored against the gold
    graph it matches best. An empty beam scores zero everywhere (a planner failure).
    """
    if not gold:
        return None
    golds = [canonical_triples(g, topics) for g in gold]
    preds = [canonical_triples(p, topics) for p in beam]

    def best(pred: Canonical) -> dict[str, float]:
        return max((_prf(g, pred) for g in golds), key=lambda m: (m["structural_f1"], m["relation_f1"]))

    zero = {f"{kind}_{m}": 0.0 for kind in ("structural", "relation") for m in ("precision", "recall", "f1")}
    top = best(preds[0]) if preds else zero
    scores = dict(top)
    scores["best_of_beam_structural_f1"] = max((best(p)["structural_f1"] for p in preds), default=0.0)
    scores["template_top1"] = float(bool(preds) and preds[0] in golds)
    scores["template_in_beam"] = float(any(p in golds for p in preds))
    scores["beams"] = float(len(preds))
    truth = strategy_for(question.answers)
    if preds:
        scores["strategy_correct"] = float(beam[0].strategy == truth)
        key = "strategy_ans_eq_1_precision" if truth == "Precision" else "strategy_ans_ge_2_breadth"
        scores[key] = float(beam[0].strategy == truth)
    return scores


@dataclasses.dataclass
class PlanQuality:
    """Accumulates :func:`question_plan_quality` per group (hop count) and overall."""

    sums: dict[str, dict[str, float]] = dataclasses.field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, dict[str, int]] = dataclasses.field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    skipped: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))

    def add(self, question: Question, gold: Sequence[SchemaGraph], beam: Sequence[SchemaGraph], topics: Sequence[str]) -> None:
        scores = question_plan_quality(question, gold, beam, topics)
        if scores is None:
            self.skipped["no gold plan"] += 1
            return
        for group in (f"{question.hops}-hop" if question.hops is not None else "other", "all"):
            for key, value in scores.items():
                self.sums[group][key] += value
                self.counts[group][key] += 1
            self.counts[group]["n"] += 1

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group in sorted(self.sums, key=lambda g: (g == "all", g)):
            out[group] = {"n": self.counts[group]["n"]}
            for key, total in sorted(self.sums[group].items()):
                out[group][key] = total / self.counts[group][key]
        out["skipped"] = dict(self.skipped)
        return out


def load_qtype_questions(path: Path, index: KGIndex, *, name: str | None = None) -> list[Question]:
    """Questions from a ``qtype<TAB>question with [topic]`` file; answers follow the qtype's gold path in the KB.

    Lines starting with ``#`` and blank lines are ignored. A question whose topic is not in the KB
    or whose path reaches no answer raises :class:`DataError` naming the line: the file is
    authored, so a bad line is a bug to fix, not a record to skip.
    """
    import re


    path = Path(path)
    if not path.is_file():
        raise DataError("question file not found", path=str(path), fix="check the path")
    questions = []
    prefix = name or path.stem
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        if "\t" not in raw:
            raise DataError("expected qtype<TAB>question", path=str(path), line=lineno, fix="separate with a tab")
        qtype, text = raw.split("\t", 1)
        topics = re.findall(r"\[([^\[\]]+)\]", text)
        if len(topics) != 1:
            raise DataError("expected exactly one [topic entity]", path=str(path), line=lineno,
                            fix="bracket the topic entity once")
        topic = topics[0]
        if topic not in index.entity_ids:
            raise DataError(f"topic {topic!r} is not in the KB", path=str(path), line=lineno,
                            fix="use an entity name exactly as the KB spells it")
        gold_path = metaqa_gold_path(qtype)
        reached, _ = follow_relation_path(index, index.entity_ids[topic], gold_path)
        if reached.size == 0:
            raise DataError(f"the {qtype} path from {topic!r} reaches no answer in this KB", path=str(path),
                            line=lineno, fix="pick another topic entity")
        questions.append(Question(
            qid=f"{prefix}/{lineno}", text=text.replace("[", "").replace("]", "").strip(), topic_entities=(topic,),
            answers=tuple(index.entities[e] for e in reached.tolist()), hops=len(gold_path), qtype=qtype,
            source=f"{path}:{lineno}",
        ))
    return questions


def strategy_majority_baseline(questions: Sequence[Question]) -> dict[str, float]:
    """Accuracy of always answering Breadth, and of always answering Precision."""
    truth = np.asarray([strategy_for(q.answers) == "Breadth" for q in questions])
    return {"always_breadth": float(truth.mean()) if len(truth) else 0.0,
            "always_precision": float(1 - truth.mean()) if len(truth) else 0.0}

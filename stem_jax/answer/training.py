"""Training a KG's answer scorer from the STEM pipeline's own candidates on training questions.

The pipeline runs as it would at evaluation (the planner ``train-planner`` just chose, the tracer's ranking uncut);
a collector in place of the scorer hook keeps every chunk's candidate features. The questions the planner trained
on give the scorer's training set; the planner's held-out questions choose its temperature and cut and decide
whether it is kept at all (it must beat the tracer's ranking on held-out Hit@1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stem_jax.answer.features import CandidateFeaturizer, Candidates, TypeVocabulary
from stem_jax.answer.scorer import (
    AnswerScorer,
    ScorerTraining,
    concat_candidates,
    scorer_folder,
    train_answer_scorer,
)
from stem_jax.data.types import Question
from stem_jax.eval.metrics import normalize_entity


class CandidateCollector:
    """Stands in for the scorer hook: keeps each chunk's :class:`Candidates` and returns the ranking unchanged."""

    def __init__(self, featurizer: CandidateFeaturizer) -> None:
        self.featurizer = featurizer
        self.parts: list[Candidates] = []
        self.qids: list[str] = []

    def __call__(self, questions: Sequence[Question], runs: Sequence, outputs: Sequence,
                 ranked: Sequence[Sequence[tuple[int, float]]]) -> list[list[tuple[int, float]]]:
        self.parts.append(self.featurizer(questions, runs, outputs, ranked))
        self.qids.extend(q.qid for q in questions)
        return [list(r) for r in ranked]

    def fingerprint(self) -> dict[str, Any]:
        return {"collector": True}


def gold_entities(questions: Sequence[Question], entities: Sequence[str], names: dict[str, str] | None
                  ) -> list[set[int]]:
    """Each question's gold answers as KG entity ids (by id, else by normalised display name)."""
    names = names or {}
    by_name: dict[str, set[int]] = {}
    for i, entity in enumerate(entities):
        by_name.setdefault(normalize_entity(names.get(entity, entity)), set()).add(i)
    ids = {e: i for i, e in enumerate(entities)}
    out = []
    for q in questions:
        found: set[int] = set()
        for answer in q.answers:
            if answer in ids:
                found.add(ids[answer])
            else:
                found |= by_name.get(normalize_entity(answer), set())
        out.append(found)
    return out


def collect_candidates(method: Any, questions: Sequence[Question], featurizer: CandidateFeaturizer,
                       chunk: int = 256) -> tuple[Candidates, list[Question]]:
    """Run STEM ``method`` over ``questions`` with a collector in the scorer hook; candidates in question order."""
    pipeline = method.pipeline
    kept = pipeline.answer_scorer
    collector = CandidateCollector(featurizer)
    pipeline.answer_scorer = collector
    try:
        method.prepare(list(questions))
        for start in range(0, len(questions), chunk):
            method.retrieve(list(questions[start:start + chunk]))
    finally:
        pipeline.answer_scorer = kept
    by_qid = {q.qid: q for q in questions}
    return concat_candidates(collector.parts), [by_qid[qid] for qid in collector.qids]


def train_kg_scorer(method: Any, train: Sequence[Question], held: Sequence[Question], *,
                    config: ScorerTraining | None = None, log: Callable[[str], None] = print) -> AnswerScorer:
    """Train the answer scorer of STEM ``method``'s KG on its candidates for ``train`` (temperature and cut chosen
    on ``held``); ``scorer.report`` holds held-out Hit@1 / Hit / F1 of the tracer's ranking and of the scorer."""
    context = method.context
    index, names, encoder = context.index, context.dataset.entity_names, context.encoder
    vocabulary = TypeVocabulary.of(index)
    featurizer = CandidateFeaturizer(index, names, vocabulary, encoder.encode)
    log(f"answer scorer: tracing {len(train)} training and {len(held)} held-out questions for candidates")
    train_c, train_q = collect_candidates(method, train, featurizer)
    held_c, held_q = collect_candidates(method, held, featurizer)
    return train_answer_scorer(train_c, gold_entities(train_q, index.entities, names), held_c,
                               gold_entities(held_q, index.entities, names), vocabulary, encoder_name=encoder.name,
                               config=config or ScorerTraining(), tracer_cut=float(context.config.engine.answer_cut),
                               log=log)


MIN_GAIN = 0.01  # held-out Hit@1 the scorer must add over the tracer's ranking to be kept (and F1 must not drop)


def every_kth(questions: Sequence[Question], limit: int) -> list[Question]:
    """At most ``limit`` of ``questions``, spread evenly over the list (deterministic)."""
    if len(questions) <= limit:
        return list(questions)
    step = len(questions) / limit
    return [questions[int(i * step)] for i in range(limit)]


def train_scorer_for_planner(dataset_spec: Any, config: Any, planner_path: Path, *, cache_root: Path,
                             val_fraction: float = 0.1, max_train: int = 3000, max_held: int = 1000,
                             log: Callable[[str], None] = print) -> dict[str, Any]:
    """``stem-jax train-planner``'s last step: trace the training split with the planner just saved at
    ``planner_path`` and train the KG's answer scorer (:func:`train_kg_scorer`) on the planner's own training
    questions (at most ``max_train``), choosing on its held-out ones (at most ``max_held``). The scorer is stored
    only when it adds :data:`MIN_GAIN` held-out Hit@1 without losing F1 (templated KGs, where the tracer's ranking
    is at the data's bound, keep none). Returns the scorer's report."""
    import dataclasses

    from stem_jax.config import apply_overrides
    from stem_jax.data.splits import hash_split
    from stem_jax.engine import Engine
    from stem_jax.plan.factory import PlannerSpec

    config = apply_overrides(config, {"engine.answer_scorer": "off"})
    engine = Engine.open(dataset_spec, config=config, planner=PlannerSpec("pattern", path=Path(planner_path)),
                         cache_dir=cache_root, log=log)
    train, held = hash_split(engine.dataset.questions, val_fraction)
    train, held = every_kth(train, max_train), every_kth(held, max_held)
    scorer = train_kg_scorer(engine.method("stem"), train, held, log=log)
    before, after = scorer.report["held_out_tracer"], scorer.report["held_out_scorer"]
    keep = after["hit_at_1"] >= before["hit_at_1"] + MIN_GAIN and after["f1"] >= before["f1"]
    folder = scorer_folder(engine.cache_root / engine.dataset.name, engine.encoder.name)
    if not keep:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        log(f"answer scorer not kept: held-out Hit@1 {before['hit_at_1']:.3f} -> {after['hit_at_1']:.3f}, F1 "
            f"{before['f1']:.3f} -> {after['f1']:.3f} (needs +{MIN_GAIN:g} Hit@1 and no F1 loss); the tracer ranks")
    else:
        scorer.save(folder)
        log(f"answer scorer stored in {folder}")
    return {**scorer.report, "kept": keep, "folder": str(folder), "config": dataclasses.asdict(ScorerTraining())}

"""STEM's fourth stage: traced runs -> ranked answers and evidence, one :class:`~stem_jax.methods.base.Retrieval`
per question.

The questions of a call are folded into one :class:`~stem_jax.answer.rank.ChunkAnswers` and ranked together
under :class:`~stem_jax.methods.stem.types.RankRules`, on the host (the plain form) or with the jitted
:func:`kernels.answers.rank_answers` (the same answers, scores bit for bit); a learned answer scorer, when the
rules carry one, re-ranks the uncut ranking and cuts the set itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kernels.answers import pack_runs, rank_answers, ranked_lists
from stem_jax.answer.rank import ChunkAnswers, answer_depths
from stem_jax.answer.values import ValueIndex, read_condition
from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.methods.base import Retrieval
from stem_jax.methods.stem.relation_check import runs_with_unmatched_steps, unmatched_steps
from stem_jax.methods.stem.types import Output, RankRules, Run, StemHyper
from stem_jax.trace.types import prune_unreached


def ranking_gap(rules: RankRules, runs: Sequence[Run], hyper: StemHyper) -> float:
    """The rules' beam gap widened by τ when the runs carry guidance: the gap is there to catch bindings
    of the wrong relation, and a guided triple's +τ must not push the unguided right answers out of it
    (guidance marks only |T|·K' entities, so on a 1-hop question most right answers are unguided)."""
    guided = any(run.guidance is not None and len(run.guidance) for run in runs)
    return rules.beam_gap + (float(hyper.tau) if guided else 0.0)


def rank_on_device(rules: RankRules, chunk: ChunkAnswers, gaps: Sequence[float], exclude: Sequence[tuple[int, int]],
                   ) -> list[list[tuple[int, float]]]:
    """``chunk.ranked(rule, answer_cut, gaps, exclude, never=mediators)`` in one compiled call
    (:func:`kernels.answers.rank_answers`): the same answers, scores bit for bit. The first call returns
    ``rules.device_answers`` per question; when a question has more, the chunk is ranked again with room for all."""
    n = chunk.n_questions
    nodes, scores, meta = chunk.answer_runs()
    packed = pack_runs(n, nodes, scores, meta, gaps, exclude, **rules.device_padding)
    k = rules.device_answers
    while True:
        ranked = rank_answers(packed, rules.mediator_mask, n_questions=n, rule=rules.rule, cut=rules.answer_cut, k=k,
                              min_beams=rules.min_beams)
        most = int(ranked.count.max(initial=0))
        if most <= k:
            return ranked_lists(ranked)
        k = 1 << (most - 1).bit_length()


def warm_up_ranking(rules: RankRules) -> None:
    """Compile the device ranking's shape for up to one beam of runs per call."""
    packed = pack_runs(1, [], [], np.zeros((0, 5)), **rules.device_padding)
    rank_answers(packed, rules.mediator_mask, n_questions=1, rule=rules.rule, cut=rules.answer_cut,
                 k=rules.device_answers, min_beams=rules.min_beams)


def fold(index: KGIndex, rules: RankRules, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
         outputs: Sequence[Sequence[Output]],
         ) -> tuple[ChunkAnswers, list[tuple[int, int]], list[tuple[np.ndarray, np.ndarray]]]:
    """The questions' traced runs (``runs[i]``, ``outputs[i]``, unreached bindings pruned) folded into one
    :class:`~stem_jax.answer.rank.ChunkAnswers`; the (question, entity) pairs never to return (the topic
    entities, when ``rules.exclude_topic``); and every run's pruned (nodes, via) in chunk order (the answer
    scorer reads them)."""
    chunk = ChunkAnswers(len(questions))
    if not len(questions) == len(runs) == len(outputs):
        raise ValueError(f"{len(questions)} questions, {len(runs)} run lists and {len(outputs)} output lists")
    for qi, (mine, outs) in enumerate(zip(runs, outputs, strict=True)):
        if len(mine) != len(outs):
            raise ValueError(f"question {qi} has {len(mine)} runs but {len(outs)} trace outputs")
    entity_ids = index.entity_ids
    exclude = [(qi, entity_ids[t]) for qi, question in enumerate(questions) for t in question.topic_entities
               if t in entity_ids] if rules.exclude_topic else []
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


def rank(index: KGIndex, rules: RankRules, questions: Sequence[Question], runs: Sequence[Sequence[Run]],
         outputs: Sequence[Sequence[Output]], hyper: StemHyper, *, display: Callable[[str], str],
         stage_ms: dict[str, float] | None = None) -> list[Retrieval]:
    """Each question's traces (``runs[i]``, ``outputs[i]``) as a :class:`~stem_jax.methods.base.Retrieval`:
    ranked answers and evidence in KG ids (the shared record), STEM's extras (plans, strategies, θ) in
    ``info``. The questions are ranked together (:func:`fold`); ``hyper`` is the point they were traced at."""
    chunk, exclude, pruned = fold(index, rules, questions, runs, outputs)
    # the gap depends on each question's runs (guided or not)
    # a learned answer scorer (stem_jax/answer/scorer.py) re-ranks the uncut ranking and cuts the set itself
    scorer = rules.scorer
    gaps = [ranking_gap(rules, mine, hyper) for mine in runs]
    if scorer is None and rules.on_device:
        ranked = rank_on_device(rules, chunk, gaps, exclude)
    else:
        ranked = chunk.ranked(rules.rule, 0.0 if scorer is not None else rules.answer_cut, gaps, exclude,
                              never=rules.mediators)
    support: list[float | None] = [None] * len(questions)
    if scorer is not None:
        tracer = [dict(r) for r in ranked]
        starts = np.cumsum([0, *map(len, runs)]).tolist()  # each question's runs in the chunk order of ``pruned``
        ranked = scorer(questions, runs, outputs, ranked,
                        pruned=[pruned[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)])
        # confidence stays the plans' agreement: the beam support of the answer the scorer puts first
        support = [tracer[qi].get(r[0][0], 0.0) if r else 0.0 for qi, r in enumerate(ranked)]
    notes = apply_value_conditions(rules.values, questions, ranked, display) if rules.values is not None else {}
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
        if qi in notes:
            info["value_condition"] = notes[qi]
        results.append(Retrieval(question.qid, answers=ranked[qi], evidence=evidence[qi],
                                 stage_ms=dict(stage), info=info, overflow=overflow[qi]))
    note_unmatched(index, runs, outputs, results, exclude, display)
    return results


def apply_value_conditions(values: ValueIndex, questions: Sequence[Question], ranked: list[list[tuple[int, float]]],
                           display: Callable[[str], str]) -> dict[int, dict]:
    """Apply the value condition each question states (:func:`~stem_jax.answer.values.read_condition`) to its
    ranked answers in place, where the KG holds the values; returns, per question it concerned, the note for its
    record."""
    notes = {}
    for qi, question in enumerate(questions):
        if not ranked[qi]:
            continue
        condition = read_condition(question.text, [display(t) for t in question.topic_entities])
        if condition is None:
            continue
        ranked[qi], note = values.apply(condition, question.text, ranked[qi])
        if note is not None:
            notes[qi] = note
    return notes


def note_unmatched(index: KGIndex, runs: Sequence[Sequence[Run]], outputs: Sequence[Sequence[Output]],
                   results: Sequence[Retrieval], exclude: Sequence[tuple[int, int]],
                   display: Callable[[str], str]) -> None:
    """``info["unmatched_relations"]``: the plan steps whose bindings all came through other relations
    (:func:`~stem_jax.methods.stem.relation_check.unmatched_steps`), for questions that have answers; here, so
    that an eval, a sweep point and ``ask`` write the same records. ``exclude``: :func:`fold`'s
    (question, entity) pairs never returned."""
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
                                    np.asarray(out["via"]), excluded[qi], display):
            if line not in lines:
                lines.append(line)

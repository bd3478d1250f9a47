"""STEM's first stage: questions -> runs (question x schema graph x anchor), grounded in the KG."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from stem_jax.data.types import Question
from stem_jax.methods.stem.resources import StemResources
from stem_jax.methods.stem.types import Planner, Run, fold_name
from stem_jax.plan.schema import anchor_closeness, ground, match_anchor
from stem_jax.trace.tracer import EXACT, FOLDED


def named_entities(res: StemResources, topic: str) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(exact KG id or -1, named anchor candidates) for a topic entity the question names.

    With ``engine.exact_anchor`` the topic's own id is the EXACT candidate; without an id, KG
    entities whose name equals the topic's up to case and accents are FOLDED candidates.
    """
    exact = res.index.entity_ids.get(topic, -1)
    if not res.engine.exact_anchor:
        return exact, ()
    if exact >= 0:
        return exact, ((exact, EXACT),)
    twins = res.folded_names().get(fold_name(res.display(topic)), [])
    return -1, tuple((i, FOLDED) for i in twins[: res.NAMED_WIDTH - 1])


def plan(res: StemResources, questions: Sequence[Question], planner: Planner,
         ) -> tuple[list[list[Run]], dict[str, int]]:
    """Runs per question, and counts of questions/plans that produced none (with reasons).

    ``planner`` returns schema graphs in beam order, either plain :class:`~stem_jax.plan.schema.SchemaGraph`
    or :class:`~stem_jax.plan.base.ScoredSchema` (whose probability the beam ranking uses); a
    planner callable with a ``beams`` dict (qid -> scored beam) supplies the scores too.

    A schema graph that names one question entity is traced from each topic entity it matches. One that
    names several (a conjunctive question's tree) is traced once, from the first of them, and the others
    become checked constants of the plan (Algorithm 1: one anchor, the other question entities must be
    reached; :func:`~stem_jax.trace.types.prune_unreached`).

    The runs' steps buckets are noted on ``res`` (:meth:`StemResources.note_buckets`), so every later
    trace call shares the widest bucket planned.
    """
    runs: list[list[Run]] = []
    skipped: dict[str, int] = defaultdict(int)
    scored_beams = getattr(planner, "beams", None)
    for qi, question in enumerate(questions):
        mine = []
        entries = planner(question, res.index)
        if isinstance(scored_beams, dict) and question.qid in scored_beams:
            entries = scored_beams[question.qid]
        if not entries:
            skipped["no plan"] += 1
        for beam, entry in enumerate(entries):
            schema = getattr(entry, "schema", entry)
            prob = float(getattr(entry, "score", 1.0 / (beam + 1)))
            matched = []  # (topic, schema node, exact id, named candidates)
            unmatched = 0
            for topic in question.topic_entities:
                anchor, named = named_entities(res, topic)
                if anchor < 0 and not named:
                    skipped["topic entity not in KG"] += 1
                    continue
                # a plan may name the topic by its KG id (an oracle over opaque ids) or by the
                # display name the question uses (every other planner): the id, when named, is exact
                anchor_name = (topic if topic in schema.constants()
                               else match_anchor(schema, res.display(topic)))
                if anchor_name is None:
                    unmatched += 1
                    continue
                matched.append((topic, anchor_name, anchor, named))
            if len(matched) > 1:
                # a constant matched by several topics (fuzzy names) names the closest of them only
                # a constant naming the topic by its KG id (above) is the topic itself: exact
                closeness = [anchor_closeness(name, topic if name == topic else res.display(topic))
                             for topic, name, _, _ in matched]
                best = defaultdict(float)
                for (_, name, _, _), close in zip(matched, closeness, strict=True):
                    best[name] = max(best[name], close)
                kept = [m for m, close in zip(matched, closeness, strict=True) if close >= best[m[1]]]
                unmatched += len(matched) - len(kept)
                matched = kept
            if unmatched and not matched:
                # a plan from one of several topics leaves the others out: only a plan no topic anchors is lost
                skipped["no schema node matches a topic entity"] += 1
            if len({m[1] for m in matched}) > 1:  # several question entities in one tree: one anchor
                first = matched[0]
                entity_of = {name: anchor for _, name, anchor, _ in matched[1:] if name != first[1]}
                matched = [first]
            else:
                entity_of = {}
            for topic, anchor_name, anchor, named in matched:
                mine.append(Run(qi, ground(schema, anchor_name, res.index, entity_of), anchor, beam=beam,
                                beam_prob=prob, mention=res.display(topic), named=named))
        runs.append(mine)
    res.note_buckets(run for mine in runs for run in mine)
    return runs, dict(skipped)

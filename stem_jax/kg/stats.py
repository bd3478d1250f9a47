"""Subgraph size statistics and the share of questions whose answers lie inside their subgraph."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from stem_jax.config import SubgraphConfig
from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import khop_subgraph, summarize


def question_subgraph_sizes(
    questions: Iterable[Question], index: KGIndex, config: SubgraphConfig, progress=None
) -> dict[str, dict]:
    """Per hop group: node/triple count distributions and answer coverage.

    ``answers_all_inside`` is the share of questions whose every gold answer is a node of the
    subgraph, ``answers_any_inside`` the share with at least one. RoG questions use their own
    graph; the others use the k-hop neighbourhood of their topic entities (k = the question's hop
    count unless ``config.hops`` fixes it).
    """
    groups: dict[str, dict[str, list]] = {}
    for q in questions:
        key = f"{q.hops}-hop" if q.hops is not None else "all"
        g = groups.setdefault(key, {"nodes": [], "triples": [], "all": [], "any": [], "capped": []})
        if q.graph is not None:
            nodes = {h for h, _, _ in q.graph} | {t for _, _, t in q.graph}
            n_nodes, n_triples, capped = len(nodes), len(q.graph), 0
            inside = [a in nodes for a in q.answers]
        else:
            radius = config.hops or (q.hops or 1)
            seeds = [index.entity_id(t) for t in q.topic_entities]
            sub = khop_subgraph(index, seeds, radius, config.hub_cap)
            n_nodes, n_triples, capped = len(sub.nodes), len(sub.triple_ids), sub.capped_hubs
            answer_ids = np.asarray([index.entity_ids.get(a, -1) for a in q.answers])
            inside = list(np.isin(answer_ids, sub.nodes) & (answer_ids >= 0))
        g["nodes"].append(n_nodes)
        g["triples"].append(n_triples)
        g["all"].append(all(inside))
        g["any"].append(any(inside))
        g["capped"].append(capped)
        if progress is not None:
            progress.update(1)
    report = {}
    for key in sorted(groups):
        g = groups[key]
        report[key] = {
            "questions": len(g["nodes"]),
            "nodes": summarize(g["nodes"]),
            "triples": summarize(g["triples"]),
            "answers_all_inside": float(np.mean(g["all"])),
            "answers_any_inside": float(np.mean(g["any"])),
            "capped_hubs_mean": float(np.mean(g["capped"])),
        }
    return report

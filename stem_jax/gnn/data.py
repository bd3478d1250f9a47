"""Training and inference examples for the Triple-GNN: questions, their plans, and random walks.

* Question examples (appendix C.1): the oracle planner's schema graph is the query, the
  question's topic entities are the question entities, and the labels are the gold-evidence
  entities (endpoints of :func:`stem_jax.plan.oracle.gold_path_triples`, eq. 36).
* Walk examples (appendix C.2, Phase 1): :func:`stem_jax.plan.walks.random_walk`.

The subgraph radius is ``subgraph.hops`` when set, else the depth of the schema graph from the
question entity (the oracle's hop count), so inference never reads the dataset's hop label.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from stem_jax.config import SubgraphConfig
from stem_jax.data.splits import hash_split
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.gnn.batching import MAX_SCHEMA_TRIPLES, GraphExample, build_example
from stem_jax.gnn.expand import SubgraphExpander, graph_set_unordered
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.gnn.multihop import GraphSet, graph_set
from stem_jax.kg.index import KGIndex
from stem_jax.plan.oracle import gold_path_triples
from stem_jax.plan.schema import SchemaGraph, match_anchor
from stem_jax.plan.walks import random_walk

Planner = Callable[[Question, KGIndex], list[SchemaGraph]]


def split_by_qid(questions: Sequence[Question], val_percent: int) -> tuple[list[Question], list[Question]]:
    """(train, val): the project's one :func:`~stem_jax.data.splits.hash_split`, in its ``percent``
    bucketing (a question is in val when sha256(qid) mod 100 is below ``val_percent``)."""
    return hash_split(questions, val_percent / 100, bucketing="percent")


def gold_entities(question: Question, index: KGIndex) -> np.ndarray:
    """KG ids of the endpoints of the question's gold-evidence triples (empty when none)."""
    ids = {index.entity_ids[n] for h, _, t in gold_path_triples(question, index) for n in (h, t)}
    return np.asarray(sorted(ids), dtype=np.int32)


def schema_depth(schema: SchemaGraph, anchor: str | None) -> int:
    """Longest DFS distance from ``anchor`` in the schema graph (|T| when there is no anchor)."""
    if anchor is None:
        return len(schema.triples)
    depth = {anchor: 0}
    for step in schema.dfs_order(anchor):
        depth[step.child] = depth[step.parent] + 1
    return max(depth.values()) if len(depth) > 1 else 1


class ExampleFactory:
    """Builds :class:`GraphExample` s for one KG (see the module docstring)."""

    def __init__(self, index: KGIndex, featurizer: SchemaFeaturizer, subgraph: SubgraphConfig,
                 names: dict[str, str] | None = None):
        self.index = index
        self.featurizer = featurizer
        self.subgraph = subgraph
        self.names = names or {}
        self._expander: SubgraphExpander | None = None  # built on first use (scratch arrays of KG size)

    def display(self, entity: str) -> str:
        return self.names.get(entity, entity)

    def seeds(self, question: Question) -> list[int]:
        return [self.index.entity_ids[t] for t in question.topic_entities if t in self.index.entity_ids]

    def radius(self, question: Question, schema: SchemaGraph) -> int:
        if self.subgraph.hops:
            return self.subgraph.hops
        anchor = None
        for topic in question.topic_entities:
            anchor = match_anchor(schema, self.display(topic))
            if anchor is not None:
                break
        return schema_depth(schema, anchor)

    def for_plan(self, question: Question, schema: SchemaGraph, *, labels: bool = False,
                 key: str | None = None) -> GraphExample | None:
        """The example of one (question, schema graph); None when no topic entity is in the KG."""
        seeds = self.seeds(question)
        if not seeds:
            return None
        positives = gold_entities(question, self.index) if labels else None
        return build_example(self.index, seeds, self.radius(question, schema), self.subgraph.hub_cap,
                             self.featurizer(schema), positives=positives, key=key or question.qid)

    def for_plans(self, pairs: Sequence[tuple[Question, SchemaGraph]], *, ordered: bool = True,
                  ) -> tuple[GraphSet, np.ndarray]:
        """The inference graphs of many (question, schema graph) pairs at once (no labels), and
        which pairs they are (pairs without a topic entity in the KG get no graph).

        Same subgraphs, edges and features as :meth:`for_plan`. ``ordered``: also the same node and
        edge order (receivers ascending), from one vectorised expansion of all pairs
        (:func:`stem_jax.gnn.multihop.graph_set`); otherwise discovery order, from one expansion per
        distinct (seeds, radius) with stamp arrays (:func:`stem_jax.gnn.expand.graph_set_unordered`,
        no sort), which the reach-aware forward takes.
        """
        where, seeds, radii, blocks = [], [], [], []
        features: dict[str, np.ndarray] = {}
        self.featurizer.prepare(s for _, s in pairs)
        for row, (question, schema) in enumerate(pairs):
            ids = self.seeds(question)
            if not ids:
                continue
            if len(schema.triples) > MAX_SCHEMA_TRIPLES:
                raise StemError(f"{question.qid}: schema graph has {len(schema.triples)} triples; the Triple-GNN "
                                f"takes at most {MAX_SCHEMA_TRIPLES} (raise stem_jax.gnn.batching.MAX_SCHEMA_TRIPLES)")
            text = schema.describe()
            if text not in features:
                features[text] = self.featurizer(schema)
            where.append(row)
            seeds.append(ids)
            radii.append(self.radius(question, schema))
            blocks.append(features[text])
        width = 3 * self.featurizer.dim
        schema = np.zeros((len(where), MAX_SCHEMA_TRIPLES, width), np.float32)
        mask = np.zeros((len(where), MAX_SCHEMA_TRIPLES), bool)
        for i, block in enumerate(blocks):
            schema[i, : len(block)] = block
            mask[i, : len(block)] = True
        if ordered:
            graphs = graph_set(self.index, seeds, radii, self.subgraph.hub_cap, schema, mask)
        else:
            if self._expander is None:
                self._expander = SubgraphExpander(self.index, self.subgraph.hub_cap)
            graphs = graph_set_unordered(self.index, seeds, radii, self.subgraph.hub_cap, schema, mask, self._expander)
        return graphs, np.asarray(where, np.int64)

    def from_walk(self, rng: np.random.Generator, max_hops: int, key: str) -> GraphExample | None:
        walk = random_walk(self.index, rng, max_hops=max_hops, hub_cap=self.subgraph.hub_cap, names=self.names)
        if walk is None:
            return None
        hops = self.subgraph.hops or len(walk.triples)
        return build_example(self.index, [walk.start], hops, self.subgraph.hub_cap, self.featurizer(walk.schema),
                             positives=list(walk.entities), key=key)


def question_examples(factory: ExampleFactory, questions: Sequence[Question], planner: Planner,
                      ) -> tuple[list[tuple[Question, SchemaGraph]], dict[str, int]]:
    """Labelled (question, oracle schema) pairs, and counts of questions left out (with reasons).

    A question is kept when it has a plan and a topic entity in the KG; only the first plan is
    used for training (the oracle gives one for MetaQA and the demo). Questions whose gold
    evidence turns out empty are masked out of the loss when their batch is built.
    """
    kept: list[tuple[Question, SchemaGraph]] = []
    skipped: dict[str, int] = {}
    for q in questions:
        plans = planner(q, factory.index)
        reason = None
        if not plans:
            reason = "no plan"
        elif not factory.seeds(q):
            reason = "topic entity not in KG"
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        kept.append((q, plans[0]))
    return kept, skipped

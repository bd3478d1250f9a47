"""SAFE as a :class:`~stem_jax.methods.base.RetrievalMethod`: plan, value retrieval, ADJ, ranked matching.

Offline (built once per KG, in :class:`SafeMethod.__init__`): derived types and the schema graph
(:mod:`.schema`), APSP over it (:mod:`.apsp`), directed CSR views of the KG (:mod:`.matching`),
embeddings of the type names and schema-edge texts (MiniLM, like every other text), and the
relation-relation and type-type L2 distance tables behind SimRel and SimTyp.

Per split (:meth:`SafeMethod.prepare`): the engine's planner writes each question's pseudo query
graph (SAFE's LLM step; the top ``safe.beams`` beams, 1 by default), rendered as typed triples
``type(u) relation type(u')`` whose types come from the relation's signature, as the paper's LLM
predicts a type per node; all entity names and typed triples are embedded in one encoder pass.

Per chunk of questions (:meth:`SafeMethod.retrieve`): value retrieval (SimEnt, one jitted
nearest-neighbour call over the entity table for the whole chunk), candidate schema edges for
every pseudo edge of the chunk (one jitted call), the distance edge join and instantiation per
question (tiny recursions), then Algorithm 2 per query graph. Answers are the bindings of the
answer node over the retrieved matches of all ``k_qg`` query graphs, ranked by their best match
score (lowest total semantic distance); evidence is the union of the matched triples.
"""

from __future__ import annotations

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.config import SafeConfig, as_dict
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.kg.index import relation_text
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.methods.safe.adj import (
    RERANK_EXTRA,
    AlignedGraph,
    PseudoGraph,
    candidate_schema_edges,
    distance_edge_join,
    exact_nearest,
    instantiate,
    unaligned,
)
from stem_jax.methods.safe.apsp import floyd_warshall, schema_adjacency
from stem_jax.methods.safe.matching import MatchIndex, QueryEdge, QueryGraph, QueryNode, rank_matches, to_cost
from stem_jax.methods.safe.phrases import render
from stem_jax.methods.safe.schema import KGSchema, derive_schema
from stem_jax.plan.factory import planned
from stem_jax.plan.schema import SchemaGraph, is_placeholder

VALUE_BATCH = 256  # constants per jitted value-retrieval call (bounds the [batch, E] distance block)


@functools.partial(jax.jit, static_argnames="k")
def _nearest_rows(queries: jax.Array, keys: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    sq = jnp.sum(queries * queries, axis=1, keepdims=True) + jnp.sum(keys * keys, axis=1)[None, :]
    dist = jnp.sqrt(jnp.maximum(sq - 2.0 * queries @ keys.T, 0.0))
    neg, ids = jax.lax.top_k(-dist, k)
    return -neg, ids


def nearest_rows(queries: np.ndarray, keys: jax.Array, k: int,
                 exact_keys: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``keys`` nearest to each query (L2): (distances [N, k], ids [N, k]), batched and padded.

    With ``exact_keys`` (the same rows, host-side), the fast batched distance only shortlists ``k`` +
    :data:`~.adj.RERANK_EXTRA` rows per query, and the exact distance ranks them (:func:`.adj.exact_nearest`):
    then a query's result does not depend on the other queries of the call."""
    k = min(k, int(keys.shape[0]))
    wide = min(k + RERANK_EXTRA, int(keys.shape[0])) if exact_keys is not None else k
    dists, ids = [], []
    for start in range(0, len(queries), VALUE_BATCH):
        block = np.asarray(queries[start : start + VALUE_BATCH], np.float32)
        size = 1 << max(0, (len(block) - 1).bit_length())
        padded = np.zeros((size, block.shape[1]), np.float32)
        padded[: len(block)] = block
        d, i = _nearest_rows(jnp.asarray(padded), keys, wide)
        d, i = np.asarray(d)[: len(block)], np.asarray(i)[: len(block)]
        if exact_keys is not None:
            d, i = exact_nearest(block, exact_keys, i, k)
        dists.append(d)
        ids.append(i)
    if not dists:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
    return np.concatenate(dists), np.concatenate(ids)


def pairwise_l2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.sqrt(np.maximum(sq, 0.0))


def smallest(row: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest entries of ``row`` (ties: lower index first)."""
    return np.lexsort((np.arange(len(row)), row))[:k]


def pseudo_from_schema(schema: SchemaGraph) -> tuple[tuple[str, ...], tuple[tuple[int, str, int], ...], int]:
    """(node names, edges as (head, relation, tail) positions, answer position) of a planned schema graph.

    The answer position is checked against the plan's answer slot: it must name the plan's answer node, a
    placeholder (a variable), never a named entity (:class:`ValueError` otherwise)."""
    nodes = tuple(schema.nodes())
    position = {n: i for i, n in enumerate(nodes)}
    edges = tuple((position[t.head], t.relation, position[t.tail]) for t in schema.triples)
    answer = position[schema.answer]
    if nodes[answer] != schema.answer or not is_placeholder(nodes[answer]):
        raise ValueError(f"the answer node {schema.answer!r} of {schema.describe()} is not a variable slot")
    return nodes, edges, answer


def check_answer_slot(aligned: AlignedGraph, pseudo: PseudoGraph) -> str | None:
    """Why ``aligned``'s answer node is not the pseudo graph's answer slot (None: it is).

    ADJ may split a variable and bridge the copies; the answer must stay on the plan's answer node (same
    name, a variable), and a split answer is reported so a misplaced answer can be counted."""
    node = aligned.nodes[aligned.answer]
    if node.name != pseudo.nodes[pseudo.answer]:
        return "answer node moved"
    if node.entity:
        return "answer node is an entity"
    if any(n.name.startswith(node.name + "~") for n in aligned.nodes):
        return "answer node split by a bridge"
    return None


class SafeMethod:
    name = "safe"

    def __init__(self, context: MethodContext):
        began = time.perf_counter()
        self.context = context
        self.config: SafeConfig = getattr(context.config, "safe", SafeConfig())
        self.label = "safe" + ("+phrases" if self.config.relation_phrases else "") + (
            "" if self.config.use_adj else "/noadj")
        index = context.index
        self.index = index
        cfg = self.config
        self.schema: KGSchema = derive_schema(index, containment=cfg.containment, min_support=cfg.min_support,
                                              min_confidence=cfg.min_confidence, min_share=cfg.min_share)
        self.node_distance = floyd_warshall(schema_adjacency(self.schema.num_types, self.schema.edges))
        self.kg = MatchIndex.build(index, self.schema.entity_types)
        encoder = context.encoder
        self.type_vectors = np.asarray(encoder.encode(list(self.schema.type_names)), np.float32)
        edge_texts = [self.schema.edge_text(e, index.relations) for e in range(len(self.schema.edges))]
        # float16-rounded as the pseudo edges' texts are (``text_vectors``): the same text, distance 0
        self.edge_vectors = (np.asarray(encoder.encode(edge_texts), np.float16).astype(np.float32) if edge_texts
                             else np.zeros((0, self.type_vectors.shape[1]), np.float32))
        self.relation_vectors = np.asarray(context.embeddings.relations.array, np.float32)
        self.relation_distance = pairwise_l2(self.relation_vectors, self.relation_vectors)
        self.type_distance = pairwise_l2(self.type_vectors, self.type_vectors)
        self.entity_rows = context.embeddings.entities.array  # host rows: value retrieval's exact re-ranking
        self.entity_keys = jnp.asarray(np.asarray(self.entity_rows, np.float32))
        # relations each entity has as head / as tail (the "associated relation" filter of ADJ)
        self.out_relations = self._relations_by_entity(0)
        self.in_relations = self._relations_by_entity(2)
        self.offline_seconds = time.perf_counter() - began
        self.pseudo: dict[str, list[tuple[tuple[str, ...], tuple[tuple[int, str, int], ...], int]]] = {}
        self.text_rows: dict[str, int] = {}
        self.text_vectors = np.zeros((0, self.type_vectors.shape[1]), np.float32)
        self.prepared_ms: dict[str, float] = {}
        self.stats: Counter = Counter()
        self.answer_problems: list[list[str]] = []
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.planner_fn = context.options.get("planner_fn")
        self.phrase_source: dict[str, str] = {}  # relation phrase -> the KG relation its template named

    def _relations_by_entity(self, column: int) -> tuple[np.ndarray, np.ndarray]:
        triples = self.index.triples
        pairs = np.unique(triples[:, [column, 1]].astype(np.int64), axis=0)
        offsets = np.zeros(self.index.num_entities + 1, np.int64)
        np.cumsum(np.bincount(pairs[:, 0], minlength=self.index.num_entities), out=offsets[1:])
        return offsets, pairs[:, 1]

    def entity_relations(self, entities: np.ndarray, as_head: bool) -> np.ndarray:
        offsets, rels = self.out_relations if as_head else self.in_relations
        mask = np.zeros(self.index.num_relations, bool)
        for e in entities:
            mask[rels[offsets[e] : offsets[e + 1]]] = True
        return mask

    # ----- interface ------------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        config = self.context.config
        return {"method": self.label, "safe": as_dict(self.config), "planner": as_dict(config.planner),
                "encoder": getattr(self.context.encoder, "name", None)}

    def offline_info(self) -> dict[str, Any]:
        finite = self.node_distance[np.isfinite(self.node_distance)]
        return {**self.schema.summary(), "apsp_max": float(finite.max()) if finite.size else 0.0,
                "offline_seconds": self.offline_seconds}

    def _plans(self, questions: Sequence[Question]) -> tuple[Any, dict[str, Any]]:
        if self.planner_fn is not None:
            return self.planner_fn, {}

        if self.context.planner is None:
            raise StemError("SAFE needs a planner for its pseudo query graphs\n  how to fix: pass --planner oracle "
                            "or --planner pattern")
        log = self.context.options.get("log")
        plan, _, info = planned(self.context.planner, list(questions), log=log if len(questions) > 1 else None)
        return plan, info

    def typed_text(self, relation: str) -> str:
        """A pseudo edge as typed triple text: the node types come from the relation's signature."""
        rid = self.index.relation_ids.get(relation)
        if rid is None and relation in self.phrase_source:  # a phrased template: its nodes keep the template's types
            source = self.index.relation_ids.get(self.phrase_source[relation])
            if source is not None:
                names = self.schema.type_names
                return f"{names[self.schema.domain[source]]} {relation} {names[self.schema.range_[source]]}"
        if rid is None:
            return f"entity {relation_text(relation)} entity"
        names = self.schema.type_names
        return f"{names[self.schema.domain[rid]]} {relation_text(relation)} {names[self.schema.range_[rid]]}"

    def prepare(self, questions: Sequence[Question], *, show_progress: bool = False) -> dict[str, Any]:
        todo = [q for q in questions if q.qid not in self.pseudo]
        if not todo:
            return {}
        began = time.perf_counter()
        plan, plan_info = self._plans(todo)
        texts: set[str] = set()
        for question in todo:
            graphs = []
            for schema in plan(question, self.index)[: max(1, self.config.beams)]:
                if self.config.relation_phrases:  # SAFE's LLM writes words, not KG ids: ADJ must align them
                    rendered = render(schema)
                    schema = rendered.schema
                    self.phrase_source.update(rendered.source)
                try:
                    nodes, edges, answer = pseudo_from_schema(schema)
                except ValueError:
                    self.stats["plan answer not a variable slot"] += 1
                    continue
                graphs.append((nodes, edges, answer))
                texts.update(n for n in nodes if not is_placeholder(n))
                texts.update(self.typed_text(r) for _, r, _ in edges)
                texts.update(relation_text(r) for _, r, _ in edges if r not in self.index.relation_ids)
            self.pseudo[question.qid] = graphs
        plan_seconds = time.perf_counter() - began
        began = time.perf_counter()
        new = sorted(texts - set(self.text_rows))
        if new:
            vectors = np.asarray(self.context.encoder.encode(new), np.float16).astype(np.float32)
            start = len(self.text_rows)
            self.text_rows.update({t: start + i for i, t in enumerate(new)})
            self.text_vectors = np.concatenate([self.text_vectors, vectors])
        encode_seconds = time.perf_counter() - began
        per_question = 1000.0 / max(len(todo), 1)
        self.prepared_ms = {"plan": plan_seconds * per_question, "encode": encode_seconds * per_question}
        self.stage_seconds["plan"] += plan_seconds
        self.stage_seconds["encode"] += encode_seconds
        return {"planning": plan_info, "safe_offline": self.offline_info()}

    # ----- retrieval --------------------------------------------------------------------------
    def _value_retrieval(self, graphs: list[tuple]) -> list[dict[int, tuple[np.ndarray, np.ndarray]]]:
        """SimEnt for every named node of every pseudo graph of the chunk, in one batched call."""
        names = sorted({n for nodes, _, _ in graphs for n in nodes if not is_placeholder(n)})
        vectors = self.text_vectors[[self.text_rows[n] for n in names]] if names else np.zeros((0, 1), np.float32)
        dists, ids = nearest_rows(vectors, self.entity_keys, self.config.k_ent, exact_keys=self.entity_rows)
        found = {n: (ids[i].astype(np.int64), dists[i]) for i, n in enumerate(names)}
        return [{i: found[n] for i, n in enumerate(nodes) if not is_placeholder(n)} for nodes, _, _ in graphs]

    def _allowed_edges(self, pseudo: PseudoGraph) -> np.ndarray:
        """[n, S] schema edges each pseudo edge may align to (entity types and relations fixed where known)."""
        edges = self.schema.edges
        allowed = np.ones((len(pseudo.edges), len(edges)), bool)
        for i, (head, _, tail) in enumerate(pseudo.edges):
            for node, side, as_head in ((head, 0, True), (tail, 2, False)):
                if node in pseudo.entities:
                    ents = pseudo.entities[node][0]
                    type_ok = self.schema.entity_types[ents].any(axis=0)
                    rel_ok = self.entity_relations(ents, as_head)
                    allowed[i] &= type_ok[edges[:, side]] & rel_ok[edges[:, 1]]
        return allowed

    def query_graph(self, aligned: AlignedGraph, pseudo: PseudoGraph) -> QueryGraph | None:
        """Typed query graph -> matching input: SimEnt / SimTyp / SimRel candidate sets with integer costs."""
        cfg = self.config
        nodes = []
        for i, node in enumerate(aligned.nodes):
            if node.entity:
                ents, dists = pseudo.entities[i]
                nodes.append(QueryNode(node.name, entities=ents, entity_cost=to_cost(dists)))
            elif node.type_id is not None:
                row = self.type_distance[node.type_id]
                allowed = np.zeros(len(row), bool)
                allowed[smallest(row, cfg.k_typ)] = True
                nodes.append(QueryNode(node.name, type_allowed=allowed, type_cost=to_cost(row)))
            else:
                nodes.append(QueryNode(node.name))
        edges = []
        for edge in aligned.edges:
            if edge.relation is not None or edge.relation_text is not None:
                if edge.relation is not None:
                    row = self.relation_distance[edge.relation]
                else:
                    vector = self.text_vectors[self.text_rows[relation_text(edge.relation_text)]]
                    row = pairwise_l2(vector[None, :], self.relation_vectors)[0]
                rels = smallest(row, cfg.k_rel)
                edges.append(QueryEdge(edge.head, edge.tail, rels.astype(np.int64), to_cost(row[rels])))
            else:
                rels = (np.asarray(edge.bridge_relations, np.int64) if edge.bridge_relations is not None
                        else np.arange(self.index.num_relations, dtype=np.int64))
                edges.append(QueryEdge(edge.head, edge.tail, rels, np.zeros(len(rels), np.int64), undirected=True))
        anchors = [i for i, n in enumerate(nodes) if n.is_entity and len(n.entities)]
        if not anchors:
            return None
        anchor = min(anchors, key=lambda i: (nodes[i].min_cost(), i))
        label = "; ".join(self._edge_label(aligned, e) for e in aligned.edges)
        answer_type = aligned.nodes[aligned.answer].type_id
        info = {"relations": [self.index.relations[e.relation] if e.relation is not None else "?"
                              for e in aligned.edges],
                "answer_type": None if answer_type is None else self.schema.type_names[answer_type],
                "anchor_candidates": [self.context.display(self.index.entities[e]) for e in nodes[anchor].entities]}
        return QueryGraph(nodes, edges, anchor, aligned.answer, label, aligned.distance, info)

    def _edge_label(self, aligned: AlignedGraph, edge: Any) -> str:
        def node_label(i: int) -> str:
            node = aligned.nodes[i]
            if node.entity or node.type_id is None:
                return node.name
            return f"{node.name}:{self.schema.type_names[node.type_id]}"

        if edge.relation is not None:
            relation = self.index.relations[edge.relation]
        elif edge.relation_text is not None:
            relation = edge.relation_text
        else:
            relation = "?"
        return f"({node_label(edge.head)}, {relation}, {node_label(edge.tail)})"

    def align(self, pseudos: list[PseudoGraph]) -> list[list[AlignedGraph]]:
        """ADJ for a chunk: candidate schema edges for all pseudo edges at once, then the join per graph."""
        cfg = self.config
        if not cfg.use_adj:
            return [[unaligned(p, self.index.relation_ids, self.schema.domain, self.schema.range_)] for p in pseudos]
        rows, masks = [], []
        for p in pseudos:
            rows.extend(self.text_rows[self.typed_text(r)] for _, r, _ in p.edges)
            masks.append(self._allowed_edges(p))
        vectors = self.text_vectors[rows] if rows else np.zeros((0, self.edge_vectors.shape[1]), np.float32)
        allowed = np.concatenate(masks) if masks else np.zeros((0, len(self.schema.edges)), bool)
        ids, dists = candidate_schema_edges(vectors, self.edge_vectors, allowed, cfg.k_schema)
        out, cursor = [], 0
        self.answer_problems = [[] for _ in pseudos]
        for pi, p in enumerate(pseudos):
            n = len(p.edges)
            cands = [[(int(a), float(d)) for a, d in zip(ids[cursor + i], dists[cursor + i], strict=True) if a >= 0]
                     for i in range(n)]
            cursor += n
            joined = distance_edge_join(cands, p.adjacency(), self.schema.edges, self.node_distance,
                                        cfg.delta, cfg.k_qg)
            graphs, seen = [], set()
            for assignment, total in joined:
                graph = instantiate(p, assignment, total, self.schema.edges, self.node_distance, cfg.delta)
                problem = check_answer_slot(graph, p)
                if problem is not None:
                    self.stats[problem] += 1
                    self.answer_problems[pi].append(problem)
                shape = (graph.nodes, graph.edges)
                if shape in seen:  # two assignments that instantiate alike (the type sets coincide): match once
                    self.stats["adj_duplicate"] += 1
                    continue
                seen.add(shape)
                graphs.append(graph)
            if not graphs:
                self.stats["adj_no_alignment"] += 1
                graphs = [unaligned(p, self.index.relation_ids, self.schema.domain, self.schema.range_)]
            out.append(graphs)
        return out

    def retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        self.prepare([q for q in questions if q.qid not in self.pseudo])
        cfg = self.config
        n = max(len(questions), 1)
        began = time.perf_counter()
        owners, raw = [], []
        for qi, question in enumerate(questions):
            for graph in self.pseudo[question.qid]:
                owners.append(qi)
                raw.append(graph)
        entities = self._value_retrieval(raw)
        pseudos = [PseudoGraph(nodes, edges, answer, ents)
                   for (nodes, edges, answer), ents in zip(raw, entities, strict=True)]
        value_seconds = time.perf_counter() - began
        began = time.perf_counter()
        aligned = self.align(pseudos)
        adj_seconds = time.perf_counter() - began
        problems: list[list[str]] = [[] for _ in questions]
        for owner, found in zip(owners, self.answer_problems, strict=True):
            problems[owner].extend(found)
        per_question: list[list[tuple[QueryGraph, list]]] = [[] for _ in questions]
        match_seconds = [0.0] * len(questions)  # matching is per question: timed per question
        search_stats: dict[str, int] = {}
        for owner, pseudo, graphs in zip(owners, pseudos, aligned, strict=True):
            began = time.perf_counter()
            for graph in graphs:
                query = self.query_graph(graph, pseudo)
                if query is None:
                    self.stats["no_anchor"] += 1
                    continue
                matches = rank_matches(self.kg, query, cfg.k_retrieval, injective=cfg.injective, stats=search_stats)
                per_question[owner].append((query, matches))
            match_seconds[owner] += time.perf_counter() - began
        for key, value in search_stats.items():
            self.stats[key] += value
        self.stage_seconds["value"] += value_seconds
        self.stage_seconds["adj"] += adj_seconds
        self.stage_seconds["match"] += sum(match_seconds)
        results = []
        for i, question in enumerate(questions):
            stage_ms = dict(self.prepared_ms)  # batched stages: the question's share of the chunk
            stage_ms.update({"value": 1000 * value_seconds / n, "adj": 1000 * adj_seconds / n,
                             "match": 1000 * match_seconds[i]})
            result = self._result(question, per_question[i], stage_ms)
            if problems[i]:
                result.info["answer_slot"] = problems[i]
            results.append(result)
        return results

    def _result(self, question: Question, found: list[tuple[QueryGraph, list]], stage_ms: dict) -> Retrieval:
        best: dict[int, int] = {}
        evidence: set[int] = set()
        chains = []
        for query, matches in found:
            offset = int(to_cost(query.adj_distance))  # how far ADJ moved this query graph from the pseudo graph
            for match in matches:
                entity = match.nodes[query.answer]
                evidence.update(t for t in match.triples if t >= 0)
                score = match.score + offset
                if entity >= 0 and (entity not in best or score < best[entity]):
                    best[entity] = score
            if matches:
                triples = self.index.triple_strings([t for t in matches[0].triples if t >= 0])
                chains.append(" ; ".join(f"{self.context.display(h)} -{r}-> {self.context.display(t)}"
                                         for h, r, t in triples))
        if self.context.config.engine.exclude_topic:  # MetaQA convention, as STEM: the topic is not an answer
            for name in question.topic_entities:
                best.pop(self.index.entity_ids.get(name, -1), None)
        mediators = self.context.mediators  # as STEM: a Freebase CVT is walked through, not an answer
        if mediators is not None:
            best = {e: s for e, s in best.items() if not mediators[e]}
        ranked = sorted(best.items(), key=lambda kv: kv[1])  # stable: first found wins ties
        if ranked and self.config.answer_margin >= 0:
            cut = ranked[0][1] + to_cost(self.config.answer_margin)
            ranked = [(e, s) for e, s in ranked if s <= cut]
        answers = [(e, 1.0 / (1.0 + s / 1e6)) for e, s in ranked]
        info = {"pseudo_relations": [[r for _, r, _ in edges] for _, edges, _ in self.pseudo.get(question.qid, [])],
                "query_graphs": [q.label for q, _ in found],
                "qg_relations": [q.info.get("relations") for q, _ in found],
                "answer_types": [q.info.get("answer_type") for q, _ in found],
                "anchor_candidates": found[0][0].info.get("anchor_candidates") if found else [],
                "adj_distance": [round(q.adj_distance, 4) for q, _ in found],
                "matches": [len(m) for _, m in found]}
        return Retrieval(question.qid, answers=answers, evidence=sorted(evidence), chains=chains,
                         stage_ms=stage_ms, info=info)


def build(context: MethodContext) -> SafeMethod:
    return SafeMethod(context)

"""SAFE: schema derivation, APSP, D_edge, the distance edge join, and exact ranked matching."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.kg.index import build_index
from stem_jax.methods.safe.adj import PseudoGraph, distance_edge_join, instantiate
from stem_jax.methods.safe.apsp import (
    edge_distance_matrix,
    edge_distance_reference,
    floyd_warshall,
    floyd_warshall_reference,
    schema_adjacency,
)
from stem_jax.methods.safe.matching import (
    MatchIndex,
    QueryEdge,
    QueryGraph,
    QueryNode,
    dfs_steps,
    rank_matches,
)
from stem_jax.methods.safe.schema import derive_schema, role_names

# ----- schema graph ----------------------------------------------------------------------------

MINI_KG = [
    ("Heat", "directed_by", "Mann"), ("Heat", "written_by", "Mann"), ("Heat", "starred_actors", "Pacino"),
    ("Heat", "release_year", "1995"), ("Heat", "has_tags", "heist"),
    ("Point Break", "directed_by", "Bigelow"), ("Point Break", "written_by", "Iliff"),
    ("Point Break", "starred_actors", "Swayze"), ("Point Break", "release_year", "1991"),
    ("Alien", "directed_by", "Scott"), ("Alien", "written_by", "O'Bannon"), ("Alien", "starred_actors", "Weaver"),
    ("Alien", "release_year", "1979"), ("Alien", "has_tags", "space"),
]


def test_types_from_relation_signatures():
    index = build_index(MINI_KG)
    schema = derive_schema(index)
    names = schema.type_names
    assert sorted(names) == ["actor", "director", "movie", "tag", "writer", "year"]

    def types_of(entity):
        return {names[c] for c in np.flatnonzero(schema.entity_types[index.entity_ids[entity]])}

    assert types_of("Heat") == {"movie"}
    assert types_of("Mann") == {"director", "writer"}  # several types: he directs and writes
    assert types_of("Iliff") == {"writer"}
    assert types_of("1995") == {"year"}
    edges = {(names[c], index.relations[r], names[c2]) for c, r, c2 in schema.edges}
    assert ("movie", "directed_by", "director") in edges
    assert ("movie", "directed_by", "writer") in edges  # Mann is both, so directed_by reaches a writer
    assert ("movie", "has_tags", "tag") in edges
    assert all(c == "movie" for c, _, _ in edges)


def test_generic_role_names_and_merging():
    assert role_names("/people/person/nationality") == ("person", "nationality")
    assert role_names("/film/film/release_date_s./film/film_regional_release_date/film_release_region") == (
        "film", "film release region")
    assert role_names("capital_of") == ("capital of subject", "capital of object")
    # born_in's subjects are the same people who act: one merged type, named after the larger role
    kg = [("p1", "born_in", "c1"), ("p2", "born_in", "c1"), ("p3", "born_in", "c2"), ("f1", "acted_by", "p1"),
          ("f1", "acted_by", "p2"), ("f2", "acted_by", "p3")]
    index = build_index(kg)
    schema = derive_schema(index)
    assert schema.domain[index.relation_ids["born_in"]] == schema.range_[index.relation_ids["acted_by"]]
    assert schema.num_types == 3


def test_confidence_prunes_rare_schema_edges():
    kg = [(f"m{i}", "directed_by", f"d{i % 3}") for i in range(50)] + [("d0", "directed_by", "d1")]
    index = build_index(kg)
    loose = derive_schema(index, containment=0.99)
    strict = derive_schema(index, containment=0.99, min_confidence=0.5)
    assert len(strict.edges) < len(loose.edges)


# ----- APSP and D_edge ------------------------------------------------------------------------


@st.composite
def weighted_graphs(draw):
    n = draw(st.integers(1, 9))
    cells = draw(st.lists(st.one_of(st.just(np.inf), st.integers(0, 9).map(float)), min_size=n * n, max_size=n * n))
    return np.asarray(cells, dtype=np.float32).reshape(n, n)


@settings(max_examples=60, deadline=None)
@given(weighted_graphs())
def test_floyd_warshall_equals_reference(weights):
    np.testing.assert_array_equal(floyd_warshall(weights), floyd_warshall_reference(weights))


def test_floyd_warshall_known_path():
    inf = np.inf
    weights = np.array([[0, 1, inf, inf], [inf, 0, 2, inf], [inf, inf, 0, 3], [1, inf, inf, 0]], np.float32)
    dist = floyd_warshall(weights)
    assert dist[0, 3] == 6 and dist[3, 2] == 4 and dist[2, 1] == 5


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 7), st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 6)),
                                   min_size=1, max_size=10))
def test_edge_distance_matrix_matches_definition(num_types, raw_edges):
    edges = np.asarray([(a % num_types, r, b % num_types) for a, r, b in raw_edges], dtype=np.int32)
    node = floyd_warshall(schema_adjacency(num_types, edges))
    matrix = edge_distance_matrix(node, edges)
    for i, j in itertools.product(range(len(edges)), repeat=2):
        assert matrix[i, j] == edge_distance_reference(node, tuple(edges[i]), tuple(edges[j]))
    assert np.all(np.diag(matrix) == 0)  # an edge shares its own types


# ----- ADJ (Algorithm 1) ----------------------------------------------------------------------

# types: 0 movie, 1 director, 2 year, 3 city;  schema: movie-director, movie-year, director-city
SCHEMA_EDGES = np.array([[0, 0, 1], [0, 1, 2], [1, 2, 3], [0, 3, 3]], dtype=np.int32)


def _node_distance():
    return floyd_warshall(schema_adjacency(4, SCHEMA_EDGES))


def test_distance_edge_join_respects_delta_and_ranks_by_distance():
    node = _node_distance()
    # two pseudo edges sharing a node; edge 0 prefers schema edge 2 (director-city), edge 1 prefers 1 (movie-year)
    candidates = [[(2, 0.1), (0, 0.3)], [(1, 0.2), (3, 0.5)]]
    adjacency = [{1}, {0}]
    strict = distance_edge_join(candidates, adjacency, SCHEMA_EDGES, node, delta=0, k_qg=5)
    # (2, 1): director-city vs movie-year share no type (distance 1) -> infeasible at delta 0
    assert [a for a, _ in strict] == [(0, 1), (2, 3), (0, 3)]
    loose = distance_edge_join(candidates, adjacency, SCHEMA_EDGES, node, delta=1, k_qg=2)
    assert loose[0][0] == (2, 1) and loose[0][1] == pytest.approx(0.3)
    assert len(loose) == 2


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(0, 1), st.integers(1, 6), st.randoms(use_true_random=False))
def test_distance_edge_join_equals_brute_force(n, delta, k_qg, rng):
    node = _node_distance()
    candidates = [[(rng.randrange(4), float(rng.randrange(5))) for _ in range(rng.randrange(1, 4))] for _ in range(n)]
    adjacency = [{j for j in (i - 1, i + 1) if 0 <= j < n} for i in range(n)]  # a path of pseudo edges
    got = distance_edge_join(candidates, adjacency, SCHEMA_EDGES, node, delta=delta, k_qg=k_qg)
    brute = []
    for combo in itertools.product(*candidates):
        ok = all(edge_distance_reference(node, tuple(SCHEMA_EDGES[combo[i][0]]), tuple(SCHEMA_EDGES[combo[j][0]]))
                 <= delta for i in range(n) for j in adjacency[i])
        if ok:
            brute.append((sum(d for _, d in combo), tuple(a for a, _ in combo)))
    brute.sort(key=lambda item: item[0])  # stable: enumeration order breaks ties, as Algorithm 1's queue does
    assert [(a, pytest.approx(d)) for a, d in got] == [(a, pytest.approx(d)) for d, a in brute[:k_qg]]


def test_instantiate_bridges_types_at_distance_one():
    node = _node_distance()
    # "X directed_by ?d ; ?d born_in ?c" where ADJ put ?d's two edges on director and on movie
    pseudo = PseudoGraph(("Heat", "?d", "?c"), ((0, "directed_by", 1), (1, "born_in", 2)), 2,
                         {0: (np.array([0]), np.array([0.0]))})
    graph = instantiate(pseudo, (0, 3), 0.0, SCHEMA_EDGES, node, delta=1)  # (movie,0,director), (movie,3,city)
    assert [n.type_id for n in graph.nodes[1:]] == [1, 3, 0]  # ?d director, ?c city, bridge copy of ?d: movie
    bridge = [e for e in graph.edges if e.relation is None]
    assert len(bridge) == 1 and bridge[0].bridge_relations == (0,) and bridge[0].undirected
    same = instantiate(pseudo, (0, 2), 0.0, SCHEMA_EDGES, node, delta=1)  # director-city: shared type, no bridge
    assert len(same.edges) == 2 and len(same.nodes) == 3


# ----- ranked semantic subgraph matching (Algorithm 2) -----------------------------------------


def _film_kg():
    # entities: 0 Heat, 1 Mann, 2 Thief, 3 Caan, 4 Pacino, 5 Ali ; relations 0 directed_by, 1 starred_actors
    triples = np.array([[0, 0, 1], [2, 0, 1], [0, 1, 4], [2, 1, 3], [5, 0, 1], [5, 1, 4]], dtype=np.int32)
    types = np.zeros((6, 3), bool)  # 0 movie, 1 director, 2 actor
    types[[0, 2, 5], 0] = True
    types[1, 1] = True
    types[[3, 4], 2] = True
    return MatchIndex.from_arrays(triples, 6, 2, types)


def _typed_var(name, type_id, num_types=3, cost_other=500):
    cost = np.full(num_types, cost_other, np.int64)
    cost[type_id] = 0
    return QueryNode(name, type_allowed=np.ones(num_types, bool), type_cost=cost)


def test_two_hop_match_finds_co_directed_films():
    kg = _film_kg()
    # Heat -directed_by-> ?d <-directed_by- ?m  (films by Heat's director)
    graph = QueryGraph(
        nodes=[QueryNode("Heat", entities=np.array([0]), entity_cost=np.array([0])), _typed_var("?d", 1),
               _typed_var("?m", 0)],
        edges=[QueryEdge(0, 1, np.array([0, 1]), np.array([0, 900])), QueryEdge(2, 1, np.array([0, 1]),
                                                                                np.array([0, 900]))],
        anchor=0, answer=2)
    matches = rank_matches(kg, graph, k=10, injective=True)
    answers = [m.nodes[2] for m in matches]
    assert answers[:2] == [2, 5] and matches[0].score == 0  # Thief, Ali; Heat itself is excluded (injective)
    assert all(m.score > 0 for m in matches[2:])
    with_self = rank_matches(kg, graph, k=10, injective=False)
    assert 0 in [m.nodes[2] for m in with_self if m.score == 0]


def test_dfs_order_and_closing_edges():
    graph = QueryGraph(nodes=[QueryNode("a", entities=np.array([0]), entity_cost=np.array([0])), QueryNode("b"),
                              QueryNode("c")],
                       edges=[QueryEdge(0, 1, np.array([0]), np.array([0])), QueryEdge(1, 2, np.array([0]), np.array([0])),
                              QueryEdge(2, 0, np.array([0]), np.array([0]))], anchor=0, answer=2)
    steps = dfs_steps(graph)
    assert [(s.parent, s.child, s.forward, s.closing) for s in steps] == [
        (0, 1, True, False), (1, 2, True, False), (2, 0, True, True)]


@st.composite
def matching_cases(draw):
    num_entities = draw(st.integers(2, 7))
    num_relations = draw(st.integers(1, 3))
    num_types = draw(st.integers(1, 3))
    raw = draw(st.lists(st.tuples(st.integers(0, num_entities - 1), st.integers(0, num_relations - 1),
                                  st.integers(0, num_entities - 1)), min_size=1, max_size=18, unique=True))
    types = np.asarray(draw(st.lists(st.booleans(), min_size=num_entities * num_types,
                                     max_size=num_entities * num_types)), bool).reshape(num_entities, num_types)
    kg = MatchIndex.from_arrays(np.asarray(raw, np.int32), num_entities, num_relations, types)
    num_nodes = draw(st.integers(2, 4))
    costs = st.integers(0, 3)  # few distinct costs: plenty of ties
    nodes = []
    for i in range(num_nodes):
        kind = draw(st.sampled_from(["entity", "typed", "free"])) if i else "entity"
        if kind == "entity":
            ents = np.asarray(draw(st.lists(st.integers(0, num_entities - 1), min_size=1, max_size=3, unique=True)))
            nodes.append(QueryNode(f"e{i}", entities=ents, entity_cost=np.asarray([draw(costs) for _ in ents])))
        elif kind == "typed":
            allowed = np.asarray([draw(st.booleans()) for _ in range(num_types)], bool)
            nodes.append(QueryNode(f"v{i}", type_allowed=allowed,
                                   type_cost=np.asarray([draw(costs) for _ in range(num_types)], np.int64)))
        else:
            nodes.append(QueryNode(f"v{i}"))
    edges = []
    for child in range(1, num_nodes):  # a random tree, plus maybe one cycle-closing edge
        parent = draw(st.integers(0, child - 1))
        head, tail = (parent, child) if draw(st.booleans()) else (child, parent)
        rels = np.asarray(draw(st.lists(st.integers(0, num_relations - 1), min_size=1, max_size=num_relations,
                                        unique=True)))
        edges.append(QueryEdge(head, tail, rels, np.asarray([draw(st.integers(1, 3)) for _ in rels], np.int64),
                               undirected=draw(st.booleans())))
    if num_nodes >= 3 and draw(st.booleans()):
        edges.append(QueryEdge(num_nodes - 1, 0, np.arange(num_relations), np.zeros(num_relations, np.int64)))
    graph = QueryGraph(nodes, edges, anchor=0, answer=num_nodes - 1)
    return kg, graph, draw(st.integers(1, 5)), draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(matching_cases())
def test_pruned_matching_equals_unpruned_enumeration(case):
    kg, graph, k, injective = case
    pruned = rank_matches(kg, graph, k, prune=True, injective=injective)
    everything = rank_matches(kg, graph, k, prune=False, injective=injective)
    assert [(m.score, m.nodes, m.triples) for m in pruned] == [(m.score, m.nodes, m.triples) for m in everything]


def test_pruning_saves_work_on_a_hub():
    # one director with 200 films; top-3 films by a cheap type should stop early
    triples = np.array([[i, 0, 200] for i in range(200)], dtype=np.int32)
    types = np.zeros((201, 2), bool)
    types[:200, 0] = True
    types[200, 1] = True
    kg = MatchIndex.from_arrays(triples, 201, 1, types)
    graph = QueryGraph([QueryNode("d", entities=np.array([200]), entity_cost=np.array([0])), _typed_var("?m", 0, 2)],
                       [QueryEdge(1, 0, np.array([0]), np.array([0]))], anchor=0, answer=1)
    stats: dict = {}
    matches = rank_matches(kg, graph, 3, stats=stats)
    assert [m.nodes[1] for m in matches] == [0, 1, 2]
    assert stats["pruned"] >= 1 and stats["expansions"] == 1


# ----- the method end to end -----------------------------------------------------------------


def test_safe_method_on_demo_kg(tmp_path):
    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.engine import Engine
    from stem_jax.eval.metrics import strict_metrics
    from stem_jax.methods.base import RetrievalMethod

    engine = Engine.open("demo", config=StemConfig(encoder=EncoderConfig(name="hashing")), planner="oracle",
                         cache_dir=tmp_path)
    method = engine.method("safe")
    assert isinstance(method, RetrievalMethod) and method.fingerprint()["safe"]["k_qg"] == 5
    questions = [q for q in engine.dataset.questions if q.hops in (1, 2)][:40]
    answers = engine.retrieve(questions, method="safe")
    hits = [strict_metrics(a.record["prediction"], a.record["ground_truth"])["hit_at_1"] for a in answers]
    assert np.mean(hits) >= 0.9  # oracle pseudo graphs on a clean KG: the top match is a gold answer
    for answer in answers:
        record = answer.record
        assert record["method"] == "safe" and record["query_graphs"] and record["evidence_count"] > 0
        assert set(record["ms"]) >= {"value", "adj", "match"}
        assert not set(answer.question.topic_entities) & set(record["prediction"])  # topic excluded (MetaQA rule)
    assert np.mean([a.record["coverage"] for a in answers]) >= 0.9

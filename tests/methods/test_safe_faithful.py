"""SAFE on hand-made graphs: injective matching cannot loop back through the topic, the answer node of
every pseudo query graph is the plan's answer slot, and phrased templates (words, not KG ids) are what
ADJ aligns."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.methods.safe.adj import PseudoGraph, instantiate
from stem_jax.methods.safe.matching import MatchIndex, QueryEdge, QueryGraph, QueryNode, rank_matches
from stem_jax.methods.safe.method import check_answer_slot, pseudo_from_schema
from stem_jax.methods.safe.phrases import METAQA_PHRASES, phrase, render
from stem_jax.plan.schema import SchemaGraph, SchemaTriple

# entities: 0 Heat (film), 1 Pacino (actor), 2 Serpico (film), 3 Mann (director), 4 Lumet (director)
# relations: 0 starred_actors, 1 directed_by
TRIPLES = np.array([[0, 0, 1], [2, 0, 1], [0, 1, 3], [2, 1, 4]], np.int32)


def _film_kg() -> MatchIndex:
    types = np.zeros((5, 3), bool)  # film, actor, director
    types[[0, 2], 0] = True
    types[1, 1] = True
    types[[3, 4], 2] = True
    return MatchIndex.from_arrays(TRIPLES, 5, 2, types)


def _var(name: str, type_id: int) -> QueryNode:
    cost = np.full(3, 700, np.int64)
    cost[type_id] = 0
    return QueryNode(name, type_allowed=np.eye(3, dtype=bool)[type_id], type_cost=cost)


def three_hop() -> QueryGraph:
    # Heat -starred-> ?a <-starred- ?m -directed_by-> ?d: directors of films sharing actors with Heat
    return QueryGraph(
        nodes=[QueryNode("Heat", entities=np.array([0]), entity_cost=np.array([0])), _var("?a", 1), _var("?m", 0),
               _var("?d", 2)],
        edges=[QueryEdge(0, 1, np.array([0]), np.array([0])), QueryEdge(2, 1, np.array([0]), np.array([0])),
               QueryEdge(2, 3, np.array([1]), np.array([0]))],
        anchor=0, answer=3)


def test_injective_matching_does_not_loop_back_through_the_topic():
    kg = _film_kg()
    loose = rank_matches(kg, three_hop(), k=10, injective=False)
    assert sorted(m.nodes[3] for m in loose) == [3, 4]  # ?m = Heat itself gives Heat's own director, Mann
    assert [m.nodes[2] for m in loose if m.nodes[3] == 3] == [0]
    strict = rank_matches(kg, three_hop(), k=10, injective=True)
    assert [(m.nodes[2], m.nodes[3]) for m in strict] == [(2, 4)]  # Serpico -> Lumet only
    assert all(len(set(m.nodes)) == len(m.nodes) for m in strict)


def test_pseudo_graph_answer_is_the_plans_answer_slot():
    # the answer slot is not the last node written: [ENT2] is the answer, [ENT1] a bridge variable
    schema = SchemaGraph((SchemaTriple("Heat", "starred_actors", "[ENT1]"),
                          SchemaTriple("[ENT2]", "starred_actors", "[ENT1]")), "[ENT2]")
    nodes, edges, answer = pseudo_from_schema(schema)
    assert nodes[answer] == "[ENT2]" and edges == ((0, "starred_actors", 1), (2, "starred_actors", 1))
    named = SchemaGraph((SchemaTriple("[ENT1]", "directed_by", "Mann"),), "Mann")
    with pytest.raises(ValueError, match="not a variable slot"):
        pseudo_from_schema(named)


def test_answer_slot_check_reports_a_split_answer():
    # schema types 0 film, 1 person, 2 director; film-person and person-director edges; director is 1 from person
    schema_edges = np.array([[0, 0, 1], [0, 1, 2], [1, 2, 2]])
    distance = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], float)
    pseudo = PseudoGraph(("Heat", "[ENT1]", "Ali"), ((0, "starred_actors", 1), (2, "directed_by", 1)), 1,
                         {0: (np.array([0]), np.array([0.0])), 2: (np.array([2]), np.array([0.0]))})
    same = instantiate(pseudo, (0, 0), 0.0, schema_edges, distance, 1)
    assert check_answer_slot(same, pseudo) is None
    split = instantiate(pseudo, (0, 1), 0.5, schema_edges, distance, 1)  # the answer gets type 1, then 2: bridged
    assert split.nodes[split.answer].name == "[ENT1]" and check_answer_slot(split, pseudo) == \
        "answer node split by a bridge"


def test_phrased_templates_carry_words_not_kg_ids():
    schema = SchemaGraph((SchemaTriple("Heat", "directed_by", "[ENT1]"),
                          SchemaTriple("[ENT2]", "directed_by", "[ENT1]")), "[ENT2]")
    rendered = render(schema)
    assert [t.relation for t in rendered.schema.triples] == ["film director", "film director"]
    assert rendered.schema.answer == "[ENT2]" and rendered.source == {"film director": "directed_by"}
    for relation in METAQA_PHRASES:
        assert phrase(relation) not in METAQA_PHRASES and phrase(relation) != relation.replace("_", " ")
    assert phrase("/people/person/nationality") == "nationality of"
    assert phrase("capital") == "capital of"


def test_safe_with_phrased_templates_on_demo_kg(tmp_path):
    from stem_jax.config import EncoderConfig, SafeConfig, StemConfig
    from stem_jax.engine import Engine
    from stem_jax.eval.metrics import strict_metrics

    config = StemConfig(encoder=EncoderConfig(name="hashing"), safe=SafeConfig(relation_phrases=True,
                                                                               injective=True))
    engine = Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path)
    questions = [q for q in engine.dataset.questions if q.hops in (1, 2)][:30]
    answers = engine.retrieve(questions, method="safe")
    method = engine.method("safe")
    assert method.fingerprint()["method"] == "safe+phrases"
    pseudo = [r for a in answers for r in a.record.get("pseudo_relations", [[]])[0]]
    assert pseudo and not set(pseudo) & set(engine.index.relation_ids)  # ADJ saw words, never KG ids
    hits = [strict_metrics(a.record["prediction"], a.record["ground_truth"])["hit"] for a in answers]
    assert np.mean(hits) >= 0.5

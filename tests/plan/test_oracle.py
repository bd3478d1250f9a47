"""Oracle planner on small hand-built KGs: qtype parsing, path -> schema, RoG shortest paths, gold evidence."""

from __future__ import annotations

import numpy as np
import pytest
from triple_tables import rows

from stem_jax.data.demo_kg import load_demo
from stem_jax.data.types import PathStep, Question
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index
from stem_jax.kg.paths import follow_relation_path
from stem_jax.plan import METAQA_RELATION_TABLE, OraclePlanner, oracle, strategy_for
from stem_jax.plan.schema import SchemaTriple, ground

F, B = True, False

# A tiny MetaQA-shaped KB. Kismet's director Dieterle also directed Juarez and wrote Kismet;
# Dead End has no director; Lost Film's director has no other film (a dead end for 2 hops).
KB = rows("""
    Kismet           | directed_by    | William Dieterle
    Juarez           | directed_by    | William Dieterle
    Satan Met a Lady | directed_by    | William Dieterle
    Kismet           | written_by     | William Dieterle
    Kismet           | starred_actors | Marlene Dietrich
    Juarez           | starred_actors | Bette Davis
    Satan Met a Lady | starred_actors | Bette Davis
    Kismet           | release_year   | 1944
    Juarez           | release_year   | 1939
    Kismet           | has_tags       | arabian nights
    Juarez           | has_genre      | Drama
    Lost Film        | directed_by    | Nobody Else
    Lost Film        | starred_actors | Marlene Dietrich
""")


def _question(qid: str, topic: str, answers: tuple[str, ...], **kw) -> Question:
    return Question(qid=qid, text=qid, topic_entities=(topic,), answers=answers, **kw)


# ---- MetaQA qtypes -------------------------------------------------------------------------


def test_metaqa_gold_path_composes_one_hop_pairs() -> None:
    assert oracle.metaqa_gold_path("movie_to_director") == (PathStep("directed_by", F),)
    assert oracle.metaqa_gold_path("movie_to_director_to_movie") == (
        PathStep("directed_by", F), PathStep("directed_by", B),
    )
    assert oracle.metaqa_gold_path("movie_to_actor_to_movie_to_language") == (
        PathStep("starred_actors", F), PathStep("starred_actors", B), PathStep("in_language", F),
    )
    # "tags" after movie and "tag" before it name the same type.
    assert oracle.metaqa_gold_path("movie_to_tags") == (PathStep("has_tags", F),)
    assert oracle.metaqa_gold_path("tag_to_movie_to_year") == (PathStep("has_tags", B), PathStep("release_year", F))
    # genre_to_movie is not a MetaQA qtype; it is movie_to_genre walked backwards.
    assert oracle.metaqa_gold_path("genre_to_movie") == (PathStep("has_genre", B),)


@pytest.mark.parametrize(
    ("qtype", "message"),
    [
        ("movie_to_producer", "unknown entity type 'producer'"),
        ("movie", "malformed MetaQA qtype"),
        ("movie_to__to_actor", "malformed MetaQA qtype"),
        ("actor_to_director", "no KB relation connects 'actor' to 'director'"),
    ],
)
def test_metaqa_gold_path_rejects_bad_qtypes(qtype: str, message: str) -> None:
    with pytest.raises(StemError, match=message):
        oracle.metaqa_gold_path(qtype)


def test_derive_relation_table_takes_the_per_question_majority() -> None:
    index = build_index(KB)
    questions = [
        # Dieterle directed and wrote Kismet: written_by gets a vote too, but loses 2:1.
        _question("q1", "Kismet", ("William Dieterle",), qtype="movie_to_director"),
        _question("q2", "Juarez", ("William Dieterle",), qtype="movie_to_director"),
        _question("q3", "William Dieterle", ("Kismet", "Juarez", "Satan Met a Lady"), qtype="director_to_movie"),
        _question("q4", "Bette Davis", ("Juarez", "Satan Met a Lady"), qtype="actor_to_movie"),
        _question("q5", "Kismet", ("1944",), qtype="movie_to_year"),
        _question("q6", "Kismet", ("Nowhere",), qtype="movie_to_language"),  # answer not in the KB: no vote
        _question("q7", "Kismet", ("Juarez",), qtype="movie_to_director_to_movie"),  # multi-hop: ignored
    ]
    assert oracle.derive_metaqa_relation_table(questions, index) == {
        "actor_to_movie": PathStep("starred_actors", B),
        "director_to_movie": PathStep("directed_by", B),
        "movie_to_director": PathStep("directed_by", F),
        "movie_to_year": PathStep("release_year", F),
    }
    with pytest.raises(StemError, match="no 1-hop question"):
        oracle.derive_metaqa_relation_table(questions[5:], index)


def test_checked_in_table_covers_every_metaqa_hop() -> None:
    # The 13 MetaQA 1-hop qtypes; every multi-hop qtype is a chain of these.
    assert len(METAQA_RELATION_TABLE) == 13
    for qtype, step in METAQA_RELATION_TABLE.items():
        assert step.forward == qtype.startswith("movie_to_"), qtype


# ---- path -> schema graph, strategy ----------------------------------------------------------


def test_schema_from_path_orients_triples_like_the_kb() -> None:
    schema = oracle.schema_from_path("Kismet", oracle.metaqa_gold_path("movie_to_director_to_movie"), "Breadth")
    assert schema.triples == (
        SchemaTriple("Kismet", "directed_by", "[ENT1]"),
        SchemaTriple("[ENT2]", "directed_by", "[ENT1]"),
    )
    assert schema.answer == "[ENT2]"
    assert schema.strategy == "Breadth"
    assert schema.constants() == ["Kismet"]

    backward_first = oracle.schema_from_path("Bette Davis", (PathStep("starred_actors", B), PathStep("release_year", F)))
    assert backward_first.triples == (
        SchemaTriple("[ENT1]", "starred_actors", "Bette Davis"),
        SchemaTriple("[ENT1]", "release_year", "[ENT2]"),
    )
    assert backward_first.strategy == "Precision"

    with pytest.raises(StemError, match="empty relation path"):
        oracle.schema_from_path("Kismet", ())


def test_oracle_schema_grounds_in_path_order() -> None:
    # The tracer walks schema edges depth-first from the topic: for a chain that is the path order.
    index = build_index(KB)
    schema = oracle.schema_from_path("Kismet", oracle.metaqa_gold_path("movie_to_director_to_movie_to_actor"))
    plan = ground(schema, "Kismet", index)
    relations = [index.relations[r] for r in plan.steps[:, 2]]
    assert relations == ["directed_by", "directed_by", "starred_actors"]
    assert plan.steps[:, :2].tolist() == [[0, 1], [1, 2], [2, 3]]
    assert plan.answer_slot == 3


def test_strategy_rule() -> None:
    assert strategy_for(("Juarez",)) == "Precision"
    assert strategy_for(("Juarez", "Juarez")) == "Precision"  # one distinct answer
    assert strategy_for(("Juarez", "Kismet")) == "Breadth"


# ---- the planner -----------------------------------------------------------------------------


def test_planner_prefers_gold_path_then_qtype() -> None:
    planner = OraclePlanner()
    index = build_index(KB)
    with_path = _question(
        "p", "Kismet", ("1939",), gold_path=(PathStep("directed_by", F), PathStep("directed_by", B),
                                             PathStep("release_year", F)),
        qtype="movie_to_year",  # ignored: the stored gold path wins
    )
    (schema,) = planner.plan(with_path, index)
    assert [t.relation for t in schema.triples] == ["directed_by", "directed_by", "release_year"]
    assert schema.strategy == "Precision"
    assert oracle.gold_paths(with_path).source == "gold_path"

    metaqa = _question("m", "Kismet", ("Juarez", "Satan Met a Lady"), qtype="movie_to_director_to_movie")
    (schema,) = planner.plan(metaqa, index)
    assert schema.describe() == "{(Kismet, directed_by, [ENT1]); ([ENT2], directed_by, [ENT1])} -> [ENT2] [Breadth]"

    unknown = _question("u", "Kismet", ("x",), qtype="movie_to_budget")
    assert planner.plan(unknown, index) == []
    assert "unknown entity type 'budget'" in oracle.gold_paths(unknown).reason
    bare = _question("b", "Kismet", ("x",))
    assert planner.plan(bare, index) == []
    assert oracle.gold_paths(bare).reason is not None


# ---- RoG shortest relation paths -------------------------------------------------------------

# Two shortest 2-hop relation paths from q to a (via m1 and via m2), a longer 3-hop one that must
# not count, a second answer one hop away, and an island answer nobody reaches.
ROG_GRAPH = (
    ("q", "r1", "m1"),
    ("m1", "r2", "a"),
    ("m2", "r3", "q"),
    ("m2", "r4", "a"),
    ("m3", "r1", "m1"),  # m1 -r1- m3 -r5- a would be a 3-hop path
    ("m3", "r5", "a"),
    ("q", "r6", "b"),
    ("x", "r7", "island"),
)


def test_shortest_relation_paths_keeps_every_distinct_shortest_path() -> None:
    paths = oracle.shortest_relation_paths(ROG_GRAPH, "q", ["a"])
    assert paths == [
        (PathStep("r1", F), PathStep("r2", F)),
        (PathStep("r3", B), PathStep("r4", F)),
    ]
    # Each answer at its own distance; unknown and unreachable answers are ignored.
    both = oracle.shortest_relation_paths(ROG_GRAPH, "q", ["a", "b", "island", "not-a-node"])
    assert both[0] == (PathStep("r6", F),)
    assert len(both) == 3
    assert oracle.shortest_relation_paths(ROG_GRAPH, "q", ["island"]) == []
    assert oracle.shortest_relation_paths(ROG_GRAPH, "q", ["q"]) == []
    assert oracle.shortest_relation_paths(ROG_GRAPH, "q", ["a"], max_hops=1) == []
    assert len(oracle.shortest_relation_paths(ROG_GRAPH, "q", ["a"], max_paths=1)) == 1


def test_shortest_relation_paths_dedupes_parallel_entity_walks() -> None:
    # Fifty films share the same relation path to the answer: one relation path, not fifty.
    graph = [("q", "acted_in", f"film{i}") for i in range(50)] + [(f"film{i}", "genre", "Drama") for i in range(50)]
    assert oracle.shortest_relation_paths(graph, "q", ["Drama"]) == [(PathStep("acted_in", F), PathStep("genre", F))]


def test_planner_on_rog_questions_has_a_beam_per_shortest_path() -> None:
    planner = OraclePlanner()
    question = _question("rog", "q", ("a",), graph=ROG_GRAPH)
    schemas = planner.plan(question, build_index(ROG_GRAPH))
    assert [s.describe() for s in schemas] == [
        "{(q, r1, [ENT1]); ([ENT1], r2, [ENT2])} -> [ENT2] [Precision]",
        "{([ENT1], r3, q); ([ENT1], r4, [ENT2])} -> [ENT2] [Precision]",
    ]
    unreachable = _question("rog2", "q", ("island",), graph=ROG_GRAPH)
    assert planner.plan(unreachable, build_index(ROG_GRAPH)) == []
    assert "no answer within 4 hops" in oracle.gold_paths(unreachable).reason


def test_gold_path_triples_on_rog_uses_the_question_graph() -> None:
    question = _question("rog", "q", ("a",), graph=ROG_GRAPH)
    other_kg = build_index([("unrelated", "r", "triple")])  # the union KG is not consulted
    assert oracle.gold_path_triples(question, other_kg) == {
        ("q", "r1", "m1"), ("m1", "r2", "a"), ("m2", "r3", "q"), ("m2", "r4", "a"),
    }


# ---- gold evidence ---------------------------------------------------------------------------


def test_gold_path_triples_prunes_dead_ends_and_excludes_the_topic() -> None:
    index = build_index(KB)
    # Movies sharing Marlene Dietrich with Kismet, then their directors: Lost Film -> Nobody Else.
    question = _question("m", "Kismet", ("Nobody Else",), qtype="movie_to_actor_to_movie_to_director")
    assert oracle.gold_path_triples(question, index) == {
        ("Kismet", "starred_actors", "Marlene Dietrich"),
        ("Lost Film", "starred_actors", "Marlene Dietrich"),
        ("Lost Film", "directed_by", "Nobody Else"),
    }
    # Kismet itself is excluded from the middle set, so its own director is never reached here
    # and a question answered by it has no gold evidence.
    assert oracle.gold_path_triples(_question("k", "Kismet", ("William Dieterle",),
                                       qtype="movie_to_actor_to_movie_to_director"), index) == set()

    # Juarez and Satan Met a Lady share Dieterle with Kismet; only the Juarez branch reaches 1939,
    # so the Satan Met a Lady triple is a dead end and is pruned.
    year = _question("y", "Kismet", ("1939",), qtype="movie_to_director_to_movie_to_year")
    assert oracle.gold_path_triples(year, index) == {
        ("Kismet", "directed_by", "William Dieterle"),
        ("Juarez", "directed_by", "William Dieterle"),
        ("Juarez", "release_year", "1939"),
    }
    # Missing relation, unknown topic, no path: no evidence.
    assert oracle.gold_path_triples(_question("l", "Kismet", ("English",), qtype="movie_to_language"), index) == set()
    assert oracle.gold_path_triples(_question("t", "Unknown", ("1939",), qtype="movie_to_year"), index) == set()
    assert oracle.gold_path_triples(_question("x", "Kismet", ("1939",), qtype="movie_to_budget"), index) == set()


def test_oracle_agrees_with_follow_relation_path_on_the_demo_kg() -> None:
    # Demo answers are defined by walking the gold path, so the oracle's evidence must reach
    # exactly the answers, using only triples follow_relation_path walks.
    dataset = load_demo(split="test", per_hop=20)
    index = build_index(dataset.triples)
    planner = OraclePlanner()
    for question in dataset.questions:
        (schema,) = planner.plan(question, index)
        assert schema.strategy == strategy_for(question.answers)
        topic = index.entity_id(question.topic_entities[0])
        reached, walked = follow_relation_path(index, topic, question.gold_path)
        assert {index.entities[i] for i in reached} == set(question.answers)
        evidence = oracle.gold_path_triples(question, index)
        assert evidence and evidence <= set(index.triple_strings(walked))
        last = question.gold_path[-1]
        ends = {(t if last.forward else h) for h, r, t in evidence if r == last.relation}
        assert set(question.answers) <= ends
        if len(question.gold_path) == 1:
            assert len(evidence) == len(np.unique(question.answers))

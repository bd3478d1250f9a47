"""Per-KG conventions: direction, used-triple rule and topic exclusion, in the walks (bounds), the
reference tracer and the pruning of unreached constants; the oracle's tree for conjunctive questions.

With relation one-hot embeddings and θ between 0 and 1, the tracer admits exactly the triples of the
step's relation, so the reference tracer must reach exactly what the bound's walk reaches under the
same conventions: the bound is the tracer's own ceiling, on random KGs with paired inverse
relations, self-loops and one-way relations.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stem_jax.config import TracerConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.eval.bound import data_bound, engine_bound
from stem_jax.kg.index import build_index
from stem_jax.kg.paths import follow_relation_path, walk_relation_path
from stem_jax.plan.oracle import OraclePlanner, schema_from_path
from stem_jax.plan.schema import ground
from stem_jax.trace.reference import trace_reference
from stem_jax.trace.types import TraceOptions, prune_unreached

RELS = ("parents", "children", "tracks", "is_in_country", "plays_in_club")
FAMILY = [
    ("X", "parents", "P"), ("P", "children", "X"), ("P", "children", "Y"), ("Y", "parents", "P"),
    ("Believe", "tracks", "Believe"), ("Believe", "tracks", "Song"),
    ("Preston", "is_in_country", "England"), ("Arsenal", "is_in_country", "England"),
    ("Kane", "plays_in_club", "Arsenal"),
]


def _one_hot(index) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    eye = np.eye(len(RELS), dtype=np.float32)
    by_rel = {r: eye[i] for i, r in enumerate(RELS)}
    emb = np.stack([by_rel[index.relations[r]] for r in index.triples[:, 1].tolist()])
    return emb, by_rel


def _trace_answers(index, topic: str, path, *, direction: str, used: str, order: str = "level",
                   exclude_topic: bool = False) -> set[str]:
    emb, by_rel = _one_hot(index)
    plan = ground(schema_from_path(topic, path, "Breadth"), topic, index)
    step_emb = np.stack([by_rel[s.relation] for s in path])
    result = trace_reference(index, plan, strategy="Breadth", anchor=index.entity_ids[topic], anchor_score=1.0,
                             triple_emb=emb, step_emb=step_emb, config=TracerConfig(theta=0.5),
                             options=TraceOptions(order=order, direction=direction, used=used))
    found = {index.entities[e] for e in result.answers(plan.answer_slot)}
    return found - {topic} if exclude_topic else found


def _walk(index, topic, path, **kw) -> set[str]:
    reached, _ = walk_relation_path(index, index.entity_ids[topic], path, **kw)
    return {index.entities[e] for e in reached.tolist()}


def test_paired_inverse_relations_need_direction():
    """'who is the offspring of X's mother': undirected + once per run loses X."""
    index = build_index(FAMILY)
    path = (PathStep("parents"), PathStep("children"))
    # undirected one-hot matching cannot confuse parents with children, so make them look alike
    emb, by_rel = _one_hot(index)
    alike = by_rel["parents"] + by_rel["children"]
    emb = np.where(np.isin(index.triples[:, 1], [index.relation_ids["parents"], index.relation_ids["children"]])[:, None],
                   alike / np.linalg.norm(alike), emb).astype(np.float32)
    step = (alike / np.linalg.norm(alike)).astype(np.float32)
    plan = ground(schema_from_path("X", path, "Breadth"), "X", index)

    def answers(direction: str, used: str) -> set[str]:
        result = trace_reference(index, plan, strategy="Breadth", anchor=index.entity_ids["X"], anchor_score=1.0,
                                 triple_emb=emb, step_emb=np.stack([step, step]), config=TracerConfig(theta=0.5),
                                 options=TraceOptions(direction=direction, used=used))
        return {index.entities[e] for e in result.answers(plan.answer_slot)}

    assert answers("undirected", "run") == {"Y"}  # (P, children, X) was used up by step 1
    assert answers("directed", "run") == {"X", "Y"}
    assert _walk(index, "X", path) == {"X", "Y"}  # the data's own bound


def test_self_loop_walked_twice_needs_step_rule():
    index = build_index(FAMILY)
    path = (PathStep("tracks"), PathStep("tracks"))
    for direction in ("undirected", "directed"):
        # once per run: step 1 uses both tracks triples, step 2 has none left
        assert _trace_answers(index, "Believe", path, direction=direction, used="run") == set()
        # once per branch: the loop's branch may still take (Believe, tracks, Song), not the loop again
        assert _trace_answers(index, "Believe", path, direction=direction, used="branch") == {"Song"}
        assert _trace_answers(index, "Believe", path, direction=direction, used="step") == {"Believe", "Song"}
    assert _walk(index, "Believe", path) == {"Believe", "Song"}


def test_one_way_relation_is_not_walked_backwards_when_directed():
    """'where is the club Kane plays for': undirected, step 2 from England's side is walked too."""
    index = build_index(FAMILY)
    path = (PathStep("plays_in_club"), PathStep("is_in_country"))
    assert _trace_answers(index, "Kane", path, direction="directed", used="run") == {"England"}
    two_way = (PathStep("plays_in_club"), PathStep("is_in_country"), PathStep("is_in_country"))
    assert _trace_answers(index, "Kane", two_way, direction="undirected", used="run") == {"Preston"}
    assert _trace_answers(index, "Kane", two_way, direction="directed", used="run") == set()


@st.composite
def random_kg(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = 10
    triples = []
    for _ in range(30):
        h, t, r = int(rng.integers(0, n)), int(rng.integers(0, n)), RELS[int(rng.integers(0, 3))]
        triples.append((f"e{h}", r, f"e{t}"))
        if r == "parents" and rng.random() < 0.7:  # paired inverse
            triples.append((f"e{t}", "children", f"e{h}"))
    triples += [(f"e{i}", "tracks", f"e{i}") for i in range(0, n, 3)]  # self-loops
    triples = list(dict.fromkeys(triples))
    path = tuple(PathStep(RELS[int(rng.integers(0, 3))], bool(rng.random() < 0.6)) for _ in range(draw(st.integers(1, 3))))
    return build_index(triples), f"e{int(rng.integers(0, n))}", path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_kg(), direction=st.sampled_from(["undirected", "directed"]),
       used=st.sampled_from(["run", "branch", "step"]), exclude=st.booleans())
def test_reference_tracer_reaches_exactly_the_walk(case, direction, used, exclude):
    index, topic, path = case
    if topic not in index.entity_ids:
        return
    traced = _trace_answers(index, topic, path, direction=direction, used=used, exclude_topic=exclude)
    walked = _walk(index, topic, path, directed=direction == "directed", used=used,
                   drop_topic="final" if exclude else "never")
    assert traced == walked


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=random_kg(), direction=st.sampled_from(["undirected", "directed"]),
       used=st.sampled_from(["branch", "step"]))
def test_sequential_equals_level_order_without_a_shared_list(case, direction, used):
    """Only the per-run list depends on the order; per branch or per step, both orders bind the same."""
    index, topic, path = case
    if topic not in index.entity_ids:
        return
    assert (_trace_answers(index, topic, path, direction=direction, used=used, order="sequential")
            == _trace_answers(index, topic, path, direction=direction, used=used, order="level"))


def test_metaqa_walk_is_unchanged():
    index = build_index(FAMILY)
    path = (PathStep("parents"), PathStep("children"))
    reached, _ = follow_relation_path(index, index.entity_ids["X"], path)
    assert {index.entities[e] for e in reached.tolist()} == {"Y"}  # the topic dropped from every set


def test_bounds_label_the_data_and_the_engine():
    index = build_index(FAMILY)
    q = Question("q", "offspring of X's mother", ("X",), ("X", "Y"), hops=2,
                 gold_path=(PathStep("parents"), PathStep("children")))
    data = data_bound([q], index)
    assert data["groups"]["2-hop"]["mean"]["hit"] == 1.0 and data["groups"]["2-hop"]["mean"]["exact_set"] == 1.0
    metaqa = data_bound([q], index, excludes_topic=True)
    assert metaqa["groups"]["2-hop"]["mean"]["exact_set"] == 0.0
    engine = engine_bound([q], index, exclude_topic=True)
    assert engine["groups"]["2-hop"]["mean"]["exact_set"] == 0.0  # topic excluded from the answers
    calibrated = engine_bound([q], index, direction="directed", used_triples="run", exclude_topic=False)
    assert calibrated["groups"]["2-hop"]["mean"]["exact_set"] == 1.0


def test_conjunctive_question_plans_one_tree_and_bounds_intersect():
    triples = [("Ann", "plays_in_club", "Club"), ("Club", "plays_in_club_inverse", "Ann"),
               ("Bob", "plays_in_club", "Club"), ("Club", "plays_in_club_inverse", "Bob"),
               ("Ann", "plays_position", "Forward"), ("Forward", "plays_position_inverse", "Ann"),
               ("Cid", "plays_position", "Forward"), ("Forward", "plays_position_inverse", "Cid")]
    index = build_index(triples)
    q = Question("c", "which player in Club plays at Forward", ("Club", "Forward"), ("Ann",), hops=1,
                 gold_path=(PathStep("plays_in_club_inverse"),),
                 constraints=(("Club", (PathStep("plays_in_club_inverse"),)),
                              ("Forward", (PathStep("plays_position_inverse"),))))
    (schema,) = OraclePlanner().plan(q)
    assert [(t.head, t.relation, t.tail) for t in schema.triples] == [
        ("Club", "plays_in_club_inverse", "[ENT1]"), ("Forward", "plays_position_inverse", "[ENT1]")]
    assert schema.answer == "[ENT1]"
    assert data_bound([q], index)["groups"]["1-hop"]["mean"]["exact_set"] == 1.0

    plan = ground(schema, "Club", index, {"Forward": index.entity_ids["Forward"]})
    assert plan.orientation().tolist() == [True, False]  # the second step walks from [ENT1] to Forward
    assert plan.constants == ((2, index.entity_ids["Forward"]),)
    rel_emb = np.eye(len(index.relations), dtype=np.float32)
    triple_emb = rel_emb[index.triples[:, 1]]
    step_emb = rel_emb[[index.relation_ids["plays_in_club_inverse"], index.relation_ids["plays_position_inverse"]]]
    result = trace_reference(index, plan, strategy="Breadth", anchor=index.entity_ids["Club"], anchor_score=1.0,
                             triple_emb=triple_emb, step_emb=step_emb, config=TracerConfig(theta=0.5),
                             options=TraceOptions(direction="directed", used="run"))
    assert {index.entities[e] for e in result.nodes[1]} == {"Ann", "Bob"}  # before the constant is checked
    width = 4
    arrays = {k: np.full((3, width), -1, np.int64) for k in ("nodes", "via", "parents")}
    for slot in range(3):
        for k, values in (("nodes", result.nodes), ("via", result.via), ("parents", result.parents)):
            arrays[k][slot, : len(values[slot])] = values[slot]
    nodes, via = prune_unreached(arrays["nodes"], arrays["via"], arrays["parents"], plan.steps, plan.constants)
    assert {index.entities[e] for e in nodes[1] if e >= 0} == {"Ann"}  # Bob does not reach Forward
    assert set(via[via >= 0].tolist()) < set(arrays["via"][arrays["via"] >= 0].tolist())


def test_prune_unreached_without_constants_is_identity():
    nodes = np.asarray([[0, -1], [3, 4]])
    via = np.asarray([[-1, -1], [7, 8]])
    parents = np.asarray([[-1, -1], [0, 0]])
    out_nodes, out_via = prune_unreached(nodes, via, parents, np.asarray([[0, 1, 0]]), [(1, -1)])
    assert out_nodes is nodes and out_via is via


@pytest.mark.parametrize("rule", ["run", "branch", "step"])
def test_unknown_settings_are_refused(rule):
    index = build_index(FAMILY)
    with pytest.raises(ValueError):
        _trace_answers(index, "X", (PathStep("parents"),), direction="sideways", used=rule)
    with pytest.raises(ValueError):
        walk_relation_path(index, 0, (PathStep("parents"),), used="never")

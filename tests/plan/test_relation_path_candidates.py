"""The path planner's candidates are exactly the relation paths that leave the topic in the KG."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.data.types import PathStep
from stem_jax.kg.index import build_index
from stem_jax.kg.mediators import looks_like_mid, mediator_mask
from stem_jax.plan.oracle import schema_from_path
from stem_jax.plan.relation_paths import enumerate_paths, path_key
from stem_jax.plan.schema_paths import chain_path


def _reference_paths(triples, topic, max_hops, mediators):
    """Every relation path of up to ``max_hops`` steps from ``topic``, by brute force over the triples."""
    def step(nodes, relation, forward):
        return {t if forward else h for h, r, t in triples if r == relation and (h if forward else t) in nodes}

    relations = sorted({r for _, r, _ in triples})
    found = {}
    for hops in range(1, max_hops + 1):
        for path in itertools.product([(r, f) for r in relations for f in (True, False)], repeat=hops):
            nodes = {topic}
            for relation, forward in path:
                nodes = step(nodes, relation, forward) - {topic}
            ends = {n for n in nodes if n not in mediators}
            if ends:
                found[path_key([PathStep(r, f) for r, f in path])] = ends
    return found


triple_lists = st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from(["r", "s", "t"]),
                                  st.sampled_from("abcdef")), min_size=1, max_size=14)


@settings(max_examples=60, deadline=None)
@given(triple_lists, st.sampled_from("abc"), st.sets(st.sampled_from("def"), max_size=2))
def test_enumeration_equals_brute_force(triples, topic, mediators):
    triples = list(dict.fromkeys(triples))
    index = build_index(triples)
    if topic not in index.entity_ids:
        return
    mask = np.asarray([e in mediators for e in index.entities])
    got = enumerate_paths(index, index.entity_ids[topic], max_hops=2, mediators=mask, fan_cap=1 << 20)
    got_sets = {path_key(c.path): {index.entities[i] for i in c.ends.tolist()} for c in got}
    assert got_sets == _reference_paths(triples, topic, 2, mediators)
    assert [c.hops for c in got] == sorted(c.hops for c in got)


def test_a_path_ending_only_at_mediators_continues_through_them():
    triples = [("Gardner", "teams", "m.0abc"), ("m.0abc", "team", "Yankees"), ("m.0abc", "from", "2008")]
    index = build_index(triples)
    mask = mediator_mask(index.entities)
    paths = {path_key(c.path) for c in enumerate_paths(index, index.entity_ids["Gardner"], mediators=mask)}
    assert paths == {"teams / team", "teams / from"}


def test_fan_out_is_bounded_at_wide_steps():
    triples = [("hub", "has", f"x{i}") for i in range(10)] + [(f"x{i}", "next", f"y{i}") for i in range(10)]
    index = build_index(triples)
    paths = enumerate_paths(index, index.entity_ids["hub"], fan_cap=3)
    two_step = [c for c in paths if c.hops == 2]
    assert len(two_step) == 1 and len(two_step[0].ends) == 3  # continued from the first 3 of 10 only
    assert len(paths[0].ends) == 10  # the one-step path's own end set stays complete


def test_mediators_are_freebase_mids_or_unnamed_entities_of_a_named_kg():
    assert looks_like_mid("m.0j2l5f6") and looks_like_mid("g.11b6ddd5w0") and looks_like_mid("/m/0abc")
    assert not looks_like_mid("Madonna") and not looks_like_mid("m.a") and not looks_like_mid("Mr. T")
    entities = [f"Q{i}" for i in range(20)]
    names = {e: f"name {e}" for e in entities[:19]}  # 95% named: the unnamed one is a join
    assert mediator_mask(entities, names).tolist() == [False] * 19 + [True]
    assert not mediator_mask(entities, {"Q0": "zero"}).any()  # a KG naming few entities shows ids


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["r", "s", "film.film.directed_by"]), st.booleans()), min_size=1,
                max_size=4))
def test_chain_schema_reads_back_as_its_path(steps):
    path = tuple(PathStep(r, f) for r, f in steps)
    assert chain_path(schema_from_path("Kismet", path, "Breadth")) == path

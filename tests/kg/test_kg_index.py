import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.data.types import PathStep
from stem_jax.errors import DataError
from stem_jax.kg.index import build_index, relation_text, serialize_triple
from stem_jax.kg.paths import follow_relation_path
from stem_jax.kg.subgraph import csr_gather, khop_subgraph

triples_strategy = st.lists(
    st.tuples(st.integers(0, 14), st.sampled_from(["r0", "r1", "r2"]), st.integers(0, 14)), min_size=1, max_size=60
).map(lambda rows: [(f"e{h}", r, f"e{t}") for h, r, t in rows])


@settings(max_examples=80, deadline=None)
@given(triples_strategy)
def test_csr_lists_every_incident_triple_once(triples):
    index = build_index(triples)
    assert index.num_triples == len(set(triples))
    for node in range(index.num_entities):
        expected = sorted(i for i, (h, _, t) in enumerate(index.triples.tolist()) if node in (h, t))
        assert index.incident(node).tolist() == expected
    assert index.triple_strings(range(index.num_triples)) == list(dict.fromkeys(triples))


def _naive_khop(index, seeds, hops, hub_cap):
    visited, frontier, triples = set(seeds), set(seeds), set()
    for step in range(hops):
        nxt = set()
        for node in frontier:
            if step > 0 and len(index.incident(node)) > hub_cap:
                continue
            for tid in index.incident(node).tolist():
                triples.add(tid)
                h, _, t = index.triples[tid].tolist()
                nxt |= {h, t} - visited
        visited |= nxt
        frontier = nxt
    return sorted(visited), sorted(triples)


@settings(max_examples=80, deadline=None)
@given(triples_strategy, st.integers(1, 3), st.integers(0, 6), st.data())
def test_khop_subgraph_matches_naive_bfs(triples, hops, hub_cap, data):
    index = build_index(triples)
    seeds = data.draw(st.lists(st.integers(0, index.num_entities - 1), min_size=1, max_size=2))
    sub = khop_subgraph(index, seeds, hops, hub_cap)
    nodes, triple_ids = _naive_khop(index, seeds, hops, hub_cap)
    assert sub.nodes.tolist() == nodes
    assert sub.triple_ids.tolist() == triple_ids


@settings(max_examples=60, deadline=None)
@given(triples_strategy, st.lists(st.tuples(st.sampled_from(["r0", "r1", "r2"]), st.booleans()), min_size=1, max_size=3))
def test_follow_relation_path_matches_set_walk(triples, steps):
    index = build_index(triples)
    topic = 0
    path = [PathStep(r, f) for r, f in steps]
    frontier = {index.entities[topic]}
    for step in path:
        frontier = {
            (t if step.forward else h) for h, r, t in set(triples)
            if r == step.relation and (h if step.forward else t) in frontier
        } - {index.entities[topic]}
    reached, _ = follow_relation_path(index, topic, path)
    assert sorted(index.entities[e] for e in reached) == sorted(frontier)


def test_csr_gather_concatenates_rows():
    offsets = np.array([0, 2, 2, 5])
    values = np.array([10, 11, 20, 21, 22])
    assert csr_gather(offsets, values, np.array([2, 0, 1])).tolist() == [20, 21, 22, 10, 11]
    assert csr_gather(offsets, values, np.array([1])).tolist() == []


def test_self_loop_listed_once_and_empty_kg_rejected():
    index = build_index([("a", "r", "a"), ("a", "r", "b")])
    assert index.incident(0).tolist() == [0, 1]
    with pytest.raises(DataError, match="no triples"):
        build_index([])
    with pytest.raises(DataError, match="unknown entity"):
        index.entity_id("zzz")


def test_text_forms():
    assert serialize_triple("Kismet", "directed_by", "William Dieterle") == "Kismet directed by William Dieterle"
    assert relation_text("/film/film/genre") == "film genre"
    assert relation_text("/people/person/spouse_s./people/marriage/type_of_union") == "marriage type of union"


def test_kg_fingerprint_is_memoised_per_index_object():
    """The memo never answers for another KG, even one built where a dropped index lived."""
    import gc

    from stem_jax.kg.embeddings import kg_fingerprint

    first = build_index([("a", "r", "b"), ("b", "r", "c")])
    value = kg_fingerprint(first)
    assert kg_fingerprint(first) == value and first.__dict__["fingerprint"] == value  # held by the index
    assert kg_fingerprint(build_index([("a", "r", "b"), ("b", "r", "c")])) == value  # same triples, same print
    del first
    gc.collect()
    for _ in range(20):  # new indexes, some at the freed address
        other = build_index([("a", "r", "b"), ("b", "r", "d")])
        assert kg_fingerprint(other) != value
        del other

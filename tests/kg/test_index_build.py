"""The vectorised ``build_index`` must equal the plain per-triple implementation it replaced.

``_reference_build`` is that implementation, kept here verbatim in spirit: dict ``setdefault`` per
string in the order head, relation, tail; duplicates dropped at their first position; CSR by
``lexsort`` of (node, triple id). Ids, triple order, CSR order and the fingerprint must match.
"""

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stem_jax.kg.index as index_module
from stem_jax.errors import DataError
from stem_jax.kg.index import _first_occurrences, build_index


def _reference_build(triples):
    entity_ids, relation_ids, rows = {}, {}, {}
    for head, relation, tail in triples:
        h = entity_ids.setdefault(head, len(entity_ids))
        r = relation_ids.setdefault(relation, len(relation_ids))
        t = entity_ids.setdefault(tail, len(entity_ids))
        rows.setdefault((h, r, t), None)
    array = np.asarray(list(rows), dtype=np.int32).reshape(-1, 3)
    m = array.shape[0]
    ids = np.arange(m, dtype=np.int32)
    not_loop = array[:, 0] != array[:, 2]
    nodes = np.concatenate([array[:, 0], array[not_loop, 2]])
    owners = np.concatenate([ids, ids[not_loop]])
    order = np.lexsort((owners, nodes))
    offsets = np.zeros(len(entity_ids) + 1, dtype=np.int64)
    np.cumsum(np.bincount(nodes, minlength=len(entity_ids)), out=offsets[1:])
    digest = hashlib.sha256()
    entities, relations = tuple(entity_ids), tuple(relation_ids)
    for h, r, t in array.tolist():
        digest.update(f"{entities[h]}\x1f{relations[r]}\x1f{entities[t]}\x1e".encode())
    return {"entities": entities, "relations": relations, "triples": array, "csr_offsets": offsets,
            "csr_triples": owners[order].astype(np.int32), "entity_ids": entity_ids, "relation_ids": relation_ids,
            "fingerprint": digest.hexdigest()[:12]}


def _assert_same(index, ref):
    assert index.entities == ref["entities"]
    assert index.relations == ref["relations"]
    assert list(index.entity_ids.items()) == list(ref["entity_ids"].items())
    assert list(index.relation_ids.items()) == list(ref["relation_ids"].items())
    for name in ("triples", "csr_offsets", "csr_triples"):
        got, want = getattr(index, name), ref[name]
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert index.fingerprint == ref["fingerprint"]


# few names, so self-loops (h == t) and duplicate triples are frequent; one non-ASCII name
names = st.sampled_from(["a", "b", "c", "d", "e", "Amélie", "f g", "h"])
triples_strategy = st.lists(st.tuples(names, st.sampled_from(["r0", "r1", "r/2"]), names), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(triples_strategy, st.sampled_from([1, 3, 7, 1 << 18]))
def test_build_index_equals_plain_reference(triples, chunk):
    old = index_module._CHUNK
    index_module._CHUNK = chunk  # small chunks cross vocabulary and duplicate boundaries
    try:
        index = build_index(iter(triples))  # a one-pass iterator, as a generator would give
    finally:
        index_module._CHUNK = old
    _assert_same(index, _reference_build(triples))


def test_build_index_random_power_law_kg():
    rng = np.random.default_rng(0)
    n, m = 300, 5000
    heads = np.minimum(rng.zipf(1.5, m), n) - 1
    tails = rng.integers(0, n, m)
    tails[::17] = heads[::17]  # self-loops
    rels = rng.integers(0, 9, m)
    triples = [(f"e{h}", f"r{r}", f"e{t}") for h, r, t in zip(heads, rels, tails, strict=True)]
    triples += triples[::5]  # duplicates, after their first copies
    _assert_same(build_index(triples), _reference_build(triples))


def test_first_occurrences_without_packing():
    """Ids too large for one int64 key take the lexsort path; same answer as a dict."""
    big = np.iinfo(np.int32).max
    rows = np.asarray([[big, 0, 1], [1, 2, big], [big, 0, 1], [5, 5, 5], [1, 2, big], [big, 1, 1]], np.int32)
    assert _first_occurrences(rows).tolist() == [0, 1, 3, 5]
    assert _first_occurrences(rows[[0, 1, 3]]) is None


def test_bad_rows_rejected():
    with pytest.raises(DataError, match="no triples"):
        build_index(iter([]))
    with pytest.raises(DataError, match="three fields"):
        build_index([("a", "r", "b"), ("a", "r")])

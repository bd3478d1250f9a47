"""The eval's host-side shortcuts give exactly what the plain code gives.

* RoG's normalisation of a space-joined prediction equals joining its names' normalisations (so each
  distinct name is normalised once), and :class:`SplitScorer` equals the metric functions, on names made of
  articles, punctuation, Greek sigma and odd whitespace;
* :func:`make_records` rounds scores and stage times as ``round()`` does, whatever their types
  (-0.0, ints, numpy floats), and refuses non-finite scores alike;
* :class:`SchemaGraph`'s kept node names and constants give the nodes, constants, incidence, DFS order
  and description that its triples define, and leave equality, hashing and pickles unchanged;
* the record encoder writes :func:`json.dumps`'s bytes; the sort-based unique equals ``np.unique``;
  the eval loop's collector pause restores the collector.
"""

from __future__ import annotations

import gc
import json
import math
import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_eval_fast_paths import plain_record, random_kg, random_questions, random_retrievals

from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.errors import StemError
from stem_jax.eval.metrics import (
    SplitScorer,
    _normalize_joined,
    rog_extract_topk,
    rog_normalize,
    rog_question_metrics,
    strict_metrics,
)
from stem_jax.eval.records import make_records
from stem_jax.eval.run_folder import _dumps
from stem_jax.gc_pause import collector_paused as _collector_paused
from stem_jax.kg.subgraph import sorted_unique as _unique
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, is_placeholder

# articles, ASCII and other punctuation, cased letters with context-dependent lower case (Σ, İ),
# case-ignorable marks next to them, and whitespace that str.split() knows but a space is not
TRICKY = st.lists(st.sampled_from([*"aAnNtThHeE ,.'-_1é", "Σ", "σ", "ς", "İ", "\u0301", "’", "–", "\t", "\n",
                                    "\x1c", "\u00a0", "\u2028", "the", "an"]), max_size=10).map("".join)
NAMES = st.lists(st.one_of(TRICKY, st.text(max_size=8)), max_size=8)


@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_joined_normalisation_equals_normalising_the_join(names):
    assert _normalize_joined(names) == rog_normalize(" ".join(names))


SCORER = SplitScorer()  # shared across examples, as across a split's questions


@settings(max_examples=400, deadline=None)
@given(NAMES, st.lists(st.one_of(TRICKY, st.sampled_from(["The", "a", "?", "Paris"])), min_size=1, max_size=6),
       st.booleans())
def test_split_scorer_equals_the_metric_functions(prediction, answers, as_text):
    prediction = "\n".join(prediction) if as_text else prediction
    want = rog_question_metrics(prediction, answers)
    assert json.dumps(SCORER.rog_question_metrics(prediction, answers)) == json.dumps(want)
    if as_text:
        return
    try:
        want = strict_metrics(prediction, answers)
    except ValueError:
        with pytest.raises(ValueError):
            SCORER.strict_metrics(prediction, answers)
        return
    assert json.dumps(SCORER.strict_metrics(prediction, answers)) == json.dumps(want)


@given(st.lists(st.sampled_from("abcde"), max_size=9), st.integers(-2, 7))
def test_topk_equals_the_counted_sort(prediction, k):
    counts = Counter(prediction)
    ranked = sorted(counts, key=lambda p: counts[p], reverse=True)
    assert rog_extract_topk(prediction, k) == ranked[: len(ranked) if k < 0 or k > len(ranked) else k]


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------


def toy_context(rng, count=25):
    index = random_kg(rng)
    questions = random_questions(rng, index, count)
    names = {e: e.upper() for e in list(index.entities)[::2]}
    return MethodContext(Dataset("toy", questions, [], entity_names=names), index, None, None, StemConfig()), questions


SCORES = [0.0, -0.0, 1.0, 0.1234565, 2.5e-7, -3.0000005, 1, 0, True, np.float32(0.3), np.float64(0.7000005),
          np.float32(-0.0), 10**20]
STAGE_MS = [0.0, -0.0, 1.0005, 3, 0.1234567, np.float64(2.0005), 12.3456789]


@pytest.mark.parametrize("seed", range(8))
def test_records_round_every_kind_of_score_and_stage_time_as_round_does(seed):
    rng = np.random.default_rng(300 + seed)
    context, questions = toy_context(rng)
    retrievals = random_retrievals(rng, context.index, questions)
    for retrieval in retrievals:
        retrieval.answers = [(e, SCORES[int(rng.integers(len(SCORES)))] if seed % 2 else float(rng.random()))
                             for e, _ in retrieval.answers]
        stages = ["plan", "trace", "answer"][: int(rng.integers(4))]
        retrieval.stage_ms = {k: STAGE_MS[int(rng.integers(len(STAGE_MS)))] if seed % 4 < 2 else float(rng.random())
                              for k in stages}
        retrieval.evidence += retrieval.evidence[: int(rng.integers(3))]  # repeated ids count once
    got = make_records(context, questions, retrievals, "stem")
    want = [plain_record(context, q, r, "stem") for q, r in zip(questions, retrievals, strict=True)]
    assert json.dumps(got) == json.dumps(want)
    assert [type(v) for r in got for v in r["ms"].values()] == [type(v) for r in want for v in r["ms"].values()]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_a_non_finite_score_is_refused(bad):
    rng = np.random.default_rng(5)
    context, questions = toy_context(rng, 6)
    retrievals = random_retrievals(rng, context.index, questions)
    retrievals[3].answers = [(0, 0.5), (1, bad), (2, bad)]
    with pytest.raises(StemError, match=rf"question {questions[3].qid} \({float(bad)}\)"):
        make_records(context, questions, retrievals, "stem")


def test_records_of_an_empty_retrieval():
    rng = np.random.default_rng(6)
    context, _ = toy_context(rng)
    question = Question("q", "t", ("nowhere",), ())
    retrieval = Retrieval("q", [])
    assert make_records(context, [question], [retrieval], "m") == [plain_record(context, question, retrieval, "m")]


# --------------------------------------------------------------------------------------------
# schema graphs
# --------------------------------------------------------------------------------------------


def plain_nodes(schema):
    return list(dict.fromkeys(n for t in schema.triples for n in (t.head, t.tail)))


def plain_incident(schema, node):
    return [i for i, t in enumerate(schema.triples) if node in (t.head, t.tail)]


def plain_dfs_order(schema, anchor):
    """Depth-first tree steps from ``anchor`` with an explicit stack of (node, edges left) instead of recursion."""
    steps, seen_edges, seen_nodes = [], set(), {anchor}
    stack = [(anchor, iter(plain_incident(schema, anchor)))]
    while stack:
        node, edges_left = stack[-1]
        edge = next(edges_left, None)
        if edge is None:
            stack.pop()
        elif edge not in seen_edges:
            seen_edges.add(edge)
            triple = schema.triples[edge]
            child = triple.tail if triple.head == node else triple.head
            if child not in seen_nodes:
                seen_nodes.add(child)
                steps.append((edge, node, child))
                stack.append((child, iter(plain_incident(schema, child))))
    return steps


NODES = st.sampled_from(["Kismet", "Paris", "[ENT1]", "[ENT2]", "[ENT3]"])
SCHEMAS = st.lists(st.tuples(NODES, st.sampled_from(["r", "s"]), NODES), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(SCHEMAS, st.data())
def test_schema_graph_nodes_incidence_and_dfs_follow_its_triples(raw, data):
    triples = tuple(SchemaTriple(*t) for t in raw)
    nodes = list(dict.fromkeys(n for t in triples for n in (t.head, t.tail)))
    schema = SchemaGraph(triples, data.draw(st.sampled_from(nodes)), data.draw(st.sampled_from(["Precision", "Breadth"])))
    assert schema.nodes() == plain_nodes(schema)
    assert schema.constants() == [n for n in plain_nodes(schema) if not is_placeholder(n)]
    for node in [*nodes, "elsewhere"]:
        assert schema.incident(node) == plain_incident(schema, node)
    for anchor in nodes:
        assert [(s.edge, s.parent, s.child) for s in schema.dfs_order(anchor)] == plain_dfs_order(schema, anchor)
    body = "; ".join(f"({t.head}, {t.relation}, {t.tail})" for t in triples)
    assert schema.describe() == f"{{{body}}} -> {schema.answer} [{schema.strategy}]"
    schema.nodes().append("mutated")  # callers get their own lists
    schema.constants().clear()
    assert schema.nodes() == plain_nodes(schema)
    fresh = SchemaGraph(triples, schema.answer, schema.strategy)  # nothing cached yet
    assert fresh == schema and hash(fresh) == hash(schema) and repr(fresh) == repr(schema)
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.dumps(schema, protocol) == pickle.dumps(fresh, protocol)
        assert pickle.loads(pickle.dumps(schema, protocol)).dfs_order(nodes[0]) == schema.dfs_order(nodes[0])


# --------------------------------------------------------------------------------------------
# encoding, unique, the collector
# --------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20)


@given(st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=6))
def test_record_encoder_writes_json_dumps_bytes(record):
    assert _dumps(record) == json.dumps(record, ensure_ascii=False, allow_nan=False)


def test_record_encoder_refuses_non_finite_numbers():
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError):
            _dumps({"id": "q", "scores": [bad]})


@given(st.lists(st.integers(-(2**62), 2**62), max_size=60))
def test_sort_based_unique_equals_numpy_unique(values):
    keys = np.asarray(values, dtype=np.int64)
    got, want = _unique(keys), np.unique(keys)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_collector_pause_restores_the_collector_as_found():
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with _collector_paused():
            assert not gc.isenabled()
            raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

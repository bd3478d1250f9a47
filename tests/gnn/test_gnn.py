"""Triple-GNN pieces: batching and padding masks, top-K guidance, the walk sampler, the output cache."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.config import SubgraphConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.errors import CacheError, StemError
from stem_jax.gnn.batching import GraphExample, pack_by_size, pad_batch, to_graphs_tuple
from stem_jax.gnn.data import ExampleFactory, gold_entities, question_examples, schema_depth, split_by_qid
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.gnn.guidance import guidance_size, select_top, select_top_reference, triple_mask
from stem_jax.gnn.infer import forward_fn, predict
from stem_jax.gnn.model import ModelSpec, init_params
from stem_jax.gnn.provider import GNNGuidance
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.schema import is_placeholder
from stem_jax.plan.walks import random_walk

SPEC_DIM = 32


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    dataset = load_dataset(DatasetSpec(name="demo", split="train"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder(dim=SPEC_DIM)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=1024, progress=False)
    factory = ExampleFactory(index, SchemaFeaturizer(index, embeddings, encoder), SubgraphConfig())
    pairs, skipped = question_examples(factory, dataset.questions, OraclePlanner().plan)
    assert not skipped
    spec = ModelSpec(layers=2, d_gnn=16, d_pem=SPEC_DIM, num_relations=index.num_relations)
    params = init_params(spec, jax.random.key(0))
    return {"dataset": dataset, "index": index, "factory": factory, "pairs": pairs, "spec": spec, "params": params}


def _single(example: GraphExample):
    """One graph with no padding at all (what the padded batch must agree with)."""
    g = to_graphs_tuple(example)
    nodes = {**g.nodes, "graph": np.zeros(example.n_node, np.int32), "valid": np.ones(example.n_node, bool)}
    return g._replace(nodes=nodes, globals={**g.globals, "valid": np.ones(1, bool)})


def test_examples_have_gold_labels_and_sorted_receivers(demo):
    factory, pairs = demo["factory"], demo["pairs"]
    for question, schema in pairs[:: len(pairs) // 12]:
        example = factory.for_plan(question, schema, labels=True)
        gold = gold_entities(question, demo["index"])
        assert example.labels.sum() + example.positives_outside == len(gold) > 0
        assert np.all(np.diff(example.receivers) >= 0)
        assert example.question.sum() == 1 and example.labels[example.question].all()  # the topic is on the path
        assert example.n_edge % 2 == 0 and example.schema.shape == (len(schema.triples), 3 * SPEC_DIM)
        assert schema_depth(schema, question.topic_entities[0]) == question.hops


def test_padding_does_not_change_real_nodes(demo):
    factory, pairs, spec, params = demo["factory"], demo["pairs"], demo["spec"], demo["params"]
    examples = [factory.for_plan(q, s) for q, s in (pairs[0], pairs[-1])]
    forward = forward_fn(spec)
    rel = jnp.asarray(factory.featurizer.relation_matrix())
    batch = pad_batch(examples)
    assert batch.n_node.shape[0] >= 3 and int(batch.n_node[len(examples)]) > 0  # padding graph present
    padded = np.asarray(forward(params, batch, rel))
    offsets = np.cumsum([0] + [e.n_node for e in examples])
    for j, example in enumerate(examples):
        alone = np.asarray(forward(params, _single(example), rel))
        np.testing.assert_allclose(padded[offsets[j] : offsets[j + 1]], alone, rtol=1e-5, atol=1e-6)
    # the public batched path returns each example's slice of the same padded batch
    probs = predict(params, spec, examples, np.asarray(rel))
    for j in range(len(examples)):
        np.testing.assert_array_equal(probs[j], padded[offsets[j] : offsets[j + 1]])


def test_pack_by_size_respects_budgets(demo):
    factory, pairs = demo["factory"], demo["pairs"]
    examples = [factory.for_plan(q, s) for q, s in pairs[::40]]
    batches = pack_by_size(examples, max_edges=200, max_graphs=3)
    assert sorted(i for b in batches for i in b) == list(range(len(examples)))
    for members in batches:
        assert len(members) <= 3
        assert len(members) == 1 or sum(examples[i].n_edge for i in members) <= 200


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=1, max_size=30), st.integers(1, 12),
       st.integers(0, 1000))
def test_select_top_matches_reference(probs, k, seed):
    entities = np.random.default_rng(seed).permutation(1000)[: len(probs)]
    ids, top = select_top(np.asarray(probs), entities, k)
    ref_ids, ref_probs = select_top_reference(probs, entities, k)
    assert ids.tolist() == ref_ids and top.tolist() == ref_probs


def test_guidance_size_and_triple_mask(demo):
    index = demo["index"]
    assert guidance_size(3, 4) == 12
    with pytest.raises(ValueError):
        guidance_size(0, 4)
    chosen = np.asarray([0, 5, 17, -1])
    mask = triple_mask(index, chosen)
    want = [h in (0, 5, 17) and t in (0, 5, 17) for h, _, t in index.triples.tolist()]
    assert mask.tolist() == want


def test_random_walks_are_masked_schema_graphs(demo):
    index, factory = demo["index"], demo["factory"]
    rng = np.random.default_rng(0)
    for i in range(20):
        walk = random_walk(index, rng, max_hops=3, hub_cap=2000)
        assert walk is not None and 1 <= len(walk.triples) <= 3 and len(set(walk.entities)) == len(walk.entities)
        schema = walk.schema
        assert schema.constants() == [index.entities[walk.start]]
        assert all(is_placeholder(n) for n in schema.nodes() if n != index.entities[walk.start])
        assert schema.answer == f"[ENT{len(walk.triples)}]"
        example = factory.from_walk(np.random.default_rng(i), 3, key="w")
        assert example.labels.sum() == example.labels.size - (example.labels == 0).sum() >= 2
        assert example.positives_outside == 0


def test_split_by_qid_is_deterministic_and_disjoint(demo):
    questions = demo["dataset"].questions
    train, val = split_by_qid(questions, 10)
    assert len(train) + len(val) == len(questions) and 0 < len(val) < len(questions) // 4
    assert {q.qid for q in train}.isdisjoint(q.qid for q in val)
    assert [q.qid for q in split_by_qid(questions, 10)[1]] == [q.qid for q in val]


def test_guidance_cache_computes_once_and_resumes(demo, tmp_path):
    factory, spec, params = demo["factory"], demo["spec"], demo["params"]
    one_hop = [p for p in demo["pairs"] if p[0].hops == 1]
    pairs = one_hop[:: len(one_hop) // 10][:10]
    info = {"params_sha": "test", "step": 0}
    provider = GNNGuidance(spec, params, info, factory, k_prime=4, width=16, cache_dir=tmp_path, chunk_rows=4)
    small = provider.table(pairs, show_progress=False)  # fewer pairs than min_cached_rows: no folder
    assert small.computed_rows == len(pairs) and not any(tmp_path.iterdir())
    provider.min_cached_rows = 1
    first = provider.table(pairs, show_progress=False)
    np.testing.assert_array_equal(first.ids, small.ids)
    assert first.computed_rows == len(pairs) and first.ids.shape == (len(pairs), 16)
    memory = GNNGuidance(spec, params, info, factory, k_prime=4, width=16, cache_dir=None).table(pairs, show_progress=False)
    # other batch compositions round differently in the last bit; the cache itself is exact (below)
    np.testing.assert_allclose(first.probs, memory.probs, rtol=1e-5, atol=1e-6)
    # a killed run: drop the last chunk from the manifest; only that chunk is recomputed
    manifest = first.path / "manifest.json"
    import json

    data = json.loads(manifest.read_text())
    del data["chunks"]["2"]
    manifest.write_text(json.dumps(data))
    again = provider.table(pairs, show_progress=False)
    assert again.computed_rows == len(pairs) - 8
    np.testing.assert_array_equal(again.ids, first.ids)
    assert provider.table(pairs, show_progress=False).computed_rows == 0
    # rows are best-first, inside each question's subgraph
    for (question, schema), row, prob in zip(pairs, first.ids, first.probs, strict=True):
        example = factory.for_plan(question, schema)
        live = row[row >= 0]
        assert len(live) == min(16, example.n_node) and np.isin(live, example.entities).all()
        assert np.all(np.diff(prob[: len(live)]) <= 0)
    with pytest.raises(CacheError):  # same folder, other inputs
        from stem_jax.gnn.cache import open_or_compute

        open_or_compute(first.path, ["x"], 16, lambda rows: None, inputs={"other": 1})


@pytest.mark.parametrize("method", ["reach", "full"])
def test_prefetched_chunks_equal_chunks_built_in_turn(demo, tmp_path, method):
    """The worker thread that builds chunk i+1 during chunk i's forward changes no row, in memory or
    cached, also when a resumed run asks for chunks out of step with the prefetch guess."""
    factory, spec, params = demo["factory"], demo["spec"], demo["params"]
    pairs = demo["pairs"][:: max(1, len(demo["pairs"]) // 23)][:23]
    info = {"params_sha": "test", "step": 0}

    def provider(cache_dir, prefetch):
        made = GNNGuidance(spec, params, info, factory, k_prime=4, width=16, cache_dir=cache_dir, chunk_rows=4,
                           method=method)
        made.prefetch, made.min_cached_rows = prefetch, 1
        return made

    in_turn = provider(None, False).table(pairs, show_progress=False)
    ahead = provider(None, True).table(pairs, show_progress=False)
    np.testing.assert_array_equal(ahead.ids, in_turn.ids)
    np.testing.assert_array_equal(ahead.probs, in_turn.probs)
    cached = provider(tmp_path, True)
    first = cached.table(pairs, show_progress=False)
    np.testing.assert_array_equal(first.ids, in_turn.ids)
    import json

    manifest = first.path / "manifest.json"
    data = json.loads(manifest.read_text())
    for chunk in ("0", "2", "5"):  # holes: chunk 1's prefetch guess is never asked for
        del data["chunks"][chunk]
    manifest.write_text(json.dumps(data))
    again = cached.table(pairs, show_progress=False)
    assert again.computed_rows == 4 + 4 + 3
    np.testing.assert_array_equal(again.ids, in_turn.ids)
    np.testing.assert_array_equal(again.probs, in_turn.probs)


def test_guidance_wider_than_engine_is_a_clear_error(demo):
    provider = GNNGuidance(demo["spec"], demo["params"], {}, demo["factory"], k_prime=8, width=16)
    question, schema = next((q, s) for q, s in demo["pairs"] if len(s.triples) == 3)
    with pytest.raises(StemError, match="engine.guidance=32"):
        provider.guidance_for(schema, np.arange(16))
    smaller = provider.with_k_prime(2)
    assert smaller.guidance_for(schema, np.asarray([5, 3, -1] + [-1] * 13)).tolist() == [5, 3]
    assert smaller.guidance_for(schema, np.arange(16)).tolist() == list(range(6)) and provider.k_prime == 8


def test_guidance_cache_is_keyed_by_the_code_that_computes_guidance(demo, tmp_path, monkeypatch):
    from stem_jax.gnn import provider as provider_module
    from stem_jax.gnn.provider import GUIDANCE_MODULES, guidance_code_fingerprint

    one_hop = [p for p in demo["pairs"] if p[0].hops == 1]
    pairs = one_hop[:: len(one_hop) // 10][:10]
    provider = GNNGuidance(demo["spec"], demo["params"], {"params_sha": "test"}, demo["factory"], k_prime=4,
                           width=16, cache_dir=tmp_path, chunk_rows=4)
    provider.min_cached_rows = 1
    first = provider.table(pairs, show_progress=False)
    assert first.computed_rows == len(pairs) and provider.table(pairs, show_progress=False).computed_rows == 0
    # another version of the guidance code: same checkpoint, KG and questions, yet nothing is read from the cache
    monkeypatch.setattr(provider_module, "guidance_code_fingerprint", lambda: "another-version")
    other = provider.table(pairs, show_progress=False)
    assert other.computed_rows == len(pairs) and other.path != first.path
    np.testing.assert_array_equal(other.ids, first.ids)  # (the code did not really change)
    # the fingerprint reads the listed modules' source: another module list is another version
    assert guidance_code_fingerprint() == guidance_code_fingerprint(GUIDANCE_MODULES)
    assert guidance_code_fingerprint(GUIDANCE_MODULES[:-1]) != guidance_code_fingerprint()
    # ... and an edit to one of them is too
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "guidance_code_probe.py").write_text("SCALE = 1\n")
    monkeypatch.syspath_prepend(str(folder))
    before = guidance_code_fingerprint.__wrapped__(("guidance_code_probe",))
    (folder / "guidance_code_probe.py").write_text("SCALE = 2\n")
    assert guidance_code_fingerprint.__wrapped__(("guidance_code_probe",)) != before

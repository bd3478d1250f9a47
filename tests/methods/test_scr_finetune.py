"""SCR's trainable question encoder (scr.question_encoder=minilm): the context string, frozen and trainable
layers, checkpoints and search, on a hand-made KG of three films."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hashing_tables import hashing_kg

from stem_jax.config import ScrConfig, StemConfig
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.encoder.base import minilm_model_dir
from stem_jax.encoder.minilm import MiniLMEncoder
from stem_jax.kg.index import relation_text
from stem_jax.methods.base import MethodContext
from stem_jax.methods.scr.graph import build_neighbour_table
from stem_jax.methods.scr.model import ScrSpec, encode_contexts, scr_model
from stem_jax.methods.scr.search import SearchTables, beam_search, beam_search_reference
from stem_jax.methods.scr.text import context_text, context_tokens, pretrained, question_tokens, token_tables
from stem_jax.methods.scr.train import (
    init_params,
    load_run,
    make_optimizer,
    prepare_data,
    step_loss,
    train_scr,
    with_pretrained_layers,
)

FILMS = {"Red Harbor": ("Ada Voss", ("Ben Oak",)), "Blue Canyon": ("Ada Voss", ("Cleo Fern",)),
         "Silver Night": ("Hugo Lind", ("Ben Oak",))}


@pytest.fixture(scope="module")
def kg():
    triples = []
    for film, (director, actors) in FILMS.items():
        triples += [(film, "directed_by", director)] + [(film, "starred_actors", a) for a in actors]
    questions = []
    for film, (director, actors) in FILMS.items():
        questions.append(Question(f"d/{film}", f"who directed {film}", (film,), (director,), 1,
                                  gold_path=(PathStep("directed_by"),)))
        questions.append(Question(f"a/{film}", f"who acted in {film}", (film,), actors, 1,
                                  gold_path=(PathStep("starred_actors"),)))
    return hashing_kg(triples, questions)


CONFIG = ScrConfig(layers=1, dim=16, tau=0.1, beam=3, threshold=0.0, max_steps=2, neighbours=8, batch_questions=4,
                   lr=1e-2, steps=4, train_batch=4, eval_every=2, question_encoder="minilm", finetune_layers=1,
                   context_tokens=32, encoder_lr=1e-3)


def _spec(kg, finetune_layers: int = 1) -> ScrSpec:
    return ScrSpec(layers=1, dim=16, head_layers=0, text_dim=kg.encoder.dim, num_relations=kg.index.num_relations,
                   max_steps=2, tau=0.1, neighbours=8, question_encoder="minilm", finetune_layers=finetune_layers,
                   context_tokens=32)


def test_context_string_is_built_in_the_papers_order(kg):
    pre = pretrained()
    assert context_text("who directed Red Harbor", ["Red Harbor", "Ada Voss"], ["directed by"]) == \
        "[CLS] who directed Red Harbor [SEP] Red Harbor [SEP] directed by [SEP] Ada Voss [SEP]"
    index, r = kg.index, kg.index.num_relations
    tables = token_tables(pre, list(index.entities), [relation_text(x) for x in index.relations], 5)
    question = jnp.asarray(question_tokens(pre, ["who acted with Ada Voss"]))
    path = [index.entity_ids["Ada Voss"], index.entity_ids["Red Harbor"], index.entity_ids["Ben Oak"]]
    rels = [index.relation_ids["directed_by"] + r, index.relation_ids["starred_actors"]]  # backwards, then forwards
    for hops in (0, 1, 2):
        tokens, mask = context_tokens(question, tables.entity_tokens, tables.relation_tokens,
                                      jnp.asarray([path[: hops + 1] + [-1] * (2 - hops)]),
                                      jnp.asarray([rels[:hops] + [-1] * (2 - hops)]), jnp.asarray([hops]), 32)
        names = ["directed by" if i == 0 else "starred actors" for i in range(hops)]
        names = [("reverse of " + n) if i == 0 else n for i, n in enumerate(names)]
        text = context_text("who acted with Ada Voss", [index.entities[e] for e in path[: hops + 1]], names)
        expected = pre.tokenizer._tok.encode(text, add_special_tokens=False).ids
        got = np.asarray(tokens[0])[np.asarray(mask[0])].tolist()
        assert got == expected and not np.asarray(tokens[0])[~np.asarray(mask[0])].any()
    # Too long a context is cut at the end, never past the buffer.
    tokens, mask = context_tokens(question, tables.entity_tokens, tables.relation_tokens, jnp.asarray([path]),
                                  jnp.asarray([rels]), jnp.asarray([2]), 8)
    assert np.asarray(mask).all() and np.asarray(tokens[0]).tolist() == expected[:8]


@pytest.mark.parametrize("finetune_layers", [0, 2])
def test_untrained_encoder_equals_the_frozen_minilm(kg, finetune_layers):
    """Zero trainable layers, or pretrained ones not yet trained: the pooled vector is all-MiniLM-L6-v2's."""
    pre = pretrained()
    spec = _spec(kg, finetune_layers)
    model = scr_model(spec)
    params = with_pretrained_layers(init_params(spec, jax.random.key(0)), spec)
    frozen = pre.frozen(pre.cfg.num_hidden_layers - finetune_layers)
    texts = ["who directed Red Harbor [SEP] Red Harbor [SEP] directed by [SEP] Ada Voss",
             "who acted in Blue Canyon [SEP] Blue Canyon"]
    ids = [pre.tokenizer._tok.encode(t).ids for t in texts]  # [CLS] ... [SEP], as the search builds them
    tokens = np.zeros((2, 32), np.int32)
    for row, seq in enumerate(ids):
        tokens[row, : len(seq)] = seq
    pooled = encode_contexts(model, params, frozen, jnp.asarray(tokens), jnp.asarray(tokens > 0), pooled=True)
    reference = MiniLMEncoder(minilm_model_dir()).encode(texts)
    np.testing.assert_allclose(np.asarray(pooled), reference, atol=2e-5)


@pytest.mark.slow  # ~30 s on a shared 2-core CPU: MiniLM gradients compile
def test_only_the_top_layers_train(kg, tmp_path):
    data = prepare_data(kg.questions, kg.questions[:2], kg.index, kg.embeddings, kg.encoder, CONFIG)
    spec = _spec(kg)
    model = scr_model(spec)
    params = with_pretrained_layers(init_params(spec, jax.random.key(0)), spec)
    pre = pretrained()
    # The frozen bottom is no parameter: params hold only the top layer (and the projection) of the encoder.
    assert sorted(params["params"]["context"]) == ["layer_5", "project"]
    from stem_jax.methods.scr.train import _device, batch_items

    items = _device(batch_items(data, CONFIG, 0, 0))

    def loss(p, frozen):
        enc = dataclasses.replace(data.encoder, frozen=frozen)
        return step_loss(model, p, data.graph, data.entity_text, data.relation_text, data.questions, items, enc)[0]

    grads, frozen_grads = jax.grad(loss, argnums=(0, 1))(params, data.encoder.frozen)
    assert all(not np.asarray(g).any() for g in jax.tree.leaves(frozen_grads))  # stop_gradient
    assert any(np.asarray(g).any() for g in jax.tree.leaves(grads["params"]["context"]["layer_5"]))
    optimizer = make_optimizer(dataclasses.replace(CONFIG, steps=10))
    state = optimizer.init(params)
    grad = jax.jit(jax.grad(loss))
    for _ in range(3):  # past the warm-up's zero first step
        grads = grad(params, data.encoder.frozen)
        updates, state = optimizer.update(grads, state, params)
        params = jax.tree.map(lambda a, u: a + u, params, updates)
    assert not np.allclose(np.asarray(params["params"]["context"]["layer_5"]["out"]["kernel"]),
                           pre.layer(5)["out"]["kernel"])
    for name, value in data.encoder.frozen["params"].items():  # the frozen bottom is still the pretrained one
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), value,
                     pre.variables["params"][name])


@pytest.mark.slow  # ~45 s: two short training runs
def test_checkpoint_round_trip_and_old_runs_load(kg, tmp_path):
    data = prepare_data(kg.questions, kg.questions[:2], kg.index, kg.embeddings, kg.encoder, CONFIG)
    summary = train_scr(data, CONFIG, tmp_path / "ft", plot=False, log=lambda _: None)
    spec, params, info = load_run(tmp_path / "ft")
    assert spec.question_encoder == "minilm" and spec.finetune_layers == 1 and spec.head_layers == 0
    assert info["text_encoder"] == pretrained().name
    assert sorted(params["params"]["context"]) == ["layer_5", "project"]
    trained = summary["params"] if not info["best"] else params
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(trained), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A run written before the encoder option (no such keys in scr.json) loads as the segments head.
    old = dataclasses.replace(CONFIG, question_encoder="segments", head_layers=1, steps=2)
    old_data = prepare_data(kg.questions, kg.questions[:2], kg.index, kg.embeddings, kg.encoder, old)
    train_scr(old_data, old, tmp_path / "old", plot=False, log=lambda _: None, stop_at=1)
    saved = json.loads((tmp_path / "old" / "scr.json").read_text())
    for key in ("question_encoder", "finetune_layers", "context_tokens"):
        saved["spec"].pop(key)
    for key in ("question_encoder", "finetune_layers", "context_tokens", "encoder_lr"):
        saved["config"].pop(key)
    (tmp_path / "old" / "scr.json").write_text(json.dumps(saved))
    spec, _, _ = load_run(tmp_path / "old")
    assert spec.question_encoder == "segments" and spec.head_layers == 1
    resumed = train_scr(old_data, old, tmp_path / "old", plot=False, log=lambda _: None)  # resumes, no refusal
    assert resumed["steps"] == 2


@pytest.mark.slow  # ~20 s: a short training run, then search compiles
def test_search_with_the_trained_encoder(kg, tmp_path):
    data = prepare_data(kg.questions, kg.questions[:2], kg.index, kg.embeddings, kg.encoder, CONFIG)
    train_scr(data, CONFIG, tmp_path / "run", plot=False, log=lambda _: None)
    stem = StemConfig(scr=CONFIG)
    dataset = Dataset(name="films", questions=kg.questions, triples=kg.triples)
    from stem_jax.methods.scr import build

    method = build(MethodContext(dataset, kg.index, kg.embeddings, kg.encoder, stem,
                                 options={"checkpoint": tmp_path / "run"}))
    retrievals = method.retrieve(kg.questions)
    for q, r in zip(kg.questions, retrievals, strict=True):
        assert r.answers and all(chain.startswith(q.topic_entities[0]) for chain in r.chains)
    # The batched search (all beams re-encoded in one MiniLM call per step) equals the one-beam reference.
    tables, params, model = method.tables, method.params, method.model
    topics = np.asarray([kg.index.entity_ids[f] for f in FILMS] + [-1])
    questions = question_tokens(pretrained(), [f"who directed {f}" for f in FILMS] + [""])
    batched, _ = beam_search(model, params, tables, method.neighbours, questions, topics, beam=3, threshold=0.0,
                             max_steps=2)
    assert batched[-1] == []
    for row, topic in enumerate(topics[:-1]):
        reference = beam_search_reference(model, params, tables, method.neighbours, questions[row], int(topic),
                                          beam=3, threshold=0.0, max_steps=2)
        assert [(h.entities, h.relations) for h in batched[row]] == [(h.entities, h.relations) for h in reference]
        np.testing.assert_allclose([h.prob for h in batched[row]], [h.prob for h in reference], rtol=1e-3)
    assert isinstance(tables, SearchTables) and tables.encoder is not None
    assert build_neighbour_table(kg.index, 8).num_entities == kg.index.num_entities

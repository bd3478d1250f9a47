"""SCR's two trainable parts in Flax: the relational GAT (eqs. 3-6) and the question head.

**Relational message passing** (over a jraph ``GraphsTuple`` of the whole KG; receivers sorted):
per layer l, with W_E, W_R learnable and attention vectors a_E ∈ R^{2d}, a_R ∈ R^d,

    β_{ee'} = a_E^T [W_E v_e ‖ W_E v_{e'}] + a_R^T (W_R v_r)          (eq. 3)
    α_{ee'} = softmax_{e' ∈ N_e} LeakyReLU(β_{ee'})                   (eq. 4)
    v̂_e     = σ(W_E v_e + Σ_{n ∈ N_e} α_{en} W_E v_n)                  (eq. 5)

with σ = ELU. Inputs are the frozen MiniLM entity and relation tables (384-d); the first layer's
W_E maps 384 -> d (the paper keeps d = 768 throughout). Edges run both ways: a triple's inverse
uses the same relation text plus a learned ``inverse`` offset, so directions stay distinct.

**Question head** (departure: the paper fine-tunes all of bert-base-uncased on the growing
string ``[CLS] q [SEP] e0 [SEP] r1 [SEP] e1 [SEP] ...``, eqs. 1 and 8). Here the MiniLM stays
frozen: the question, and each entity and relation appended to the context, are the frozen
MiniLM vectors of their own texts (question: encoded once; entities and relations: the KG
embedding tables), and ``head_layers`` trainable pre-LN transformer layers attend over that
sequence of segment vectors (with segment-type and position embeddings). The question slot's
output, projected to d, is h_{q_i}. So re-encoding a grown context costs a gather and a tiny
attention, not a MiniLM forward per beam and step. This is the default (``question_encoder =
"segments"``).

**Trainable context encoder** (``question_encoder = "minilm"``, closer to the paper): the context is
the token string itself (:mod:`.text`), run through all-MiniLM-L6-v2 (the CPU-sized stand-in for
the paper's BERT) initialised from its pretrained weights: :func:`frozen_bottom` (embeddings and
the bottom ``6 - finetune_layers`` layers) is frozen and not a parameter, :class:`ContextEncoder`
(the top ``finetune_layers`` layers, mean pooling as MiniLM was trained, L2 normalisation and a
projection to d) is trained. A MiniLM forward per beam and step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from stem_jax.encoder.bert import BertConfig, EncoderLayer, attention_bias, embed, layer_params, run_layers
from stem_jax.jraph_compat import jraph

# Segment types of the question context sequence.
SEG_QUESTION, SEG_ENTITY, SEG_RELATION, SEG_INVERSE = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class ScrSpec:
    """Everything that fixes parameter shapes and the search; stored beside every checkpoint."""

    layers: int
    dim: int
    head_layers: int
    text_dim: int
    num_relations: int
    max_steps: int
    tau: float
    neighbours: int
    relation_aware: bool = False  # scr+rel: a candidate's feature adds the relation that links it (not the paper)
    question_encoder: str = "segments"  # or "minilm": the fine-tuned MiniLM over the context string
    finetune_layers: int = 0  # minilm: trainable top layers of MiniLM (the rest frozen)
    context_tokens: int = 0  # minilm: token length of a context (longer ones are cut at the end)

    @property
    def minilm(self) -> bool:
        return self.question_encoder == "minilm"

    @property
    def context_length(self) -> int:
        """Segments of a context (question, e0, then (relation, entity) per step), or its tokens (minilm)."""
        return self.context_tokens if self.minilm else 2 + 2 * self.max_steps

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class RelationalGATLayer(nn.Module):
    """One layer of eqs. 3-5 over ``graph`` (nodes: features [N, d_in]; edges: directed relation ids)."""

    dim: int

    @nn.compact
    def __call__(self, graph: jraph.GraphsTuple, relation_features: jax.Array) -> jax.Array:
        h = graph.nodes
        num_nodes = h.shape[0]
        w_e = nn.Dense(self.dim, use_bias=False, name="W_E")(h)  # [N, d]
        w_r = nn.Dense(self.dim, use_bias=False, name="W_R")(relation_features)  # [2R, d]
        a_e = self.param("a_E", nn.initializers.normal(0.1), (2 * self.dim,))
        a_r = self.param("a_R", nn.initializers.normal(0.1), (self.dim,))
        # a_E^T [W v_e ‖ W v_e'] splits into a receiver term and a sender term.
        beta = ((w_e @ a_e[: self.dim])[graph.receivers] + (w_e @ a_e[self.dim :])[graph.senders]
                + (w_r @ a_r)[graph.edges])
        alpha = jraph.segment_softmax(nn.leaky_relu(beta, 0.2), graph.receivers, num_nodes,
                                      indices_are_sorted=True)
        messages = alpha[:, None] * w_e[graph.senders]
        aggregated = jraph.segment_sum(messages, graph.receivers, num_nodes, indices_are_sorted=True)
        return nn.elu(w_e + aggregated)


class RelationalGAT(nn.Module):
    """L stacked :class:`RelationalGATLayer` (eq. 6): entity features h_e for every node of ``graph``."""

    layers: int
    dim: int

    @nn.compact
    def __call__(self, graph: jraph.GraphsTuple, relation_text: jax.Array) -> jax.Array:
        inverse = self.param("inverse", nn.initializers.normal(0.1), (relation_text.shape[-1],))
        relation_features = jnp.concatenate([relation_text, relation_text + inverse], axis=0)  # [2R, text]
        for layer in range(self.layers):
            graph = graph._replace(nodes=RelationalGATLayer(self.dim, name=f"layer{layer}")(graph, relation_features))
        return graph.nodes


class QuestionHead(nn.Module):
    """Trainable layers over frozen MiniLM segment vectors of the question context -> h_q [.., d]."""

    dim: int
    layers: int
    heads: int = 4

    @nn.compact
    def __call__(self, segments: jax.Array, seg_type: jax.Array, mask: jax.Array) -> jax.Array:
        *batch, length, _ = segments.shape
        x = nn.Dense(self.dim, name="project")(segments)
        x = x + nn.Embed(4, self.dim, name="type")(seg_type)
        x = x + self.param("position", nn.initializers.normal(0.02), (length, self.dim))
        flat = x.reshape(-1, length, self.dim)
        attend = mask.reshape(-1, length)
        attention_mask = nn.make_attention_mask(attend, attend)
        for i in range(self.layers):
            y = nn.LayerNorm(name=f"ln_attn{i}")(flat)
            flat = flat + nn.MultiHeadDotProductAttention(self.heads, name=f"attn{i}")(y, y, mask=attention_mask)
            y = nn.LayerNorm(name=f"ln_mlp{i}")(flat)
            y = nn.Dense(2 * self.dim, name=f"mlp_in{i}")(y)
            flat = flat + nn.Dense(self.dim, name=f"mlp_out{i}")(nn.gelu(y))
        out = nn.Dense(self.dim, name="out")(nn.LayerNorm(name="ln_out")(flat[:, 0]))
        return out.reshape(*batch, self.dim)


def _segments(mask: jax.Array) -> jax.Array:
    # A context row holds one sequence: segment 1 for its tokens, 0 for the padding (the encoder's numbering).
    return mask.astype(jnp.int32)


def frozen_bottom(frozen: dict[str, Any], cfg: BertConfig, layers: int, tokens: jax.Array, mask: jax.Array
                  ) -> jax.Array:
    """MiniLM's embeddings and its first ``layers`` layers, the encoder's own pieces
    (:func:`stem_jax.encoder.minilm.embed`, ``run_layers``) over ``frozen`` (:class:`~stem_jax.encoder.minilm.MiniLM`'s
    variables, or any with its embeddings and those layers); frozen in SCR: its variables are inputs, not parameters.

    tokens, mask: [rows, length] (one sequence per row, positions 0..length-1) -> hidden [rows, length, h]. A real
    token attends to its row's real tokens only, so its state is the encoder's for that sequence alone."""
    params = jax.tree.map(jnp.asarray, frozen["params"])  # numpy variables cannot be indexed by traced positions
    segments = _segments(mask)
    x = embed(params, cfg, tokens, jnp.arange(tokens.shape[1])[None])
    return run_layers(layer_params(params, 0, layers), cfg, x, attention_bias(segments, x.dtype))


class ContextEncoder(nn.Module):
    """MiniLM's top layers (``first`` .. last, trainable; the encoder's ``run_layers``), masked mean pooling and L2
    normalisation (MiniLM's sentence vector), then a projection to ``dim``: h_q.
    ``pooled=True`` returns the sentence vector. The layers are named as in :class:`~stem_jax.encoder.minilm.MiniLM`
    (``layer_<i>``), so pretrained layers load into them as they are."""

    cfg: BertConfig
    first: int
    dim: int

    @nn.compact
    def __call__(self, hidden: jax.Array, mask: jax.Array, pooled: bool = False) -> jax.Array:
        cfg = self.cfg
        if self.is_initializing():  # declare the layers' parameters; the forward below reads them
            for i in range(self.first, cfg.num_hidden_layers):
                EncoderLayer(cfg, name=f"layer_{i}")(hidden, jnp.zeros((), hidden.dtype))
        segments = _segments(mask)
        layers = layer_params(self.variables.get("params", {}), self.first, cfg.num_hidden_layers)  # none: no layers
        hidden = run_layers(layers, cfg, hidden, attention_bias(segments, hidden.dtype))
        # Masked mean as a sum over tokens, not the encoder's ``pool`` (a matmul with the segment membership):
        # the two round differently (~4e-8), and SCR's trained runs and their predictions were made with this one.
        weight = mask.astype(hidden.dtype)[..., None]
        mean = (hidden * weight).sum(1) / jnp.maximum(weight.sum(1), 1e-9)
        vector = mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
        projected = nn.Dense(self.dim, name="project")(vector)
        return vector if pooled else projected


class CandidateRelation(nn.Module):
    """scr+rel only: a learned projection of the linking relation's text plus its direction, added to a
    candidate's GNN feature; slot 0 (relation -1, the stop option) gets a learned stop vector instead."""

    dim: int

    @nn.compact
    def __call__(self, relation_text: jax.Array, cand_relations: jax.Array) -> jax.Array:
        num_relations = relation_text.shape[0]
        projected = nn.Dense(self.dim, name="project")(relation_text.astype(jnp.float32))  # [R, d]
        direction = self.param("direction", nn.initializers.normal(0.02), (2, self.dim))
        stop = self.param("stop", nn.initializers.normal(0.02), (self.dim,))
        rel = jnp.maximum(cand_relations, 0)
        term = projected[rel % num_relations] + direction[(rel >= num_relations).astype(jnp.int32)]
        return jnp.where((cand_relations >= 0)[..., None], term, stop)


class ScrModel(nn.Module):
    """Both parts; :meth:`entities` runs the GNN, :meth:`questions` the head (see the module docstring)."""

    spec: ScrSpec
    bert: BertConfig | None = None  # minilm only: the encoder's architecture (text.bert_config())

    def setup(self) -> None:
        self.gnn = RelationalGAT(self.spec.layers, self.spec.dim)
        if self.spec.minilm:
            if self.bert is None:
                raise ValueError("a minilm question encoder needs the BERT config (use text.scr_model(spec))")
            self.context = ContextEncoder(self.bert, frozen_layers(self), self.spec.dim)
        else:
            self.head = QuestionHead(self.spec.dim, self.spec.head_layers)
        if self.spec.relation_aware:
            self.relation_term = CandidateRelation(self.spec.dim)

    def entities(self, graph: jraph.GraphsTuple, relation_text: jax.Array) -> jax.Array:
        return self.gnn(graph, relation_text)

    def questions(self, segments: jax.Array, seg_type: jax.Array, mask: jax.Array) -> jax.Array:
        return self.head(segments, seg_type, mask)

    def contexts(self, hidden: jax.Array, mask: jax.Array, pooled: bool = False) -> jax.Array:
        """minilm: h_q [rows, d] from the frozen bottom's hidden states [rows, length, h] (see ContextEncoder)."""
        return self.context(hidden, mask, pooled)

    def candidates(self, features: jax.Array, relation_text: jax.Array, cand_entities: jax.Array,
                   cand_relations: jax.Array) -> jax.Array:
        """Candidate features [..., C, d]: the GNN feature h_e (the paper, eq. 7); with ``relation_aware``
        (scr+rel) plus :class:`CandidateRelation`'s term for the linking relation."""
        h = features[jnp.maximum(cand_entities, 0)]
        if not self.spec.relation_aware:
            return h
        return h + self.relation_term(relation_text, cand_relations)

    def __call__(self, graph: jraph.GraphsTuple, relation_text: jax.Array, segments: jax.Array,
                 seg_type: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = self.entities(graph, relation_text)
        zeros = jnp.zeros((1, 1), jnp.int32)
        h_q = self.contexts(segments, mask) if self.spec.minilm else self.questions(segments, seg_type, mask)
        return self.candidates(features, relation_text, zeros, zeros), h_q


def scr_model(spec: ScrSpec) -> ScrModel:
    """The model of ``spec`` (with the installed MiniLM's architecture when its question encoder is minilm)."""
    if not spec.minilm:
        return ScrModel(spec)
    from stem_jax.methods.scr.text import bert_config

    return ScrModel(spec, bert_config())


def frozen_layers(model: ScrModel) -> int:
    """minilm: how many bottom MiniLM layers stay frozen (run by :func:`frozen_bottom`)."""
    return model.bert.num_hidden_layers - model.spec.finetune_layers


def encode_contexts(model: ScrModel, params: Any, frozen: Any, tokens: jax.Array, mask: jax.Array,
                    pooled: bool = False) -> jax.Array:
    """minilm: h_q [..., d] of contexts given as tokens [..., length] and mask: the frozen bottom (variables
    ``frozen``, under stop_gradient), then the trainable :class:`ContextEncoder` (``params``)."""
    lead, length = tokens.shape[:-1], tokens.shape[-1]
    flat_tokens, flat_mask = tokens.reshape(-1, length), mask.reshape(-1, length)
    hidden = jax.lax.stop_gradient(frozen_bottom(frozen, model.bert, frozen_layers(model), flat_tokens, flat_mask))
    out = model.apply(params, hidden, flat_mask, pooled, method=ScrModel.contexts)
    return out.reshape(*lead, out.shape[-1])


def context_segments(question: jax.Array, entity_text: jax.Array, relation_text: jax.Array, path_entities: jax.Array,
                     path_relations: jax.Array, length: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The question context q_i (eqs. 1 and 8) as frozen segment vectors.

    Args: question [..., text]; entity_text [N, text]; relation_text [R, text]; path_entities
    [..., T+1] (e0..eT, -1 past the end); path_relations [..., T] directed ids in [0, 2R) (-1 past the
    end); length [...] hops taken. Returns (segments [..., 2+2T, text], seg_type, mask)."""
    num_relations = relation_text.shape[0]
    steps = path_relations.shape[-1]
    ents = entity_text[jnp.maximum(path_entities, 0)].astype(jnp.float32)  # [..., T+1, text]
    rels = relation_text[jnp.maximum(path_relations, 0) % num_relations].astype(jnp.float32)  # [..., T, text]
    # Interleave e0, r1, e1, r2, e2, ...: [q, e0, (r_j, e_j) for j = 1..T].
    pairs = jnp.stack([rels, ents[..., 1:, :]], axis=-2).reshape(*rels.shape[:-2], 2 * steps, rels.shape[-1])
    segments = jnp.concatenate([question[..., None, :].astype(jnp.float32), ents[..., :1, :], pairs], axis=-2)
    rel_type = jnp.where(path_relations >= num_relations, SEG_INVERSE, SEG_RELATION)
    pair_type = jnp.stack([rel_type, jnp.full_like(rel_type, SEG_ENTITY)], axis=-1).reshape(*rel_type.shape[:-1],
                                                                                            2 * steps)
    lead = jnp.broadcast_to(jnp.asarray([SEG_QUESTION, SEG_ENTITY]), (*rel_type.shape[:-1], 2))
    seg_type = jnp.concatenate([lead, pair_type], axis=-1)
    position = jnp.arange(2 + 2 * steps)
    mask = position < (2 + 2 * length[..., None])
    return segments, seg_type, mask


def cosine_logits(h_q: jax.Array, h_e: jax.Array, tau: float) -> jax.Array:
    """CosineSimilarity(h_q, h_e) / τ for h_q [..., d] against candidates h_e [..., C, d] (eqs. 7, 11)."""
    q = h_q / jnp.maximum(jnp.linalg.norm(h_q, axis=-1, keepdims=True), 1e-6)
    e = h_e / jnp.maximum(jnp.linalg.norm(h_e, axis=-1, keepdims=True), 1e-6)
    return jnp.einsum("...d,...cd->...c", q, e) / tau

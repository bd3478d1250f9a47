"""The KG-constrained planner: rank the relation paths that really leave the topic against the question.

This is the paper's schema-guided alignment (SGDA) without an LLM. A template classifier
(:mod:`stem_jax.plan.pattern`) can only repeat the plans it saw in training; people ask in their own words,
about relations no training question used. Here the candidates are the topic's own paths in the KG
(:mod:`stem_jax.plan.relation_paths`), so every plan leaves the topic, and a learned model scores each
against the question:

* the question, topic mention masked (``X``), embedded with the frozen sentence encoder: ``q``;
* each step's relation text embedded with the same encoder: ``r_1 .. r_L`` (zeros past the path's end),
  its orientation, the path's length and ``log(1 + entities it ends at)``;
* an MLP over ``[q, r_i, q * r_i, cos(q, r_i), ...]`` gives one logit per path; a softmax over the topic's
  candidates (temperature fitted on held-out questions) gives each path's probability.

Training (:func:`train_path_ranker`) is listwise: for each training question, the target puts its mass on
the candidates that end at gold answers, in proportion to the F1 of their end set against the answers (the
gold path counts as a hit even when the incomplete KG does not reach the answers along it); every other
candidate of the same topic is a negative. Question -> path pairs without a topic (RoG's
``relation-paths.jsonl``) add positives against paths drawn from the KG's path vocabulary. A logistic head
on ``q`` gives P(Breadth) (several answers). Everything runs on CPU in a minute or two.

The beam is the ``B`` most probable paths, each a chain schema graph with its probability; relation
embeddings are cached per relation text, and the per-topic enumeration by :class:`PathCatalog`.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import PathStep, Question
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.kg.mediators import mediator_mask
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.question_text import mask_topics, topic_names
from stem_jax.plan.relation_paths import CandidatePath, PathCatalog, path_key
from stem_jax.trained_model import TrainedModel, params_from_members

RANKER_FILE = "ranker.json"
PATHS_FOLDER = "paths"  # the ranker's folder inside a pattern planner's folder
N_EXTRA = 3  # per path: hops / max_hops, log1p(ends), 1-step flag
N_STEP = 2  # per step: orientation (+1 forward, -1 backward, 0 none), share of its words in the question


@dataclasses.dataclass(frozen=True)
class PathRankerConfig:
    """Path enumeration bounds and the model's training budget."""

    max_hops: int = 2
    fan_cap: int = 64
    hub_cap: int = 2000
    max_paths: int = 4096
    max_candidates: int = 256  # per training question (positives always kept, negatives sampled)
    hidden: int = 128
    projection: int = 96
    epochs: int = 40
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    extra_pairs_weight: float = 0.5
    extra_negatives: int = 63
    seed: int = 0
    # fine-tune the sentence encoder's top ``tune_layers`` layers as the question side (0: the frozen encoder);
    # relation texts keep their frozen embeddings (stem_jax/plan/question_tower.py)
    tune_layers: int = 0
    tune_learning_rate: float = 3e-5
    # also learn a correction of each KG relation's embedding (weight decay pulls it back to the encoder's); the
    # corrected vectors replace the relation bank's, so relations no training question reaches keep their own
    tune_relations: bool = False
    relation_l2: float = 0.1  # the corrections' penalty: this times the sum of their squared norms
    # training targets credit a path only when no shorter candidate reaches the answers as well: a walk that goes
    # out and back (club -> its players -> their club) ends where the one-step path does, and crediting it teaches
    # a ranker that never saw the KG to prefer longer paths whose steps repeat the question's relation
    shortest_targets: bool = False
    # leave out the paths through a relation stored as another's exact reverse (plays_in_club_inverse beside
    # plays_in_club; relation_paths.mirrored_relations): the same walk under two names and orientations
    skip_mirrors: bool = False
    # a step's text also names the entities it leads to: the relation's text, then up to ``end_names`` of its most
    # frequent targets in that orientation ("directed by: Steven Spielberg, ..." forward, "directed by: Jaws, ..."
    # backward), so the two orientations read differently and a question's answer type ("which club") can match
    # what a step reaches; 0: the relation's text alone, the same both ways
    end_names: int = 0
    end_names_weight: float = 1.0  # the named text's weight beside the relation's own text (weight 1)


def _logits(params: dict[str, Any], table, q, rel_idx, steps, extra, projected_table=None):
    """Path logits for [..., C] candidates: q [..., d], rel_idx [..., C, L], steps [..., C, L, S], extra [..., C, E].

    Question and relations are projected to ``k`` dimensions first (the relation table once, not per
    candidate), so a step's features are ``[r', q' * r', cos(q, r), its S flags]``. ``projected_table``: the
    relation table already projected (``table @ params["wr"]``), when the parameters are fixed."""
    import jax

    rel = table[rel_idx]  # [..., C, L, d]
    cos = (q[..., None, None, :] * rel).sum(-1, keepdims=True)
    projected = (table @ params["wr"] if projected_table is None else projected_table)[rel_idx]  # [..., C, L, k]
    qp = q @ params["wq"]  # [..., k]
    per_step = jax.numpy.concatenate([projected, qp[..., None, None, :] * projected, cos, steps], axis=-1)
    flat = per_step.reshape(*per_step.shape[:-2], -1)
    x = jax.numpy.concatenate([flat, extra, jax.numpy.broadcast_to(qp[..., None, :], (*flat.shape[:-1], qp.shape[-1]))],
                              axis=-1)
    h = jax.nn.gelu(x @ params["w1"] + params["b1"])
    return (h @ params["w2"])[..., 0] + params["b2"][0]


def init_params(d: int, config: PathRankerConfig) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(config.seed)
    k, hidden = config.projection, config.hidden
    d_in = config.max_hops * (2 * k + 1 + N_STEP) + N_EXTRA + k

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32)

    return {"wq": dense(d, k), "wr": dense(d, k), "w1": dense(d_in, hidden), "b1": np.zeros(hidden, np.float32),
            "w2": dense(hidden, 1), "b2": np.zeros(1, np.float32),
            "wb": np.zeros(d, np.float32), "bb": np.zeros(1, np.float32)}  # wb, bb: the P(Breadth) head on q


_WORD = re.compile(r"[a-z0-9]+")
MIN_ROWS = 256  # the smallest candidate-row bucket of a scoring call
MAX_ROWS = 1 << 15  # candidate rows one scoring call takes at most (a larger batch is scored in several)


def candidate_bucket(n: int) -> int:
    """Rows of a scoring call for ``n`` candidates: the next power of two, at least :data:`MIN_ROWS`."""
    return max(MIN_ROWS, 1 << max(n - 1, 0).bit_length())


def question_bucket(q: int) -> int:
    """Question rows of a scoring call for a batch of ``q``: the next power of eight (the question side is cheap,
    so padding it costs little and keeps the shapes few)."""
    width = 1
    while width < q:
        width *= 8
    return width


def words_of(text: str) -> set[str]:
    """Lower-case word stems (a final ``s`` dropped) for the lexical-overlap feature."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(text.lower())}


@dataclasses.dataclass(frozen=True)
class ReadableNames:
    """Per entity id its row of ``text`` (-1: no readable name: a mediator or an opaque id such as ``m.0abc``)."""

    rows: np.ndarray
    text: list[str]

    def __getitem__(self, ids: Any) -> Any:
        return self.rows[ids]


_MID = re.compile(r"^(?:[mg]\.[0-9a-z_]+|Q\d+|[0-9a-f-]{16,})$")  # Freebase mids, Wikidata items, hashes


def readable_names(index: KGIndex, names: dict[str, str] | None) -> ReadableNames:
    """The entities' display names where they say something (``Alan_PULIDO`` reads ``Alan PULIDO``)."""
    mediators = mediator_mask(index.entities, names)
    rows = np.full(len(index.entities), -1, np.int64)
    text: list[str] = []
    for i, entity in enumerate(index.entities):
        shown = (names or {}).get(entity, entity).strip()
        if mediators[i] or not shown or _MID.match(shown):
            continue
        rows[i] = len(text)
        text.append(shown.replace("_", " "))
    return ReadableNames(rows, text)


@dataclasses.dataclass
class PathRanker(TrainedModel):
    """A trained path scorer used as a planner (see the module docstring)."""

    config: PathRankerConfig
    relation_bank: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # relation text -> embedding
    beam: int = 4
    min_prob: float = 0.0
    names: dict[str, str] | None = None
    index: KGIndex | None = None
    encoder: Any = None
    embed_fn: Callable[[list[str]], np.ndarray] | None = None
    name: str = "paths"
    _catalog: PathCatalog | None = dataclasses.field(default=None, repr=False)
    _forward: Any = dataclasses.field(default=None, repr=False)
    _table: Any = dataclasses.field(default=None, repr=False)
    _property_words: dict[str, set[str]] = dataclasses.field(default_factory=dict, repr=False)
    _arrays: OrderedDict = dataclasses.field(default_factory=OrderedDict, repr=False)  # topic -> topic_arrays
    _words: Any = dataclasses.field(default=None, repr=False)  # (index, word -> relation ids, words per relation)
    tower: Any = None  # a QuestionTower with fine-tuned top layers: the question side (None: the frozen encoder)

    # ----- inputs -------------------------------------------------------------------------------
    @property
    def catalog(self) -> PathCatalog:
        if self._catalog is None or self._catalog.index is not self.index:
            if self.index is None:
                raise StemError("the path planner needs the KG index (Engine and eval pass it)")
            c = self.config
            self._catalog = PathCatalog(self.index, max_hops=c.max_hops, fan_cap=c.fan_cap, hub_cap=c.hub_cap,
                                        max_paths=c.max_paths, mediators=mediator_mask(self.index.entities, self.names))
        return self._catalog

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        if self.embed_fn is not None:
            return np.asarray(self.embed_fn(texts), np.float32)
        if self.encoder is None:
            from stem_jax.config import EncoderConfig
            from stem_jax.encoder.base import get_encoder

            self.encoder = get_encoder(EncoderConfig())
        if self.encoder.name != self.encoder_name:
            raise StemError(f"the path planner was trained on {self.encoder_name} embeddings, this run encodes with "
                            f"{self.encoder.name}\n  how to fix: use the same --encoder.* options, or retrain with "
                            "`stem-jax train-planner`")
        return np.asarray(self.encoder.encode(texts), np.float32)

    @property
    def dim(self) -> int:
        return int(self.params["wb"].shape[0])

    def relation_vectors(self, relations: Sequence[str]) -> dict[str, np.ndarray]:
        """Embeddings of the relations' texts, encoding only those not in the bank yet."""
        texts = {r: relation_text(r) for r in relations}
        missing = sorted({t for t in texts.values() if t not in self.relation_bank})
        if missing:
            for text, row in zip(missing, self._embed(missing), strict=True):
                self.relation_bank[text] = row.astype(np.float32)
        return {r: self.relation_bank[t] for r, t in texts.items()}

    def masked_texts(self, questions: Sequence[Question]) -> list[str]:
        """The questions' texts with their topic mentions masked: what the question side reads."""
        return [mask_topics(q.text, topic_names(q, self.names))[0] for q in questions]

    def question_vectors(self, questions: Sequence[Question]) -> np.ndarray:
        texts = self.masked_texts(questions)
        distinct = sorted(set(texts))
        embed = self.tower.encode if self.tower is not None else self._embed
        rows = dict(zip(distinct, embed(distinct), strict=True))
        return np.stack([rows[t] for t in texts]).astype(np.float32) if texts else np.zeros((0, self.dim), np.float32)

    def relation_table(self) -> np.ndarray:
        """float32 [R + 1, d]: the KG's relations' embeddings in id order, then a zero row (no step); with
        ``config.end_names``, [2R + 1, d]: row ``2 r + forward`` is relation ``r``'s embedding averaged with that
        of its :meth:`step_texts` in that orientation (then normalised), then the zero row."""
        if self._table is None or self._table[0] is not self.index:
            vectors = self.relation_vectors(list(self.index.relations))
            rows = [vectors[r] for r in self.index.relations]
            if self.config.end_names and rows:
                texts = self.step_texts()
                missing = sorted({t for t in texts if t not in self.relation_bank})
                for text, row in zip(missing, self._embed(missing), strict=True):
                    self.relation_bank[text] = row.astype(np.float32)
                # the named text's embedding averaged with the relation's own: the names add what a step reaches
                # without drowning what the relation says
                named = (self.config.end_names_weight * np.stack([self.relation_bank[t] for t in texts])
                         + np.repeat(np.stack(rows), 2, axis=0))
                rows = list(named / np.maximum(np.linalg.norm(named, axis=1, keepdims=True), 1e-6))
            rows.append(np.zeros(self.dim, np.float32))
            self._table = (self.index, np.stack(rows).astype(np.float32))
        return self._table[1]

    def step_texts(self) -> list[str]:
        """Per relation id ``r``, the texts of walking it backward and forward (list positions ``2 r`` and
        ``2 r + 1``): the relation's text, then up to ``config.end_names`` readable names of the entities that
        orientation reaches most often (ties by entity id; mediators and unnamed ids left out)."""
        index, count = self.index, self.config.end_names
        readable = readable_names(index, self.names)
        triples = np.asarray(index.triples, np.int64)
        triples = triples[np.argsort(triples[:, 1], kind="stable")]
        bounds = np.searchsorted(triples[:, 1], np.arange(index.num_relations + 1))
        texts = []
        for r, relation in enumerate(index.relations):
            rows = triples[bounds[r]: bounds[r + 1]]
            base = relation_text(relation)
            for ends in (rows[:, 0], rows[:, 2]):  # backward reaches heads, forward tails
                ends = ends[readable[ends] >= 0] if len(ends) else ends
                if not len(ends):
                    texts.append(base)
                    continue
                distinct, times = np.unique(ends, return_counts=True)
                top = distinct[np.lexsort((distinct, -times))[:count]]
                texts.append(f"{base}: " + ", ".join(readable.text[int(readable[e])] for e in top.tolist()))
        return texts

    def step_id(self, relation: str, forward: bool) -> int:
        """A step's row of :meth:`relation_table`."""
        rid = self.index.relation_ids[relation]
        return 2 * rid + int(forward) if self.config.end_names else rid

    @property
    def no_step(self) -> int:
        """The zero row of :meth:`relation_table` (no step)."""
        return (2 if self.config.end_names else 1) * self.index.num_relations

    def relation_of_row(self, rows: np.ndarray) -> np.ndarray:
        """The relation id of each :meth:`relation_table` row (the no-step row: R)."""
        return rows // 2 if self.config.end_names else rows

    def path_arrays(self, candidates: Sequence[CandidatePath], width: int, words: set[str] = frozenset()
                    ) -> tuple[np.ndarray, ...]:
        """(relation ids [width, L] (R where there is no step), step flags [width, L, S], extras [width, E],
        mask [width]); ``words``: the question's :func:`words_of`."""
        hops = self.config.max_hops
        rel = np.full((width, hops), self.no_step, np.int32)
        steps = np.zeros((width, hops, N_STEP), np.float32)
        extra = np.zeros((width, N_EXTRA), np.float32)
        mask = np.zeros(width, bool)
        for i, cand in enumerate(candidates[:width]):
            for j, step in enumerate(cand.path[:hops]):
                rel[i, j] = self.step_id(step.relation, step.forward)
                steps[i, j, 0] = 1.0 if step.forward else -1.0
                steps[i, j, 1] = self._overlap(step.relation, words)
            extra[i] = (len(cand.path) / hops, np.log1p(len(cand.ends)), float(len(cand.path) == 1))
            mask[i] = True
        return rel, steps, extra, mask

    def _overlap(self, relation: str, words: set[str]) -> float:
        """Share of the relation's property words (its last segment's) that the question uses."""
        if relation not in self._property_words:
            prop = re.split(r"[./#]", relation.rstrip("/#"))[-1]  # film.film.directed_by -> directed_by
            self._property_words[relation] = words_of(prop.replace("_", " "))
        own = self._property_words[relation]
        return len(own & words) / len(own) if own else 0.0

    # ----- batched inputs ------------------------------------------------------------------------
    def topic_arrays(self, topic: int) -> tuple[list[CandidatePath], np.ndarray, np.ndarray, np.ndarray]:
        """(candidates, relation ids [C, L] (R where there is no step), orientation [C, L] (+1, -1, 0), extras
        [C, E]) of ``topic``: the question-independent part of :meth:`path_arrays`, made once per topic and kept as
        long as the catalog keeps the topic's paths."""
        candidates = self.catalog.paths(topic)
        cached = self._arrays.get(topic)
        if cached is not None and cached[0] is candidates:
            self._arrays.move_to_end(topic)
            return cached
        hops = self.config.max_hops
        count = len(candidates)
        rel = np.full((count, hops), self.no_step, np.int32)
        forward = np.zeros((count, hops), np.float32)
        extra = np.zeros((count, N_EXTRA), np.float32)
        for i, cand in enumerate(candidates):
            for j, step in enumerate(cand.path[:hops]):
                rel[i, j] = self.step_id(step.relation, step.forward)
                forward[i, j] = 1.0 if step.forward else -1.0
            extra[i] = (len(cand.path) / hops, np.log1p(len(cand.ends)), float(len(cand.path) == 1))
        entry = (candidates, rel, forward, extra)
        self._arrays[topic] = entry
        while len(self._arrays) > max(len(self.catalog), 1):  # no more topics than the catalog holds
            self._arrays.popitem(last=False)
        return entry

    def _word_relations(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """word -> ids of the relations whose property words include it; property word count per relation id
        ([R + 1], the last: no step, no words)."""
        if self._words is None or self._words[0] is not self.index:
            postings: dict[str, list[int]] = {}
            sizes = np.zeros(self.index.num_relations + 1, np.float64)
            for rid, relation in enumerate(self.index.relations):
                self._overlap(relation, set())  # fills the relation's property words
                own = self._property_words[relation]
                sizes[rid] = len(own)
                for word in own:
                    postings.setdefault(word, []).append(rid)
            self._words = (self.index, {w: np.asarray(r, np.int64) for w, r in postings.items()}, sizes)
        return self._words[1], self._words[2]

    def overlap_table(self, questions: Sequence[Question]) -> np.ndarray:
        """float32 [Q, R + 1]: per question and relation id, the share of the relation's property words that the
        question uses (:meth:`_overlap` for every relation at once; 0 for the no-step row)."""
        postings, sizes = self._word_relations()
        width = self.index.num_relations + 1
        rows, cols = [], []
        for qi, question in enumerate(questions):
            hits = [postings[w] for w in words_of(question.text) if w in postings]
            if hits:
                ids = np.concatenate(hits)
                rows.append(np.full(len(ids), qi, np.int64))
                cols.append(ids)
        counts = np.zeros(len(questions) * width, np.float64)
        if rows:
            counts = np.bincount(np.concatenate(rows) * width + np.concatenate(cols),
                                 minlength=len(questions) * width).astype(np.float64)
        counts = counts.reshape(len(questions), width)
        return np.divide(counts, sizes, out=np.zeros_like(counts), where=sizes > 0).astype(np.float32)

    # ----- scoring --------------------------------------------------------------------------------
    def _scorer(self):
        if self._forward is None:
            import jax
            import jax.numpy as jnp

            @jax.jit
            def forward(params, table, qvec, rel, steps, extra, segment, mask, temperature):
                # rows are candidates of any question (``segment``: its row of ``qvec``); _logits reads each as a
                # question with one candidate, and the softmax runs over each question's rows
                q = qvec[segment]
                table, projected = table
                logits = _logits(params, table, q, rel[:, None], steps[:, None], extra[:, None],
                                 projected)[:, 0] / temperature
                logits = jnp.where(mask, logits, -1e9)
                top = jax.ops.segment_max(logits, segment, num_segments=qvec.shape[0])
                e = jnp.where(mask, jnp.exp(logits - top[segment]), 0.0)
                total = jax.ops.segment_sum(e, segment, num_segments=qvec.shape[0])
                breadth = jax.nn.sigmoid(qvec @ params["wb"] + params["bb"][0])
                return e / jnp.maximum(total[segment], 1e-30), breadth

            # the relation table projected once per table (the parameters are fixed here), not in every call
            table = jax.device_put(self.relation_table())
            params = jax.device_put(self.params)
            self._forward = (forward, params, (table, jax.jit(jnp.matmul)(table, params["wr"])))
        return self._forward

    def batch_arrays(self, questions: Sequence[Question]) -> tuple[list[list[CandidatePath]], tuple[np.ndarray, ...]]:
        """Per question its candidates, and the batch's flat candidate arrays: relation ids [N, L], step flags
        [N, L, S], extras [N, E], question row [N] (N: all the questions' candidates, in question order)."""
        topics = [self.index.entity_ids.get(q.topic_entities[0]) if q.topic_entities else None for q in questions]
        per_topic = {t: self.topic_arrays(t) for t in dict.fromkeys(t for t in topics if t is not None)}
        empty = ([], np.zeros((0, self.config.max_hops), np.int32), np.zeros((0, self.config.max_hops), np.float32),
                 np.zeros((0, N_EXTRA), np.float32))
        parts = [per_topic[t] if t is not None else empty for t in topics]
        rel = np.concatenate([p[1] for p in parts]) if parts else empty[1]
        forward = np.concatenate([p[2] for p in parts]) if parts else empty[2]
        extra = np.concatenate([p[3] for p in parts]) if parts else empty[3]
        segment = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p[0]) for p in parts])
        overlap = self.overlap_table(questions)
        steps = np.stack([forward, overlap[segment[:, None], self.relation_of_row(rel)]], axis=-1) if len(rel) else \
            np.zeros((0, self.config.max_hops, N_STEP), np.float32)
        return [p[0] for p in parts], (rel, steps.astype(np.float32), extra, segment)

    def score(self, questions: Sequence[Question]) -> list[tuple[list[CandidatePath], np.ndarray, float]]:
        """Per question: its candidate paths, their probabilities, and P(Breadth).

        The batch is one call of the jitted scorer: every question's candidates as rows of one array padded to a
        power of two (the questions to a power of eight), so a few shapes serve every batch."""
        if not questions:
            return []
        forward, params, table = self._scorer()
        qvec = self.question_vectors(questions)
        candidates, (rel, steps, extra, segment) = self.batch_arrays(questions)
        bounds = np.r_[0, np.cumsum([len(c) for c in candidates])]
        probs = np.zeros(len(rel), np.float32)
        breadth = np.zeros(len(questions), np.float32)
        begin = 0
        while begin < len(questions):  # chunks of at most MAX_ROWS candidates (or one question that has more)
            end = begin + 1
            while end < len(questions) and bounds[end + 1] - bounds[begin] <= MAX_ROWS:
                end += 1
            lo, hi = int(bounds[begin]), int(bounds[end])
            n, q = hi - lo, end - begin
            rows, width = candidate_bucket(n), question_bucket(q)
            pad = rows - n
            p, b = forward(
                params, table, np.pad(qvec[begin:end], ((0, width - q), (0, 0))),
                np.pad(rel[lo:hi], ((0, pad), (0, 0)), constant_values=self.no_step),
                np.pad(steps[lo:hi], ((0, pad), (0, 0), (0, 0))), np.pad(extra[lo:hi], ((0, pad), (0, 0))),
                np.pad(segment[lo:hi] - begin, (0, pad)), np.arange(rows) < n, np.float32(self.temperature))
            probs[lo:hi] = np.asarray(p)[:n]
            breadth[begin:end] = np.asarray(b)[:q]
            begin = end
        out = []
        for qi, cands in enumerate(candidates):
            if not cands:
                out.append(([], np.zeros(0, np.float32), 0.5))
            else:
                out.append((cands, probs[bounds[qi] : bounds[qi + 1]], float(breadth[qi])))
        return out

    def scoring_shapes(self, max_batch: int) -> list[tuple[int, int]]:
        """(question rows, candidate rows) of every scoring call a batch of up to ``max_batch`` questions can
        make: a bounded set (a power of eight by a power of two between :data:`MIN_ROWS` and :data:`MAX_ROWS`)."""
        shapes = []
        width = 1
        while True:
            most = min(MAX_ROWS, max(min(max_batch, width), 1) * self.config.max_paths)
            rows = MIN_ROWS
            while rows <= candidate_bucket(most):
                shapes.append((width, rows))
                rows *= 2
            if width >= question_bucket(max_batch):
                return shapes
            width *= 8

    def warm_up(self, max_batch: int) -> int:
        """Compile :meth:`scoring_shapes` (one call each on empty rows); returns how many shapes."""
        forward, params, table = self._scorer()
        hops, shapes = self.config.max_hops, self.scoring_shapes(max_batch)
        for width, rows in shapes:
            forward(params, table, np.zeros((width, self.dim), np.float32),
                    np.full((rows, hops), self.no_step, np.int32), np.zeros((rows, hops, N_STEP), np.float32),
                    np.zeros((rows, N_EXTRA), np.float32), np.zeros(rows, np.int32), np.zeros(rows, bool),
                    np.float32(self.temperature))
        self._word_relations()
        return len(shapes)

    def score_reference(self, questions: Sequence[Question]) -> list[tuple[list[CandidatePath], np.ndarray, float]]:
        """:meth:`score` written plainly: one question at a time, its candidates padded on their own."""
        import jax

        table = self.relation_table()
        qvec = self.question_vectors(questions)
        out = []
        for question, q in zip(questions, qvec, strict=True):
            topic = self.index.entity_ids.get(question.topic_entities[0]) if question.topic_entities else None
            candidates = self.catalog.paths(topic) if topic is not None else []
            if not candidates:
                out.append(([], np.zeros(0, np.float32), 0.5))
                continue
            width = 1 << max(3, int(np.ceil(np.log2(len(candidates)))))
            rel, fwd, extra, mask = self.path_arrays(candidates, width, words_of(question.text))
            logits = _logits(self.params, table, q, rel, fwd, extra) / np.float32(self.temperature)
            probs = jax.nn.softmax(jax.numpy.where(mask, logits, -1e9), axis=-1)
            breadth = jax.nn.sigmoid(q @ self.params["wb"] + self.params["bb"][0])
            out.append((candidates, np.asarray(probs)[: len(candidates)], float(breadth)))
        return out

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        from stem_jax.plan.oracle import schema_from_path

        beams = []
        for question, (candidates, probs, breadth) in zip(questions, self.score(questions), strict=True):
            beam: list[ScoredSchema] = []
            topic = topic_names(question, self.names)[0] if question.topic_entities else None
            for i in np.argsort(-probs, kind="stable")[: self.beam].tolist():
                if beam and probs[i] < self.min_prob:
                    break
                strategy = "Breadth" if breadth >= 0.5 else "Precision"
                beam.append(ScoredSchema(schema_from_path(topic, candidates[i].path, strategy), float(probs[i])))
            beams.append(beam)
        return beams

    # ----- persistence ----------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """``ranker.json`` + ``ranker-<sha>.npz`` in ``folder`` (the arrays first, then the JSON naming them)."""
        from stem_jax.atomic import save_model_files

        texts = sorted(self.relation_bank)
        arrays = self.param_members()
        arrays["relation_bank"] = (np.stack([self.relation_bank[t] for t in texts]).astype(np.float32) if texts
                                   else np.zeros((0, self.dim), np.float32))
        meta = {"kind": "path-ranker", "encoder": self.encoder_name, "config": dataclasses.asdict(self.config),
                "temperature": self.temperature, "relation_texts": texts, "report": self.report}
        if self.tower is not None:  # the fine-tuned question layers (the layers below are the shipped encoder's)
            arrays.update({f"tower/{k}": v for k, v in self.tower.arrays().items()})
            meta["tower"] = {"split": self.tower.split, "layers": self.tower.layers}
        save_model_files(folder, "ranker", arrays, RANKER_FILE, meta, what="path planner",
                         fix="make the folder writable, or pass --out a writable folder")

    @classmethod
    def load(cls, folder: Path, *, tower_factory: Callable[[int], Any] | None = None, **overrides: Any) -> PathRanker:
        """The ranker saved in ``folder``; ``tower_factory(split)`` builds the encoder its fine-tuned question
        layers sit on (default: the shipped MiniLM, :func:`~stem_jax.plan.question_tower.minilm_tower`, sharing the
        weights of ``overrides["encoder"]`` when that is a MiniLMEncoder)."""
        folder = Path(folder)

        def damaged(why: str) -> StemError:
            return StemError(f"{folder / RANKER_FILE}: damaged path planner ({why})\n  how to fix: retrain it "
                             f"with `stem-jax train-planner` (--out {folder.parent})")

        from stem_jax.atomic import read_arrays_with_manifest

        meta, arrays, _ = read_arrays_with_manifest(folder, RANKER_FILE, damaged)
        bank = arrays["relation_bank"].astype(np.float32)
        ranker = cls(params=params_from_members(arrays), config=PathRankerConfig(**meta["config"]), encoder_name=meta["encoder"],
                     temperature=float(meta["temperature"]),
                     relation_bank=dict(zip(meta["relation_texts"], bank, strict=True)), report=meta.get("report", {}))
        if meta.get("tower"):
            if tower_factory is None:  # on the weights of the encoder it is given, when that is a MiniLMEncoder
                import functools

                from stem_jax.plan.question_tower import minilm_tower

                tower_factory = functools.partial(minilm_tower, encoder=overrides.get("encoder"))
            ranker.tower = tower_factory(int(meta["tower"]["split"]))
            ranker.tower.load_arrays({k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("tower/")})
        for key, value in overrides.items():
            setattr(ranker, key, value)
        return ranker


def planner_parts(planner: Any) -> Iterator[Any]:
    """``planner`` and the planners it wraps or mixes (branch planner -> mixed planner -> template, path ranker)."""
    seen: set[int] = set()
    stack = [planner]
    while stack:
        part = stack.pop()
        if part is None or id(part) in seen:
            continue
        seen.add(id(part))
        yield part
        for name in ("base", "first", "second", "fallback"):
            inner = part.__dict__.get(name) if hasattr(part, "__dict__") else None
            if inner is not None:
                stack.append(inner)


def warm_path_planner(planner: Any, max_batch: int, *, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Compile the scoring shapes of the path planner inside ``planner`` (if any) for batches of up to
    ``max_batch`` questions; returns how many shapes and how long it took (empty without a path planner)."""
    info: dict[str, Any] = {}
    for part in planner_parts(planner):
        if isinstance(part, PathRanker):
            began = time.perf_counter()
            log(f"  compiling the path planner's scoring call for batches of up to {max_batch} questions ...")
            info["path_planner_shapes"] = part.warm_up(max_batch)
            info["path_planner_seconds"] = round(time.perf_counter() - began, 3)
            log(f"  path planner: {info['path_planner_shapes']} shapes in {info['path_planner_seconds']:.1f}s")
    return info


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------


def _f1(found: set[int], gold: set[int]) -> float:
    hit = len(found & gold)
    if not hit:
        return 0.0
    precision, recall = hit / len(found), hit / len(gold)
    return 2 * precision * recall / (precision + recall)


def path_targets(question: Question, candidates: Sequence[CandidatePath], index: KGIndex, *,
                 shortest: bool = False) -> np.ndarray:
    """Soft target over ``candidates``: F1 of each end set against the gold answers (0 when no answer is hit),
    the gold path at least 1 when it is a candidate; normalised to sum 1 (all zeros when nothing is right).

    ``shortest``: a candidate gets no credit when a candidate with fewer steps has at least its F1 (see
    :attr:`PathRankerConfig.shortest_targets`)."""
    gold = {index.entity_ids[a] for a in question.answers if a in index.entity_ids}
    target = np.asarray([_f1(set(c.ends.tolist()), gold) for c in candidates], np.float32)
    if shortest and len(candidates):
        hops = np.asarray([len(c.path) for c in candidates])
        best = {h: float(target[hops == h].max()) for h in np.unique(hops).tolist()}
        for h in sorted(best):
            shorter = max((best[k] for k in best if k < h), default=0.0)
            if shorter > 0:
                target[(hops == h) & (target <= shorter + 1e-6)] = 0.0
    if question.gold_path:
        key = path_key(question.gold_path)
        for i, c in enumerate(candidates):
            if path_key(c.path) == key:
                target[i] = max(target[i], 1.0)
    total = target.sum()
    return target / total if total > 0 else target


@dataclasses.dataclass
class PathExamples:
    qvec: np.ndarray  # [N, d]
    rel: np.ndarray  # [N, C, L] relation ids
    fwd: np.ndarray  # [N, C, L, S] step flags
    extra: np.ndarray  # [N, C, E]
    mask: np.ndarray  # [N, C]
    target: np.ndarray  # [N, C]
    breadth: np.ndarray  # [N]
    weight: np.ndarray  # [N]
    qrow: np.ndarray  # [N] int32: the question's row of the tower's hidden states (when the question side is tuned)


def _examples(ranker: PathRanker, questions: Sequence[Question], qvec: np.ndarray, width: int,
              rng: np.random.Generator) -> tuple[PathExamples, list[int]]:
    """Padded training arrays for the questions with at least one right candidate; their positions."""
    rows, kept = [], []
    for i, question in enumerate(questions):
        topic = ranker.index.entity_ids.get(question.topic_entities[0]) if question.topic_entities else None
        if topic is None:
            continue
        candidates = ranker.catalog.paths(topic)
        target = path_targets(question, candidates, ranker.index, shortest=ranker.config.shortest_targets)
        if not target.any():
            continue
        if len(candidates) > width:
            positive = np.flatnonzero(target > 0)
            negative = rng.permutation(np.flatnonzero(target == 0))[: max(0, width - len(positive))]
            pick = np.sort(np.concatenate([positive, negative]))[:width]
            candidates = [candidates[j] for j in pick.tolist()]
            target = target[pick] / target[pick].sum()
        rel, fwd, extra, mask = ranker.path_arrays(candidates, width, words_of(question.text))
        padded = np.zeros(width, np.float32)
        padded[: len(target)] = target
        rows.append((qvec[i], rel, fwd, extra, mask, padded, float(len(set(question.answers)) > 1), 1.0, i))
        kept.append(i)
    if not rows:
        raise StemError("no training question has a candidate path reaching its answers; check topic entities "
                        "and answers in the training split")
    cols = list(zip(*rows, strict=True))
    return PathExamples(*(_column(k, c) for k, c in enumerate(cols))), kept


def _column(k: int, column: Sequence[Any]) -> np.ndarray:
    """One stacked :class:`PathExamples` field: relation ids, masks and tower rows keep their dtypes."""
    return np.stack(column) if k in (1, 4) else np.asarray(column, np.int32) if k == 8 else \
        np.stack(column).astype(np.float32)


def usable_pairs(ranker: PathRanker, pairs: Sequence[tuple[str, tuple[PathStep, ...]]],
                 ) -> list[tuple[str, tuple[PathStep, ...]]]:
    """The pairs the ranker can train on: a path of at most ``max_hops`` steps, every relation in the KG."""
    known = set(ranker.index.relation_ids)
    return [(text, path) for text, path in pairs if path and len(path) <= ranker.config.max_hops
            and all(s.relation in known for s in path)]


def pair_texts(ranker: PathRanker, pairs: Sequence[tuple[str, tuple[PathStep, ...]]]) -> list[str]:
    """The distinct question texts of the :func:`usable_pairs`, sorted."""
    return sorted({text for text, _ in usable_pairs(ranker, pairs)})


def _pair_examples(ranker: PathRanker, pairs: Sequence[tuple[str, tuple[PathStep, ...]]], vocabulary: list[tuple],
                   width: int, rng: np.random.Generator, row_offset: int = 0) -> PathExamples | None:
    """Question -> path pairs without a topic: the path against ``width - 1`` paths drawn from ``vocabulary``;
    a pair's tower row is ``row_offset`` + its text's place in :func:`pair_texts`."""
    usable = usable_pairs(ranker, pairs)
    if not usable or len(vocabulary) < 2:
        return None
    texts = sorted({text for text, _ in usable})
    qvec = ranker._embed(texts) if ranker.tower is None else np.zeros((len(texts), ranker.dim), np.float32)
    row_of = {t: i for i, t in enumerate(texts)}
    rows = []
    for text, path in usable:
        key = path_key(path)
        drawn = min(ranker.config.extra_negatives + 1, width, len(vocabulary))
        negatives = [vocabulary[j] for j in rng.choice(len(vocabulary), drawn, replace=False).tolist()]
        cands = [CandidatePath(path, np.zeros(1, np.int32))]
        cands += [CandidatePath(p, np.zeros(1, np.int32)) for p in negatives if path_key(p) != key][: drawn - 1]
        rel, fwd, extra, mask = ranker.path_arrays(cands, width, words_of(text))
        extra[:, 1] = 0.0  # end-set sizes are unknown without a topic
        target = np.zeros(width, np.float32)
        target[0] = 1.0
        rows.append((qvec[row_of[text]], rel, fwd, extra, mask, target, 0.5, ranker.config.extra_pairs_weight,
                     row_offset + row_of[text]))
    cols = list(zip(*rows, strict=True))
    return PathExamples(*(_column(k, c) for k, c in enumerate(cols)))


def concat_examples(a: PathExamples, b: PathExamples | None) -> PathExamples:
    if b is None:
        return a
    return PathExamples(*(np.concatenate([x, y]) for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b),
                                                               strict=True)))


def fit_ranker(params: dict[str, np.ndarray], table: np.ndarray, data: PathExamples, config: PathRankerConfig,
         log: Callable[[str], None], tower: Any = None, hidden: tuple[np.ndarray, np.ndarray] | None = None,
         ) -> tuple[dict[str, np.ndarray], list[float]]:
    """Train the MLP's ``params`` (and, with ``tower``, its tuned layers on the frozen layers' states ``hidden``:
    (states [M, T, h], token mask [M, T]), read at each example's ``qrow``); returns the trained parameters
    (``params["tower"]``: the tuned layers, when there is a tower) and the mean loss of each epoch."""
    import jax
    import jax.numpy as jnp
    import optax

    from stem_jax.plan.question_tower import tower_vectors

    n = len(data.qvec)
    size = min(config.batch_size, n)
    steps = -(-n // size)
    schedule = optax.cosine_decay_schedule(config.learning_rate, steps * config.epochs)
    optimizer = optax.adamw(schedule, weight_decay=config.weight_decay)
    if config.tune_relations:
        params = {**params, "delta": np.zeros_like(table)}
    if tower is not None:
        params = {**params, "tower": tower.tuned}
        tuned = optax.adamw(optax.cosine_decay_schedule(config.tune_learning_rate, steps * config.epochs),
                            weight_decay=config.weight_decay)
        optimizer = optax.multi_transform(
            {"head": optimizer, "tower": tuned},
            lambda p: {k: jax.tree.map(lambda _, k=k: "tower" if k == "tower" else "head", v) for k, v in p.items()})
    opt_state = optimizer.init(params)
    arrays = jax.device_put(dataclasses.astuple(data))
    states = jax.device_put(hidden) if tower is not None else None
    table = jax.device_put(table)

    def loss_fn(params, idx, live):
        q, rel, fwd, extra, mask, target, breadth, weight, qrow = (a[idx] for a in arrays)
        if tower is not None:
            q = tower_vectors(params["tower"], tower.cfg, states[0][qrow], states[1][qrow])
        used = table + params["delta"].at[-1].set(0.0) if "delta" in params else table  # the last row: no step
        logits = jnp.where(mask, _logits(params, used, q, rel, fwd, extra), -1e9)
        ce = -(target * jax.nn.log_softmax(logits, axis=-1)).sum(-1)
        blogit = q @ params["wb"] + params["bb"][0]
        bce = optax.sigmoid_binary_cross_entropy(blogit, breadth) * (breadth != 0.5)
        w = weight * live
        penalty = config.relation_l2 * (params["delta"] ** 2).sum() if "delta" in params else 0.0
        return ((ce + 0.2 * bce) * w).sum() / jnp.maximum(w.sum(), 1.0) + penalty

    @jax.jit
    def epoch(params, opt_state, take, live):
        def step(carry, batch):
            params, opt_state = carry
            loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (take, live))
        return params, opt_state, losses.mean()

    rng = np.random.default_rng(config.seed)
    padded = steps * size
    live = np.concatenate([np.ones(n, np.float32), np.zeros(padded - n, np.float32)]).reshape(steps, size)
    history = []
    for done in range(config.epochs):
        take = np.concatenate([rng.permutation(n), np.zeros(padded - n, np.int64)]).reshape(steps, size)
        params, opt_state, loss = epoch(params, opt_state, take, live)
        history.append(float(loss))
        if (done + 1) % max(1, config.epochs // 4) == 0:
            log(f"  path planner epoch {done + 1}/{config.epochs}: loss {history[-1]:.4f}")
    return jax.device_get(params), history


def fit_temperature(probs: Sequence[np.ndarray], targets: Sequence[np.ndarray]) -> float:
    """The softmax temperature that minimises the held-out negative log-likelihood of the right paths, given each
    held-out question's candidate probabilities at temperature 1 and its targets (1.0 when none is given)."""
    if not probs:
        return 1.0
    logs = [np.log(np.maximum(p, 1e-30)) for p in probs]
    best, best_nll = 1.0, np.inf
    for temperature in (0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0, 3.0):
        nll = []
        for logit, t in zip(logs, targets, strict=True):
            e = np.exp(logit / temperature - (logit / temperature).max())
            nll.append(-np.log(max(float((e / e.sum() * (t > 0)).sum()), 1e-9)))
        if float(np.mean(nll)) < best_nll:
            best, best_nll = temperature, float(np.mean(nll))
    return best


def training_examples(ranker: PathRanker, questions: Sequence[Question], qvec: np.ndarray,
                      pairs: Sequence[tuple[str, tuple[PathStep, ...]]], config: PathRankerConfig,
                      rng: np.random.Generator) -> tuple[PathExamples, PathExamples | None, list[int], list[tuple]]:
    """The listwise examples of ``questions`` (``kept``: those with a candidate path to their answers), the
    question -> path ``pairs``' examples against the kept questions' path vocabulary (None without usable pairs;
    tower rows after the questions'), and that vocabulary."""
    data, kept = _examples(ranker, questions, qvec, config.max_candidates, rng)
    vocabulary = sorted({c.path for q in (questions[i] for i in kept)
                         for c in ranker.catalog.paths(ranker.index.entity_ids[q.topic_entities[0]])}, key=path_key)
    extra = _pair_examples(ranker, pairs, vocabulary, config.max_candidates, rng, row_offset=len(questions))
    return data, extra, kept, vocabulary


def train_path_ranker(train: Sequence[Question], val: Sequence[Question], index: KGIndex, *, encoder_name: str,
                      embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None = None,
                      extra_pairs: Sequence[tuple[str, tuple[PathStep, ...]]] = (),
                      config: PathRankerConfig = PathRankerConfig(),
                      log: Callable[[str], None] = print, tower: Any = None,
                      catalog: PathCatalog | None = None, encoder: Any = None,
                      init: dict[str, np.ndarray] | None = None) -> PathRanker:
    """Train the path scorer on ``train`` (see the module docstring); fit its temperature and report on ``val``.

    ``config.tune_layers`` > 0 also fine-tunes the encoder's top layers as the question side (``tower``: a
    :class:`~stem_jax.plan.question_tower.QuestionTower` to tune; default the shipped MiniLM's, which needs
    ``embed`` to be that encoder's; ``encoder``: the MiniLMEncoder behind ``embed``, whose loaded weights that tower
    shares instead of reading them again). ``catalog``: a path enumeration of ``index`` to share (its per-topic
    cache) with another ranker trained with the same bounds. ``init``: parameters to start from instead of a random
    draw (a warm start from the pretrained ranker; their shapes fix ``max_hops``, ``hidden`` and ``projection``)."""
    began = time.perf_counter()
    if config.tune_relations and config.end_names:
        raise StemError("the path planner cannot tune relation embeddings (tune_relations) when a step's text names "
                        "the entities it reaches (end_names)\n  how to fix: set one of them to off (0)")
    d = int(np.asarray(embed(["x"])).shape[1])
    if config.tune_layers and tower is None:
        if not encoder_name.startswith("all-MiniLM-L6-v2"):
            raise StemError(f"fine-tuning the path planner's question side needs the MiniLM encoder, not {encoder_name}"
                            "\n  how to fix: pass --encoder.name=minilm, or leave the question side frozen")
        from stem_jax.plan.question_tower import minilm_tower

        tower = minilm_tower(layers=config.tune_layers, encoder=encoder)
    params = init_params(d, config)
    if init is not None:
        if {k: np.shape(v) for k, v in init.items()} != {k: v.shape for k, v in params.items()}:
            raise StemError("the path planner to start from has other shapes than this configuration's (max_hops, "
                            "hidden, projection, encoder dimension)\n  how to fix: train from scratch")
        params = {k: np.asarray(v, np.float32).copy() for k, v in init.items()}
    ranker = PathRanker(params=params, config=config,
                        encoder_name=encoder_name, names=names, index=index, embed_fn=embed, _catalog=catalog)
    rng = np.random.default_rng(config.seed)
    ranker.relation_table()
    log(f"path planner: relation and question texts encoded [{time.perf_counter() - began:.1f}s]")
    qvec = ranker.question_vectors(train) if tower is None else np.zeros((len(train), d), np.float32)
    ranker.tower = tower  # from here on the pair examples and scoring read the question side through it
    data, extra, kept, vocabulary = training_examples(ranker, train, qvec, extra_pairs, config, rng)
    hidden = None
    if tower is not None:
        pairs = pair_texts(ranker, extra_pairs) if extra is not None else []
        hidden = tower.hidden(ranker.masked_texts(train) + pairs)
        log(f"path planner: tuning the question side's top {tower.layers} encoder layers "
            f"({hidden[0].shape[0]} texts, {hidden[0].shape[1]} tokens a row)")
    log(f"path planner: training arrays built [{time.perf_counter() - began:.1f}s]")
    log(f"path planner: {len(kept)} of {len(train)} training questions have a candidate path to their answers; "
        f"{0 if extra is None else len(extra.qvec)} extra question -> path pairs; {len(vocabulary)} distinct paths")
    params, history = fit_ranker(ranker.params, ranker.relation_table(), concat_examples(data, extra), config, log, tower, hidden)
    if tower is not None:
        tower.tuned = params.pop("tower")
        tower._top = None
    if "delta" in params:  # the corrected relation vectors become the bank's (what scoring and the saved ranker read)
        delta = np.asarray(params.pop("delta"))
        table = ranker.relation_table()
        for i, relation in enumerate(index.relations):
            ranker.relation_bank[relation_text(relation)] = (table[i] + delta[i]).astype(np.float32)
        ranker._table = None
    ranker.params = {k: np.asarray(v) for k, v in params.items()}
    ranker._forward = None
    ranker.report = {"train_questions": len(train), "train_with_right_path": len(kept),
                     "extra_pairs": 0 if extra is None else len(extra.qvec), "path_vocabulary": len(vocabulary),
                     "loss_history": history}
    if val:
        scored = ranker.score(val)
        targets = [path_targets(q, cands, index, shortest=config.shortest_targets) if cands else np.zeros(0, np.float32)
                   for q, (cands, _, _) in zip(val, scored, strict=True)]
        usable = [i for i, t in enumerate(targets) if t.any()]
        ranker.temperature = fit_temperature([scored[i][1] for i in usable], [targets[i] for i in usable])
        top1 = [float(targets[i][int(np.argmax(scored[i][1]))] > 0) for i in range(len(val)) if len(scored[i][1])]
        ranker.report["val"] = {"questions": len(val), "with_right_path": len(usable),
                                "top1_reaches_answer": float(np.sum(top1) / max(len(val), 1)),
                                "temperature": ranker.temperature}
        log(f"path planner validation: top-1 path reaches an answer for {ranker.report['val']['top1_reaches_answer']:.1%} "
            f"of {len(val)} questions ({len(usable)} have such a path); temperature {ranker.temperature}")
    ranker.report["seconds"] = time.perf_counter() - began
    return ranker

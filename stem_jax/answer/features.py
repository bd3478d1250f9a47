"""What retrieval knows about each candidate answer, as arrays a learned scorer reads.

The tracer's ranking (:mod:`stem_jax.answer.rank`) orders a question's entities by the planner's beam support and
the T-Scores of the walks that bind them. Gold plans leave ties there: a walk reaches the answer together with its
siblings (``who did X play for in 2008`` reaches every team X played for), and only what the entity *is* separates
them. Per candidate (the first :data:`MAX_CANDIDATES` of the tracer's ranking) this module gathers:

* the ranking's own evidence: support, its share of the best, rank, length-fair and cumulative T-Scores, how many
  beams bind the entity, the best beam position, and how many entities the binding plan returns;
* relation-question fit: the cosine between the question (topic masked) and the relation text of the KG triple that
  binds the entity (best over its bindings);
* type cues: the entity's *type bag* (:class:`TypeVocabulary`: the ``domain.type`` of the relations it is the head of
  and the relations it is the tail of, for the most frequent keys of the KG), the question word, and name shape (a
  year, a number, name words that the question repeats);
* the question embedding, so that a learned bilinear term can match the question against the type bag.

Everything is numpy on the host, one pass over the traced runs per chunk of questions; the neighbour-name cues
(``join_match``, ``neighbour_match``) of a question's candidates are array passes over all their neighbours at once
(:meth:`CandidateFeaturizer.cue_matches`; ``_cue_matches`` is the plain per-candidate reference).
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from stem_jax.answer.ties import TieTable
from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.kg.mediators import mediator_mask
from stem_jax.plan.question_text import mask_topics, topic_names
from stem_jax.trace.types import prune_unreached

MAX_CANDIDATES = 64  # candidates per question the scorer sees; the rest keep the tracer's order below them
TYPE_KEYS = 512  # most frequent type-bag keys of a KG
QUESTION_WORDS = ("who", "when", "where", "what", "which", "how many", "how")
NUMERIC = ("support", "support_share", "log_rank", "first", "fair", "cumulative", "beam_share", "best_beam",
           "log_plan_answers", "relation_cos", "name_overlap", "year", "number", "log_name_words", "log_degree",
           "log_candidates",
           # the best single plan that binds the entity (the summed support above mixes plans), how well its whole
           # relation path reads like the question, whether the binding triple's relation is the one the plan asked
           # for (the tracer also binds through similar relations), and the plan's length
           "best_plan_prob", "path_cos", "exact_relation", "min_depth",
           # a year the question names that the entity's name repeats ("the 2000 fa cup final")
           "question_year", "name_has_question_year",
           # the question's other words (not its topic's, not stop words) in the names of what the entity is tied
           # to: through a join node the plan walked ("who played samantha stephens in bewitched": the performance
           # that links the actor also names the character), and directly
           "join_match", "neighbour_match",
           # the question's conditions: how many topic entities it names besides the ones the binding plans leave
           # from, the share of them the entity is tied to (directly or through one mediator node, a CVT), whether
           # it is tied to all, how many it misses, and how well the best tie's relation reads like the question
           "constraints", "constraint_share", "constraint_all", "constraint_missed", "constraint_cos",
           # the same for the other entities the entity linker finds mentioned in the question text (mentions that
           # are not its topic entities: "the team whose mascot is Crazy Crab won which World Series")
           "mentions", "mention_share", "mention_all", "mention_cos",
           # what the question asks for ("what country", "which sports facility"; who: a person) against what the
           # entity is by its own relations: the best cosine of the question's answer phrase with the texts of its
           # type-bag keys ("location country", "sports team arena stadium")
           "type_cos")
# the features of scorers trained before the ones above were added: such a scorer reads these columns only
NUMERIC_V1 = NUMERIC[:16]
# the features that read the question's other topic entities (see above)
CONSTRAINT_FEATURES = ("constraints", "constraint_share", "constraint_all", "constraint_missed", "constraint_cos")
# the features that read the other entities the question text mentions
MENTION_FEATURES = ("mentions", "mention_share", "mention_all", "mention_cos")
# the features that read how the entity was reached and what it is, beyond NUMERIC_V1 (tried on KGs whose questions
# name several conditions, with the condition features)
RANKING_FEATURES = ("best_plan_prob", "path_cos", "exact_relation", "min_depth", "question_year",
                    "name_has_question_year", "join_match", "neighbour_match", "type_cos")
N_NUMERIC = len(NUMERIC)


def feature_columns(features: Sequence[str]) -> np.ndarray:
    """Positions in :data:`NUMERIC` of the named numeric features (what a scorer reads of ``Candidates.numeric``)."""
    return np.asarray([NUMERIC.index(f) for f in features], np.int64)
N_QUESTION_WORDS = len(QUESTION_WORDS) + 1  # + other
_LOG1P = [np.log1p(i) for i in range(4 * MAX_CANDIDATES)]  # log1p of a count, as the reference computes it


def _log1p(count: int) -> float:
    return _LOG1P[count] if 0 <= count < len(_LOG1P) else np.log1p(count)
_YEAR = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
_NUMBER = re.compile(r"^[\d.,\s%$-]+$")
_WORD = re.compile(r"[a-z0-9]+")
_YEAR_WORD = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_STOP = frozenset("a an and are as at be by did do does for from has have he her his how in is it its of on or she "
                  "that the their they to was were what when where which who whom whose why will with".split())
JOIN_DEGREE = 64  # a node the plan walked through with more triples than this is a hub, not a join of one fact
MENTIONED_TEXTS = 4096  # question texts whose linked mentions a featurizer keeps (least recently asked out first)
NEIGHBOURS = 256  # triples of a candidate read for its direct neighbours' names


def question_word(text: str) -> int:
    """Index of the question's wh-word in :data:`QUESTION_WORDS` (first one it contains), or the "other" slot."""
    lowered = " " + " ".join(_WORD.findall(text.lower())) + " "
    found = [(lowered.find(f" {w} "), i) for i, w in enumerate(QUESTION_WORDS) if f" {w} " in lowered]
    return min(found)[1] if found else len(QUESTION_WORDS)


# what a question without a "what X" phrase asks for, by its question word
_IMPLIED_TYPE = {"who": "person", "whom": "person", "where": "location place", "when": "date year"}
_PHRASE_SKIP = frozenset("kind type sort types kinds of the a an".split())


def answer_phrase(text: str) -> str:
    """What the question asks for: up to two words after its first ``what`` / ``which`` (past ``kind of``, ``the``),
    stopping at a function word (``what sports facility is used`` -> ``sports facility``); else the type its question
    word implies (``who`` -> ``person``); ``""`` when neither."""
    words = _WORD.findall(text.lower())
    for i, word in enumerate(words):
        if word in ("what", "which"):
            phrase: list[str] = []
            for following in words[i + 1:]:
                if following in _PHRASE_SKIP and not phrase:
                    continue
                if following in _STOP or following in _PHRASE_SKIP or len(phrase) == 2:
                    break
                phrase.append(following)
            if phrase:
                return " ".join(phrase)
    return next((_IMPLIED_TYPE[w] for w in words if w in _IMPLIED_TYPE), "")


def type_key_text(key: str) -> str:
    """A type-bag key as words: ``h:location.country`` -> ``location country``, ``t:film.film.directed_by`` -> ``film
    directed by`` (repeated words once)."""
    return " ".join(dict.fromkeys(key.split(":", 1)[-1].replace(".", " ").replace("_", " ").split()))


def _type_of(relation: str) -> str:
    """``film.film.directed_by`` -> ``film.film``; a relation without dots is its own type."""
    head, dot, _ = relation.rpartition(".")
    return head if dot else relation


@dataclasses.dataclass
class TypeVocabulary:
    """The KG's most frequent type-bag keys: ``h:<domain.type>`` for the relations an entity is the head of and
    ``t:<relation>`` for those it is the tail of; :meth:`table` gives each entity's keys."""

    keys: list[str]

    @classmethod
    def of(cls, index: KGIndex, size: int = TYPE_KEYS) -> TypeVocabulary:
        names, pairs = _entity_key_pairs(index)
        counts = np.bincount(pairs % len(names), minlength=len(names))  # entities carrying each key
        order = sorted(range(len(names)), key=lambda k: (-int(counts[k]), names[k]))[:size]
        return cls(keys=[names[k] for k in order])

    def table(self, index: KGIndex) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets [n + 1], key ids ascending per entity) of each entity's distinct keys in the vocabulary."""
        names, pairs = _entity_key_pairs(index)
        position = {k: i for i, k in enumerate(self.keys)}
        remap = np.asarray([position.get(k, -1) for k in names], np.int64)
        entity, key = pairs // len(names), remap[pairs % len(names)]
        keep = key >= 0
        pair = np.unique(entity[keep] * (len(self.keys) + 1) + key[keep])
        entity, key = pair // (len(self.keys) + 1), pair % (len(self.keys) + 1)
        offsets = np.searchsorted(entity, np.arange(index.num_entities + 1))
        return offsets, key.astype(np.int32)


def _entity_key_pairs(index: KGIndex) -> tuple[list[str], np.ndarray]:
    """Every key name, and the distinct (entity, key) pairs of the KG as ``entity * len(names) + key``."""
    head_names = [f"h:{_type_of(r)}" for r in index.relations]
    tail_names = [f"t:{r}" for r in index.relations]
    names = sorted(set(head_names) | set(tail_names))
    position = {k: i for i, k in enumerate(names)}
    head_key = np.asarray([position[k] for k in head_names], np.int64)
    tail_key = np.asarray([position[k] for k in tail_names], np.int64)
    triples = np.asarray(index.triples, np.int64)
    if not len(names):
        return names, np.zeros(0, np.int64)
    pairs = np.concatenate([triples[:, 0] * len(names) + head_key[triples[:, 1]],
                            triples[:, 2] * len(names) + tail_key[triples[:, 1]]])
    return names, np.unique(pairs)


@dataclasses.dataclass
class Candidates:
    """A chunk of questions' candidates: ``entities[i]``/``base[i]`` the tracer's ranking (all of it), and for its
    first ``M`` entries the arrays the scorer reads (``mask`` marks real candidates)."""

    entities: list[np.ndarray]
    base: list[np.ndarray]
    numeric: np.ndarray  # float32 [Q, M, N_NUMERIC]
    qword: np.ndarray  # int32 [Q]
    types: np.ndarray  # float32 [Q, M, V]: type bag, rows of ones scaled to unit length
    question: np.ndarray  # float32 [Q, d]: the topic-masked question
    mask: np.ndarray  # bool [Q, M]


def ranking_arrays(ranking: Sequence[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """A question's ranking as (entity ids int64, supports float64)."""
    return np.asarray([e for e, _ in ranking], np.int64), np.asarray([s for _, s in ranking], np.float64)


def answer_slots(runs: Sequence, outputs: Sequence[dict], pruned: Sequence | None = None) -> Iterator[tuple]:
    """``(run, answer slot, nodes, via, scores, live)`` for each of a question's traced runs whose plan reaches its
    answer node: the bindings with unreached ones pruned (``pruned[k]`` when the caller has them), the T-Scores,
    and which bindings of the answer slot are live."""
    for k, (run, out) in enumerate(zip(runs, outputs, strict=True)):
        plan = run.plan
        slot = plan.answer_slot
        if slot < 0:
            continue
        nodes, via = (pruned[k] if pruned is not None else
                      prune_unreached(out["nodes"], out["via"], out["parents"], plan.steps, plan.constants))
        yield run, slot, nodes, via, np.asarray(out["scores"]), nodes[slot] >= 0


class CandidateFeaturizer:
    """Builds :class:`Candidates` for a KG; keeps the type table and relation-text embeddings it has made."""

    def __init__(self, index: KGIndex, names: dict[str, str] | None, vocabulary: TypeVocabulary,
                 embed: Callable[[list[str]], np.ndarray], *, max_candidates: int = MAX_CANDIDATES,
                 features: Sequence[str] | None = None) -> None:
        """``features``: the numeric features a scorer will read (None: all); the mention features, which link
        every question's text, are computed only when they are among them."""
        self.index = index
        self.read_mentions = features is None or bool(set(MENTION_FEATURES) & set(features))
        # the numeric features computed (the others stay 0: the scorer never reads them); the relation texts the
        # unread ones would use are still embedded, so that each relation's vector comes from the same call
        self.reads = frozenset(NUMERIC if features is None else features)
        self._linker = None
        self._mentioned: OrderedDict[str, tuple[int, ...]] = OrderedDict()  # text -> mentions, latest texts
        self.names = names or {}
        self.vocabulary = vocabulary
        self.embed = embed
        self.max_candidates = max_candidates
        self.type_offsets, self.type_ids = vocabulary.table(index)
        self.raw_degree = np.asarray(index.degree)
        self.degree = np.log1p(self.raw_degree.astype(np.float64))
        self._relation_rows: dict[int, np.ndarray] = {}
        self._name_words: dict[int, tuple[str, ...]] = {}
        self._ties: TieTable | None = None
        self._words: tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray] | None = None
        self._name_cues: dict[int, tuple[str, list[str]]] = {}
        self._name_fact_cache: dict[int, tuple[list[str], bool, bool, float, frozenset[str]]] = {}
        self._key_rows: np.ndarray | None = None

    @property
    def key_rows(self) -> np.ndarray:
        """float32 [V, d]: the unit-length embedding of each type-bag key's text (:func:`type_key_text`), made once."""
        if self._key_rows is None:
            rows = np.asarray(self.embed([type_key_text(k) for k in self.vocabulary.keys]), np.float32).reshape(
                len(self.vocabulary.keys), -1)
            self._key_rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)
        return self._key_rows

    def phrase_rows(self, questions: Sequence[Question]) -> tuple[np.ndarray, np.ndarray]:
        """(float32 [Q, d] unit embeddings of each question's :func:`answer_phrase`, bool [Q]: it has one)."""
        phrases = [answer_phrase(q.text) if self.vocabulary.keys else "" for q in questions]  # no keys: nothing to read
        has = np.asarray([bool(p) for p in phrases], bool)
        rows = np.zeros((len(phrases), self.key_rows.shape[1] if has.any() else 1), np.float32)
        if has.any():
            found = np.asarray(self.embed([p for p in phrases if p]), np.float32).reshape(int(has.sum()), -1)
            rows[has] = found / np.maximum(np.linalg.norm(found, axis=1, keepdims=True), 1e-9)
        return rows, has

    def type_cos(self, types: np.ndarray, phrase: np.ndarray) -> np.ndarray:
        """float32 [M]: per candidate row of ``types`` ([M, V] type bags), the best cosine of ``phrase`` with the texts
        of the keys it carries (0 for a candidate without keys): one matrix-vector product over the vocabulary."""
        if not types.shape[-1]:
            return np.zeros(types.shape[0], np.float32)
        cos = self.key_rows @ phrase
        carried = types > 0
        best = np.where(carried, cos[None, :], -np.inf).max(axis=1)
        return np.where(carried.any(axis=1), best, 0.0).astype(np.float32)

    def _type_cos(self, entity: int, phrase: np.ndarray) -> float:
        """:meth:`type_cos` of one entity, key by key (the reference the array pass is tested against)."""
        keys = self.type_ids[self.type_offsets[entity]:self.type_offsets[entity + 1]].tolist()
        return max((float(self.key_rows[k] @ phrase) for k in keys), default=0.0)

    @property
    def ties(self) -> TieTable:
        """The KG's tie table, made when a question first names a second topic entity."""
        if self._ties is None:
            self._ties = TieTable(self.index, mediator_mask(self.index.entities, self.names or None))
        return self._ties

    def _relations(self, ids: set[int]) -> None:
        missing = sorted(i for i in ids if i not in self._relation_rows)
        if missing:
            rows = self.embed([relation_text(self.index.relations[i], None) for i in missing])
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            for i, row in zip(missing, rows / np.maximum(norms, 1e-9), strict=True):
                self._relation_rows[i] = row.astype(np.float32)

    def warm_up(self, chunk: int = 128) -> int:
        """Embed, ahead of the first question, the relation texts of every KG relation (``chunk`` at a time, in id
        order) and the type-bag keys' texts, which calls otherwise embed as their candidates first reach them;
        returns how many relation texts were embedded. A relation's vector is the encoder's for the call that first
        embeds it (the last float bits depend on the texts encoded with it), so a warmed featurizer can differ from
        a cold one in those bits."""
        self.key_rows  # noqa: B018 - made on first use
        missing = [i for i in range(self.index.num_relations) if i not in self._relation_rows]
        for begin in range(0, len(missing), chunk):
            self._relations(set(missing[begin:begin + chunk]))
        return len(missing)

    def _name_match(self, entity: int, cue_words: set[str]) -> float:
        """Share of ``entity``'s name words (stop words aside) that are cue words of the question."""
        words = self._name_words.get(entity)
        if words is None:
            key = self.index.entities[entity]
            words = self._name_words[entity] = tuple(w for w in _WORD.findall(self.names.get(key, key).lower())
                                                     if w not in _STOP)
        return sum(w in cue_words for w in words) / len(words) if words else 0.0

    def _ends(self, entity: int, limit: int) -> list[int]:
        """The other ends of (at most ``limit`` of) ``entity``'s triples."""
        rows = self.index.triples[self.index.incident(entity)[:limit]]
        return np.where(rows[:, 0] == entity, rows[:, 2], rows[:, 0]).tolist()

    def _cue_matches(self, entity: int, joins: set[int], topics: set[int], cue_words: set[str]) -> tuple[float, float]:
        """(best cue match of a name tied to ``entity`` through a join node the plans walked, best cue match of a
        direct neighbour's name); the question's topics and the entity itself never count."""
        if not cue_words:
            return 0.0, 0.0
        direct = [n for n in self._ends(entity, NEIGHBOURS) if n != entity and n not in topics]
        near = max((self._name_match(n, cue_words) for n in direct), default=0.0)
        through = 0.0
        for join in set(direct).intersection(joins):
            for n in self._ends(join, JOIN_DEGREE):
                if n != entity and n != join and n not in topics:
                    through = max(through, self._name_match(n, cue_words))
        return through, near

    def _name_word_table(self) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray]:
        """(word -> id, CSR offsets [n + 1], word ids, word count per entity) of every entity's name words (stop words
        aside, repeats kept): what :meth:`_name_match` reads, for all entities at once."""
        if self._words is None:
            vocabulary: dict[str, int] = {}
            ids: list[int] = []
            sizes = np.zeros(self.index.num_entities, np.int64)
            for entity, key in enumerate(self.index.entities):
                words = [w for w in _WORD.findall(self.names.get(key, key).lower()) if w not in _STOP]
                ids.extend(vocabulary.setdefault(w, len(vocabulary)) for w in words)
                sizes[entity] = len(words)
            offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
            self._words = (vocabulary, offsets, np.asarray(ids, np.int64), sizes)
        return self._words

    def name_matches(self, entities: np.ndarray, cue_words: set[str]) -> np.ndarray:
        """float64 [k]: :meth:`_name_match` of each of ``entities`` (ids, repeats allowed) for ``cue_words``."""
        vocabulary, offsets, ids, sizes = self._name_word_table()
        entities = np.asarray(entities, np.int64)
        cue = np.zeros(len(vocabulary) + 1, bool)
        cue[[vocabulary[w] for w in cue_words if w in vocabulary]] = True
        lengths = sizes[entities]
        owner = np.repeat(np.arange(len(entities)), lengths)
        position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        hits = cue[ids[offsets[entities][owner] + position]]
        counts = np.bincount(owner, weights=hits, minlength=len(entities))
        return np.divide(counts, lengths, out=np.zeros(len(entities)), where=lengths > 0)

    def _neighbours(self, nodes: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """(owner, other end) of (at most ``limit`` of) each node's triples, as :meth:`_ends` of each node."""
        offsets = np.asarray(self.index.csr_offsets, np.int64)
        take = np.minimum(offsets[nodes + 1] - offsets[nodes], limit)
        owner = np.repeat(np.arange(len(nodes)), take)
        position = np.arange(int(take.sum())) - np.repeat(np.cumsum(take) - take, take)
        rows = np.asarray(self.index.triples, np.int64)[
            np.asarray(self.index.csr_triples, np.int64)[offsets[nodes][owner] + position]]
        at = nodes[owner]
        return owner, np.where(rows[:, 0] == at, rows[:, 2], rows[:, 0])

    def cue_matches(self, entities: np.ndarray, joins: set[int], topics: set[int], cue_words: set[str]
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_cue_matches` of each of ``entities`` (float64 [k] each: through a join node, direct), in array
        passes over all their neighbours."""
        entities = np.asarray(entities, np.int64)
        through, near = np.zeros(len(entities)), np.zeros(len(entities))
        if not cue_words or not len(entities):
            return through, near
        barred = np.asarray(sorted(topics), np.int64)
        owner, other = self._neighbours(entities, NEIGHBOURS)
        keep = (other != entities[owner]) & ~np.isin(other, barred)
        owner, other = owner[keep], other[keep]
        np.maximum.at(near, owner, self.name_matches(other, cue_words))  # scores >= 0: max(..., default=0.0)
        joined = np.isin(other, np.asarray(sorted(joins), np.int64))
        if joined.any():
            span = self.index.num_entities
            pairs = np.unique(owner[joined] * span + other[joined])  # (candidate, join), each once
            hop, far = self._neighbours(pairs % span, JOIN_DEGREE)
            candidate, join = pairs[hop] // span, pairs[hop] % span
            keep = (far != entities[candidate]) & (far != join) & ~np.isin(far, barred)
            np.maximum.at(through, candidate[keep], self.name_matches(far[keep], cue_words))
        return through, near

    def cue_matches_batch(self, entities: Sequence[np.ndarray], joins: Sequence[set[int]], topics: Sequence[set[int]],
                          cue_words: Sequence[set[str]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`cue_matches` of several questions (``entities[i]`` with ``joins[i]``, ``topics[i]``,
        ``cue_words[i]``) in one set of array passes over all their candidates' neighbours: a neighbour counts for
        its own question's candidate only (pairs keyed by question), and a name word is a cue of that question."""
        sizes = [len(e) for e in entities]
        out = [(np.zeros(n), np.zeros(n)) for n in sizes]
        live = [i for i, n in enumerate(sizes) if n and cue_words[i]]
        if not live:
            return out
        vocabulary, offsets, ids, lengths_of = self._name_word_table()
        span, words = self.index.num_entities, len(vocabulary) + 1
        flat = np.concatenate([np.asarray(entities[i], np.int64) for i in live])
        question = np.repeat(np.arange(len(live), dtype=np.int64), [sizes[i] for i in live])

        def keyed(sets: Sequence[set], width: int) -> np.ndarray:  # (question, member) pairs, sorted
            pairs = [k * width + np.asarray(sorted(sets[i]), np.int64) for k, i in enumerate(live) if sets[i]]
            return np.unique(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64)

        barred = keyed(topics, span)
        joined_pairs = keyed([{j for j in joins[i]} for i in range(len(joins))], span)
        cue = keyed([{vocabulary[w] for w in cue_words[i] if w in vocabulary} for i in range(len(cue_words))], words)

        def matches(nodes: np.ndarray, asker: np.ndarray) -> np.ndarray:
            """:meth:`name_matches` of each node for its asking question's cue words."""
            n_words = lengths_of[nodes]
            owner = np.repeat(np.arange(len(nodes)), n_words)
            position = np.arange(int(n_words.sum())) - np.repeat(np.cumsum(n_words) - n_words, n_words)
            hits = np.isin(asker[owner] * words + ids[offsets[nodes][owner] + position], cue)
            counts = np.bincount(owner, weights=hits, minlength=len(nodes))
            return np.divide(counts, n_words, out=np.zeros(len(nodes)), where=n_words > 0)

        through, near = np.zeros(len(flat)), np.zeros(len(flat))
        owner, other = self._neighbours(flat, NEIGHBOURS)
        keep = (other != flat[owner]) & ~np.isin(question[owner] * span + other, barred)
        owner, other = owner[keep], other[keep]
        np.maximum.at(near, owner, matches(other, question[owner]))  # scores >= 0: max(..., default=0.0)
        joined = np.isin(question[owner] * span + other, joined_pairs)
        if joined.any():
            pairs = np.unique(owner[joined] * span + other[joined])  # (candidate, join), each once
            hop, far = self._neighbours(pairs % span, JOIN_DEGREE)
            candidate, join = pairs[hop] // span, pairs[hop] % span
            keep = (far != flat[candidate]) & (far != join) & ~np.isin(question[candidate] * span + far, barred)
            np.maximum.at(through, candidate[keep], matches(far[keep], question[candidate[keep]]))
        bounds = np.cumsum([0, *(sizes[i] for i in live)])
        for k, i in enumerate(live):
            out[i] = (through[bounds[k]:bounds[k + 1]], near[bounds[k]:bounds[k + 1]])
        return out

    def _name_cue(self, entity: int) -> tuple[str, list[str]]:
        """(name, its lower-cased words) of ``entity``, kept."""
        cached = self._name_cues.get(entity)
        if cached is None:
            name = self.names.get(self.index.entities[entity], self.index.entities[entity])
            cached = self._name_cues[entity] = (name, _WORD.findall(name.lower()))
        return cached

    def _name_facts(self, entity: int) -> tuple[list[str], bool, bool, float, frozenset[str]]:
        """What the features read of ``entity``'s name alone, kept: its words, whether it is a year or date, whether
        a number, log1p of its word count, and the years it names."""
        facts = self._name_fact_cache.get(entity)
        if facts is None:
            name, name_words = self._name_cue(entity)
            stripped = name.strip()
            facts = self._name_fact_cache[entity] = (
                name_words, bool(_YEAR.match(stripped)), bool(_NUMBER.match(stripped)), _log1p(len(name_words)),
                frozenset(_YEAR_WORD.findall(name)))
        return facts

    def mentioned(self, question: Question) -> tuple[int, ...]:
        """KG ids of the entities the question text mentions (:meth:`EntityLinker.mentions
        <stem_jax.data.linker.EntityLinker.mentions>`) besides its topic entities and what their names cover;
        mediators never count."""
        found = self._mentioned.get(question.text)
        if found is None:
            if self._linker is None:  # shared with the path planner's constraint branches: a text is linked once
                from stem_jax.plan.branch_planner import text_links

                self._linker = text_links(self.index, self.names or None)
            topics = {self.index.entity_ids.get(t, -1) for t in question.topic_entities}
            covered = [t.lower() for t in topic_names(question, self.names)]
            found = tuple(dict.fromkeys(
                self.index.entity_ids[link.entity] for link in self._linker.links(question.text)
                if link.entity in self.index.entity_ids and self.index.entity_ids[link.entity] not in topics
                and not self.ties.mediators[self.index.entity_ids[link.entity]]
                and not any(link.mention.lower() in name for name in covered)))
            self._mentioned[question.text] = found
            while len(self._mentioned) > MENTIONED_TEXTS:
                self._mentioned.popitem(last=False)
        else:
            self._mentioned.move_to_end(question.text)
        return found

    def _constraints(self, entity: int, others: set[int] | Sequence[int], question: np.ndarray) -> tuple[float, ...]:
        """The :data:`CONSTRAINT_FEATURES` of ``entity`` for the question's topic entities ``others`` (those the
        plans binding it did not leave from; the entity itself is not a condition on itself)."""
        others = set(others) - {entity}
        if not others:
            return 0.0, 0.0, 0.0, 0.0, 0.0
        tied = [self.ties.of(t).get(entity, ()) for t in others]
        hits = sum(bool(relations) for relations in tied)
        cos = max((float(question @ self._relation_rows[r]) for relations in tied for r in relations), default=0.0)
        return (np.log1p(len(others)), hits / len(others), float(hits == len(others)),
                np.log1p(len(others) - hits), cos)

    def questions(self, questions: Sequence[Question]) -> np.ndarray:
        texts = [mask_topics(q.text, topic_names(q, self.names))[0] for q in questions]
        if not texts:
            return np.zeros((0, 0), np.float32)
        rows = np.asarray(self.embed(texts), np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)

    def _mentions_and_ties(self, questions: Sequence[Question], relation_ids: set[int]) -> list:
        """Per question the other entities its text mentions (when the scorer reads them); adds to
        ``relation_ids`` the relations that tie its condition entities (other topics, mentions) to anything."""
        mentioned = [self.mentioned(q) if self.read_mentions else () for q in questions]
        for question, extra in zip(questions, mentioned, strict=True):
            named = [self.index.entity_ids[t] for t in question.topic_entities if t in self.index.entity_ids]
            for entity in [*(named if len(question.topic_entities) > 1 else ()), *extra]:
                for relations in self.ties.of(entity).values():
                    relation_ids.update(relations)
        return mentioned

    def __call__(self, questions: Sequence[Question], runs: Sequence[Sequence], outputs: Sequence[Sequence[dict]],
                 ranked: Sequence[Sequence[tuple[int, float]]],
                 pruned: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]] | None = None) -> Candidates:
        """``runs[i]``/``outputs[i]``: question i's traced runs (``pipeline.Run`` and its output arrays);
        ``ranked[i]``: the tracer's ranking of its entities, uncut; ``pruned[i][k]``: run k's (nodes, via) with
        unreached bindings pruned, when the caller has them (:meth:`StemPipeline.fold_chunk` made them), else
        pruned here.

        The numeric features the scorer does not read (``features`` at construction) stay 0, and the answer phrases
        are encoded only when ``type_cos`` is read. Gives what :meth:`_reference_call` gives, bit for bit, in the
        features it computes, with less work: a binding's evidence is gathered only
        for the entities among the first ``max_candidates`` of its question's ranking (the only ones read), the
        other bindings in array passes; each question-relation cosine and each plan path's mean cosine is computed
        once per question, not once per candidate."""
        from stem_jax.answer.rank import answer_depth

        n, m, v = len(questions), self.max_candidates, len(self.vocabulary.keys)
        numeric = np.zeros((n, m, N_NUMERIC), np.float32)
        types = np.zeros((n, m, v), np.float32)
        mask = np.zeros((n, m), bool)
        qvec = self.questions(questions)
        if "type_cos" in self.reads:
            phrases, has_phrase = self.phrase_rows(questions)
        else:  # no answer phrase to encode
            phrases, has_phrase = np.zeros((n, 1), np.float32), np.zeros(n, bool)
        triple_relation = np.asarray(self.index.triples)[:, 1]
        per_question: list[tuple] = []
        relation_ids: set[int] = set()
        for qi, (mine, outs) in enumerate(zip(runs, outputs, strict=True)):
            wanted = np.asarray([e for e, _ in ranked[qi][:m]], np.int64)
            order = np.argsort(wanted, kind="stable")
            walked: list[np.ndarray] = []  # the join nodes of each run, made a set once per question
            n_beams = max((r.beam for r in mine), default=0) + 1
            bindings: list[tuple] = []  # per run: its bindings of wanted entities (candidate position, ...)
            for run, slot, nodes, via, scores, live in answer_slots(mine, outs, pruned[qi] if pruned is not None
                                                                    else None):
                plan = run.plan
                bound_nodes = nodes[slot][live]
                walked.extend(nodes[other][nodes[other] >= 0] for other in range(1, len(nodes)) if other != slot)
                depth = max(answer_depth(plan.steps, slot), 1)
                steps = np.asarray(plan.steps).reshape(-1, 3)
                path = tuple(int(r) for r in steps[:, 2].tolist() if r >= 0)
                relation_ids.update(path)
                bound_via = via[slot][live]
                relation = triple_relation[np.maximum(bound_via, 0)]
                relation_ids.update(np.unique(relation[bound_via >= 0]).tolist())
                at = np.searchsorted(wanted, bound_nodes, sorter=order)
                at = order[np.minimum(at, max(len(wanted) - 1, 0))] if len(wanted) else at
                pick = wanted[at] == bound_nodes if len(wanted) else np.zeros(len(bound_nodes), bool)
                if not pick.any():
                    continue
                asked = int(steps[slot - 1, 2]) if 0 < slot <= len(steps) else -1
                has = bound_via[pick] >= 0
                bindings.append((at[pick], scores[slot][live][pick].astype(np.float64), relation[pick], has,
                                 has & (relation[pick] == asked), run.beam, float(run.beam_prob), depth,
                                 float(scores[0, 0]), path, int(run.anchor_entity), len(bound_nodes)))
            joins = set(np.concatenate(walked).tolist()) if walked else set()
            per_question.append((self._evidence(bindings, len(wanted), n_beams), joins))
        mentioned = self._mentions_and_ties(questions, relation_ids)
        self._relations(relation_ids)
        rows = self._relation_rows
        entities, base = [], []
        cue_inputs = [self._cue_inputs(question, joins, ranking) for question, (_, joins), ranking in
                      zip(questions, per_question, ranked, strict=True)]
        if cue_inputs and {"join_match", "neighbour_match"} & self.reads:
            cues = self.cue_matches_batch(*zip(*cue_inputs, strict=True))
        else:
            cues = [(np.zeros(len(c[0])), np.zeros(len(c[0]))) for c in cue_inputs]
        for qi, (question, (evidence, _), ranking) in enumerate(zip(questions, per_question, ranked, strict=True)):
            ents, vals = ranking_arrays(ranking)
            entities.append(ents)
            base.append(vals)
            words, years = set(_WORD.findall(question.text.lower())), set(_YEAR_WORD.findall(question.text))
            topics = cue_inputs[qi][2]
            n_beams = max((r.beam for r in runs[qi]), default=0) + 1
            top = float(vals[0]) if len(vals) else 1.0
            through, near = cues[qi]
            q = qvec[qi]
            dots: dict[int, float] = {}  # relation -> the question's cosine with it, as the reference computes it

            def dot(r: int, q: np.ndarray = q, dots: dict = dots) -> float:
                found = dots.get(r)
                if found is None:
                    found = dots[r] = float(q @ rows[r])
                return found

            fair, cumulative, n_beams_of, best_beam, plan_answers, best_prob, exact, min_depth, anchors, bound = evidence
            count = min(m, len(ents))
            # relation cosine: the best over the relations that bind the candidate; path cosine: the best mean over
            # the relation paths of the plans that bind it (0 without any), each cosine computed once
            cos = np.full(count, -np.inf)
            path_cos = np.full(count, -np.inf)
            read_path = "path_cos" in self.reads
            held = [(at[has], relation[has]) for at, relation, has, _ in bound if has.any()]
            if held:  # every run's bindings at once, each distinct relation's cosine read once
                relation = np.concatenate([r for _, r in held])
                distinct, which = np.unique(relation, return_inverse=True)
                np.maximum.at(cos, np.concatenate([a for a, _ in held]),
                              np.asarray([dot(r) for r in distinct.tolist()], np.float64)[which.reshape(-1)])
            if read_path:
                for at, _, _, path in bound:
                    if path:
                        np.maximum.at(path_cos, at, float(np.mean([q @ rows[r] for r in path])))
            cos = np.where(np.isfinite(cos), cos, 0.0)
            path_cos = np.where(np.isfinite(path_cos), path_cos, 0.0)
            mention_of = self._constraint_pass(mentioned[qi], dot)
            conditions = topics if len(topics) > 1 and set(CONSTRAINT_FEATURES) & self.reads else set()
            condition_of = self._constraint_pass(conditions, dot, anchors)
            has_year = bool(years)
            log_ents = np.log1p(len(ents))
            if count:  # the candidates' features as columns, each value computed as the reference computes it
                cand = ents[:count]
                facts = [self._name_facts(e) for e in cand.tolist()]
                share = [sum(w in words for w in f[0]) / max(len(f[0]), 1) for f in facts]
                named_year = [has_year and bool(years.intersection(f[4])) for f in facts]
                if conditions:
                    conditioned = np.asarray([condition_of(e, ci) for ci, e in enumerate(cand.tolist())], np.float64)
                else:  # no other topic: every candidate's constraint features are 0
                    conditioned = np.zeros((count, len(CONSTRAINT_FEATURES)))
                if mentioned[qi]:
                    mentions = np.asarray([mention_of(e) for e in cand.tolist()], np.float64)[:, [0, 1, 2, 4]]
                else:
                    mentions = np.zeros((count, len(MENTION_FEATURES)))
                support = vals[:count]
                columns = [
                    support, support / top if top > 0 else np.zeros(count), [_log1p(i) for i in range(count)],
                    np.arange(count) == 0, fair[:count], cumulative[:count], n_beams_of[:count] / n_beams,
                    best_beam[:count] / n_beams, [_log1p(a) for a in plan_answers[:count].tolist()], cos[:count],
                    share, [f[1] for f in facts], [f[2] for f in facts], [f[3] for f in facts], self.degree[cand],
                    np.full(count, log_ents), best_prob[:count], path_cos[:count], exact[:count], min_depth[:count],
                    np.full(count, has_year), named_year, np.asarray(through[:count], np.float64),
                    np.asarray(near[:count], np.float64), *conditioned.T, *mentions.T,
                    np.zeros(count)]  # type_cos: below, for all candidates at once
                table = np.stack([np.asarray(c, np.float64) for c in columns], axis=1)
            if count:
                numeric[qi, :count] = table
                mask[qi, :count] = True
                cand = ents[:count]
                lengths = self.type_offsets[cand + 1] - self.type_offsets[cand]
                owner = np.repeat(np.arange(count), lengths)
                position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
                keys = self.type_ids[self.type_offsets[cand][owner] + position]
                weight = np.zeros(count)
                weight[lengths > 0] = 1.0 / np.sqrt(lengths[lengths > 0])
                types[qi, owner, keys] = weight[owner]
            if has_phrase[qi]:
                numeric[qi, :, NUMERIC.index("type_cos")] = self.type_cos(types[qi], phrases[qi])
        qword = np.asarray([question_word(q.text) for q in questions], np.int32)
        return Candidates(entities=entities, base=base, numeric=numeric, qword=qword, types=types,
                          question=qvec if len(qvec) else np.zeros((0, 1), np.float32), mask=mask)

    def _cue_inputs(self, question: Question, joins: set[int], ranking: Sequence[tuple[int, float]]
                    ) -> tuple[np.ndarray, set[int], set[int], set[str]]:
        """(candidates, join nodes that are no hubs, topic ids, cue words) of a question, as the reference reads them."""
        words = set(_WORD.findall(question.text.lower()))
        topics = {self.index.entity_ids[t] for t in question.topic_entities if t in self.index.entity_ids}
        topic_words = {w for t in topic_names(question, self.names) for w in _WORD.findall(t.lower())}
        candidates = np.asarray([e for e, _ in ranking[:self.max_candidates]], np.int64)
        return (candidates, {j for j in joins if self.raw_degree[j] <= JOIN_DEGREE}, topics,
                words - topic_words - _STOP)

    @staticmethod
    def _evidence(bindings: Sequence[tuple], count: int, n_beams: int) -> tuple:
        """Per candidate position (``count`` of them), from the runs' ``bindings`` of the candidates (in run order):
        the reference's per-entity evidence in array passes: (best fair T-Score, best cumulative T-Score, distinct
        beams, best beam, answers of the first run at that beam, best plan probability, exact relation, least
        depth; 0 where no run binds the candidate), the topic entities of the runs binding each, the (position,
        relation, has relation, path) of each run for the cosines."""
        fair, cumulative = np.full(count, -np.inf), np.full(count, -np.inf)
        best_beam = np.full(count, n_beams, np.int64)
        best_prob, exact = np.zeros(count), np.zeros(count, bool)
        min_depth = np.full(count, np.iinfo(np.int64).max, np.int64)
        anchors: dict[int, set[int]] = {}
        bound = []
        if not bindings:
            zeros = np.zeros(count)
            return (zeros, zeros, np.zeros(count, np.int64), best_beam, np.zeros(count, np.int64), best_prob, exact,
                    np.zeros(count, np.int64), anchors, bound)
        at = np.concatenate([b[0] for b in bindings])
        score = np.concatenate([b[1] for b in bindings])
        beam = np.concatenate([np.full(len(b[0]), b[5], np.int64) for b in bindings])
        depth = np.concatenate([np.full(len(b[0]), b[7], np.int64) for b in bindings])
        anchor = np.concatenate([np.full(len(b[0]), b[8]) for b in bindings])
        answers = np.concatenate([np.full(len(b[0]), b[11], np.int64) for b in bindings])
        np.maximum.at(fair, at, (score - anchor) / depth)
        np.maximum.at(cumulative, at, score)
        np.minimum.at(best_beam, at, beam)
        np.minimum.at(min_depth, at, depth)
        for b in bindings:
            np.maximum.at(best_prob, b[0], b[6])
            exact[b[0][b[4]]] = True
            bound.append((b[0], b[2], b[3], b[9]))
        # the first binding (in run order) at the candidate's best beam sets its plan's answer count
        first = np.full(count, len(at), np.int64)
        at_best = beam == best_beam[at]
        np.minimum.at(first, at[at_best], np.flatnonzero(at_best))
        seen = first < len(at)
        plan_answers = np.where(seen, answers[np.minimum(first, len(at) - 1)], 0)
        beams = np.bincount(np.unique(at * (n_beams + 1) + beam) // (n_beams + 1), minlength=count)
        for position, entity in {(int(p), b[10]) for b in bindings for p in b[0].tolist()}:
            anchors.setdefault(position, set()).add(entity)
        fair = np.where(np.isfinite(fair), fair, 0.0)
        cumulative = np.where(np.isfinite(cumulative), cumulative, 0.0)
        min_depth = np.where(seen, min_depth, 0)
        return fair, cumulative, beams, best_beam, plan_answers, best_prob, exact, min_depth, anchors, bound

    def _constraint_pass(self, others: set[int] | Sequence[int], dot: Callable[[int], float],
                         anchors: dict[int, set[int]] | None = None) -> Callable[[int], tuple[float, ...]]:
        """``entity -> _constraints(entity, others [minus the topics that anchor it], question)``, reading each
        relation's cosine through ``dot`` (one question's, kept)."""
        others = set(others)
        empty = (0.0, 0.0, 0.0, 0.0, 0.0)
        if not others:
            return lambda entity, position=-1: empty
        ties = {t: self.ties.of(t) for t in others}

        def constraints(entity: int, position: int = -1) -> tuple[float, ...]:
            mine = others - anchors.get(position, set()) if anchors is not None else others
            mine = mine - {entity}
            if not mine:
                return empty
            tied = [ties[t].get(entity, ()) for t in mine]
            hits = sum(bool(relations) for relations in tied)
            cos = max((dot(r) for relations in tied for r in relations), default=0.0)
            return (np.log1p(len(mine)), hits / len(mine), float(hits == len(mine)), np.log1p(len(mine) - hits), cos)

        return constraints

    def _reference_call(self, questions: Sequence[Question], runs: Sequence[Sequence], outputs: Sequence[Sequence[dict]],
                 ranked: Sequence[Sequence[tuple[int, float]]],
                 pruned: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]] | None = None) -> Candidates:
        """:meth:`__call__` written plainly, binding by binding and candidate by candidate (the reference the faster
        pass is tested against, bit for bit)."""
        from stem_jax.answer.rank import answer_depth

        n, m, v = len(questions), self.max_candidates, len(self.vocabulary.keys)
        numeric = np.zeros((n, m, N_NUMERIC), np.float32)
        types = np.zeros((n, m, v), np.float32)
        mask = np.zeros((n, m), bool)
        qvec = self.questions(questions)
        phrases, has_phrase = self.phrase_rows(questions)
        per_question: list[dict[int, list]] = []
        relation_ids: set[int] = set()
        for qi, (mine, outs) in enumerate(zip(runs, outputs, strict=True)):
            # entity -> [fair, cumulative, beams, best beam, plan answers, relations, best plan prob, plan paths,
            #            exact relation, min depth]
            seen: dict[int, list] = {}
            anchors: dict[int, set[int]] = {}  # entity -> the topic entities of the runs that bind it
            joins: set[int] = set()  # the nodes the plans walked through (neither anchor nor answer)
            n_beams = max((r.beam for r in mine), default=0) + 1
            for run, slot, nodes, via, scores, live in answer_slots(mine, outs, pruned[qi] if pruned is not None
                                                                    else None):
                plan = run.plan
                ents = nodes[slot][live].tolist()
                for other in range(1, len(nodes)):
                    if other != slot:
                        joins.update(int(e) for e in nodes[other][nodes[other] >= 0].tolist())
                depth = max(answer_depth(plan.steps, slot), 1)
                anchor = float(scores[0, 0])
                steps = np.asarray(plan.steps).reshape(-1, 3)
                path = tuple(int(r) for r in steps[:, 2].tolist() if r >= 0)
                relation_ids.update(path)
                asked = int(steps[slot - 1, 2]) if 0 < slot <= len(steps) else -1
                rels = self.index.triples[np.maximum(via[slot][live], 0), 1].tolist()
                bound = [t >= 0 for t in via[slot][live].tolist()]
                for entity, score, relation, has in zip(ents, scores[slot][live].tolist(), rels, bound, strict=True):
                    fair = (score - anchor) / depth
                    entry = seen.setdefault(entity, [-np.inf, -np.inf, set(), n_beams, 0, set(), 0.0, set(), False,
                                                     depth])
                    entry[0] = max(entry[0], fair)
                    anchors.setdefault(entity, set()).add(int(run.anchor_entity))
                    entry[6] = max(entry[6], float(run.beam_prob))
                    entry[7].add(path)
                    entry[8] = entry[8] or (has and relation == asked)
                    entry[9] = min(entry[9], depth)
                    entry[1] = max(entry[1], score)
                    entry[2].add(run.beam)
                    if run.beam < entry[3]:
                        entry[3], entry[4] = run.beam, len(ents)
                    if has:
                        entry[5].add(relation)
                        relation_ids.add(relation)
            per_question.append((seen, joins, anchors))
        mentioned = self._mentions_and_ties(questions, relation_ids)
        self._relations(relation_ids)
        entities, base = [], []
        for qi, (question, (seen, joins, anchors), ranking) in enumerate(zip(questions, per_question, ranked, strict=True)):
            ents, vals = ranking_arrays(ranking)
            entities.append(ents)
            base.append(vals)
            words, years = set(_WORD.findall(question.text.lower())), set(_YEAR_WORD.findall(question.text))
            topics = {self.index.entity_ids[t] for t in question.topic_entities if t in self.index.entity_ids}
            topic_words = {w for t in topic_names(question, self.names) for w in _WORD.findall(t.lower())}
            cue_words = words - topic_words - _STOP
            joins = {j for j in joins if self.raw_degree[j] <= JOIN_DEGREE}
            n_beams = max((r.beam for r in runs[qi]), default=0) + 1
            top = float(vals[0]) if len(vals) else 1.0
            through, near = self.cue_matches(ents[:m], joins, topics, cue_words)
            for ci, (entity, support) in enumerate(zip(ents[:m].tolist(), vals[:m].tolist(), strict=False)):
                fair, cumulative, beams, best_beam, plan_answers, rels, best_prob, paths, exact, min_depth = seen.get(
                    entity, [0.0, 0.0, set(), n_beams, 0, set(), 0.0, set(), False, 0])
                name, name_words = self._name_cue(entity)
                cos = max((float(qvec[qi] @ self._relation_rows[r]) for r in rels), default=0.0)
                path_cos = max((float(np.mean([qvec[qi] @ self._relation_rows[r] for r in p])) for p in paths if p),
                               default=0.0)
                mention = self._constraints(entity, mentioned[qi], qvec[qi])
                numeric[qi, ci] = (
                    support, support / top if top > 0 else 0.0, np.log1p(ci), ci == 0,
                    fair if np.isfinite(fair) else 0.0, cumulative if np.isfinite(cumulative) else 0.0,
                    len(beams) / n_beams, best_beam / n_beams, np.log1p(plan_answers), cos,
                    sum(w in words for w in name_words) / max(len(name_words), 1),
                    bool(_YEAR.match(name.strip())), bool(_NUMBER.match(name.strip())),
                    np.log1p(len(name_words)), self.degree[entity], np.log1p(len(ents)),
                    best_prob, path_cos, exact, min_depth, bool(years),
                    bool(years.intersection(_YEAR_WORD.findall(name))),
                    float(through[ci]), float(near[ci]),
                    *self._constraints(entity, topics - anchors.get(entity, set()) if len(topics) > 1 else set(),
                                      qvec[qi]),
                    *(mention[i] for i in (0, 1, 2, 4)),  # count, share, all, cos (no "missed")
                    0.0)  # type_cos: below, for all candidates at once
                keys = self.type_ids[self.type_offsets[entity]:self.type_offsets[entity + 1]]
                if len(keys):
                    types[qi, ci, keys] = 1.0 / np.sqrt(len(keys))
                mask[qi, ci] = True
            if has_phrase[qi]:
                numeric[qi, :, NUMERIC.index("type_cos")] = self.type_cos(types[qi], phrases[qi])
        qword = np.asarray([question_word(q.text) for q in questions], np.int32)
        return Candidates(entities=entities, base=base, numeric=numeric, qword=qword, types=types,
                          question=qvec if len(qvec) else np.zeros((0, 1), np.float32), mask=mask)

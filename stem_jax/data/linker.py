"""Entity linking for questions without ``[brackets]``: find the topic mention among the KG's names.

Every span of up to ``max_tokens`` word tokens of the question is looked up in three dictionaries
built once from the entity names, from most to least specific:

1. ``exact``: the span as written (case-sensitive), so ``Michelle Trachtenberg`` and its case twin
   ``michelle trachtenberg`` stay apart;
2. ``case-insensitive``: ``str.casefold`` of both sides;
3. ``fuzzy``: accents stripped, punctuation dropped, whitespace collapsed (score 1.0), and, when no
   dictionary hit spans two or more words, a string-similarity search (``rapidfuzz`` when installed,
   else :mod:`difflib`) over the names that share a rare word or word prefix with the span
   (a token index built once), kept above ``min_fuzzy``.

Longer spans win over shorter ones (``Harriet the Spy`` over ``Spy``), then the more specific
kind, then spans written with capitals in a lower-case question, then the higher similarity, then
the better-connected entity. Spans made only of stop words or of words from the KG's relation names
("directed", "by") are not linked, unless written with a capital letter and matched exactly.
A question that marks its topic with ``[brackets]`` (MetaQA) links the bracket text (kind
``bracket``) and never searches the rest.

Typical use::

    linker = EntityLinker.from_index(index, dataset.entity_names)
    links = linker.link("what films did michelle trachtenberg star in")
    links[0].entity, links[0].kind, links[0].score   # ('michelle trachtenberg', 'exact', 1.0)
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from stem_jax.data.types import Question, relation_text
from stem_jax.errors import DataError

try:  # optional: a faster similarity than difflib's; results differ only in the last decimals
    from rapidfuzz import fuzz as _rapidfuzz
except ImportError:  # pragma: no cover - depends on the environment
    _rapidfuzz = None

KINDS = ("bracket", "exact", "case-insensitive", "fuzzy")
_KIND_RANK = {kind: rank for rank, kind in enumerate(KINDS)}
_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w")
_BRACKET = re.compile(r"\[([^\[\]]+)\]")

# Function words and question words: a span made only of these is never a topic mention.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be been before being below between both
    but by can could did do does doing done down during each few for from further had has have having he her
    here hers him his how i if in into is it its itself just me more most my no nor not of off on once only or
    other our out over own same she should so some such than that the their them then there these they this
    those through to too under until up very was we were what when where which while who whom whose why will
    with would you your also s t get got give gave given list name named tell show find kind sort type types
    many much often""".split()
)


@dataclasses.dataclass(frozen=True)
class Link:
    """One linked mention.

    Attributes:
      entity: the KG entity as it appears in the index (an id such as a Freebase mid, or the name).
      name: the entity's readable name that matched.
      mention: the question text that was matched (``question[start:end]``).
      start, end: character offsets of the mention in the question as passed to :meth:`EntityLinker.link`.
      kind: ``bracket``, ``exact``, ``case-insensitive`` or ``fuzzy``.
      score: similarity in [0, 1]; 1.0 for bracket, exact, case-insensitive and normalised matches.
    """

    entity: str
    name: str
    mention: str
    start: int
    end: int
    kind: str
    score: float


@dataclasses.dataclass(frozen=True)
class _Span:
    start: int
    end: int
    words: int  # word tokens in the span
    content: int  # word tokens that are not stop words
    key: str  # normalise(question[start:end])
    stop: bool  # only stop words
    capitals: int  # words written with a capital (not counting the question's first word)
    leads_with_capital: bool  # its first word that is not a stop word is written with a capital


def normalise(text: str) -> str:
    """Accents stripped, case folded, punctuation dropped, whitespace collapsed: ``Grégoire  Colin!`` ->
    ``gregoire colin``."""
    if text.isascii():
        return " ".join(re.findall(r"\w+", text.lower()))
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
    return " ".join(re.findall(r"\w+", stripped))


def _similarity(a: str, b: str) -> float:
    if _rapidfuzz is not None:
        return _rapidfuzz.ratio(a, b) / 100.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if matcher.real_quick_ratio() < 0.5 or matcher.quick_ratio() < 0.5:
        return 0.0
    return matcher.ratio()


class EntityLinker:
    """Dictionaries over a KG's entity names, built once; :meth:`link` costs milliseconds per question.

    Args:
      entities: entity keys in index order (``KGIndex.entities``).
      names: optional readable names (``Dataset.entity_names``); an entity without one is named by its key.
      degree: optional per-entity degree, to prefer the better-connected of two same-named entities.
      extra_stop_words: words that alone never form a mention (e.g. the words of the KG's relation names).
      min_fuzzy: the similarity a fuzzy match needs (0..1).
      max_tokens: the longest span tried, in tokens (default: the longest name, at most 16).
    """

    def __init__(
        self,
        entities: Sequence[str],
        names: Mapping[str, str] | None = None,
        *,
        degree: Sequence[int] | np.ndarray | None = None,
        extra_stop_words: Iterable[str] = (),
        min_fuzzy: float = 0.9,
        max_tokens: int | None = None,
        max_posting: int = 300,
        max_pool: int = 64,
    ):
        if not entities:
            raise DataError("cannot link entities in an empty KG", fix="load a KG with at least one triple")
        self.entities = tuple(entities)
        self.names = [(names or {}).get(e, e) for e in self.entities]
        self.degree = np.zeros(len(self.entities), np.int64) if degree is None else np.asarray(degree, np.int64)
        self.stop_words = STOP_WORDS | {w.casefold() for w in extra_stop_words}
        self.min_fuzzy = float(min_fuzzy)
        self.max_posting = max_posting
        self.max_pool = max_pool
        self._exact: dict[str, list[int]] = defaultdict(list)
        self._folded: dict[str, list[int]] = defaultdict(list)
        self._normal: dict[str, list[int]] = defaultdict(list)
        longest = 1
        for i, name in enumerate(self.names):
            self._exact[name].append(i)
            self._folded[name.casefold()].append(i)
            key = normalise(name)
            if key:
                self._normal[key].append(i)
            longest = max(longest, sum(1 for _ in _TOKEN.finditer(name)))
        self.max_tokens = max_tokens or min(longest, 16)
        # Token index for the fuzzy search: a normalised word, or its 4-letter prefix (so a typo in the
        # word's tail still finds the name), -> normalised names containing it.
        self._normal_keys = list(self._normal)
        self._postings: dict[str, list[int]] = defaultdict(list)
        for k, key in enumerate(self._normal_keys):
            words = key.split()
            for word in set(words) | {w[:4] for w in words if len(w) > 4}:
                self._postings[word].append(k)
        self._key_words = np.asarray([len(k.split()) for k in self._normal_keys], np.int32)

    @classmethod
    def from_index(cls, index, names: Mapping[str, str] | None = None, **kwargs) -> EntityLinker:
        """A linker over ``index`` (a :class:`~stem_jax.kg.index.KGIndex`), its relation words as stop words."""
        relation_words = {w for r in index.relations for w in re.findall(r"\w+", relation_text(r))}
        kwargs.setdefault("extra_stop_words", relation_words)
        return cls(index.entities, names, degree=index.degree, **kwargs)

    @classmethod
    def from_triples(cls, triples: Sequence[tuple[str, str, str]], names: Mapping[str, str] | None = None,
                     **kwargs) -> EntityLinker:
        """A linker over string triples without building a :class:`~stem_jax.kg.index.KGIndex` (loaders)."""
        degree: dict[str, int] = {}
        relations: set[str] = set()
        for head, relation, tail in triples:
            degree[head] = degree.get(head, 0) + 1
            if tail != head:
                degree[tail] = degree.get(tail, 0) + 1
            relations.add(relation)
        kwargs.setdefault("extra_stop_words", {w for r in relations for w in re.findall(r"\w+", relation_text(r))})
        return cls(list(degree), names, degree=list(degree.values()), **kwargs)

    # ------------------------------------------------------------------------------------------
    def link(self, question: str, *, max_links: int = 5) -> list[Link]:
        """Ranked, non-overlapping links for ``question`` (best first); ``[]`` when nothing matches.

        Same-span links to several entities of one name are all returned, best-connected first.
        """
        brackets = list(_BRACKET.finditer(question))
        if brackets:
            links: list[Link] = []
            for m in brackets:
                links += self._link_bracket(question, m.start(1), m.end(1))
            return links[:max_links]
        return self._select(question, self._candidates(question, 0, len(question)), max_links)

    def mentions(self, question: str, *, max_mentions: int = 8) -> list[Link]:
        """Every entity mention of ``question``: the best link of each non-overlapping span :meth:`link` finds, in
        :meth:`link`'s order (the best-ranked span first), at most ``max_mentions``.

        :meth:`link` lists several entities for one span (same-name twins); a question with several conditions
        names several spans (``movie featuring Logan Lerman with Candice White as crew``), and each is a
        constraint anchor."""
        spans: list[Link] = []
        for link in self.link(question, max_links=max(4 * max_mentions, 16)):
            if all((link.start, link.end) != (seen.start, seen.end) for seen in spans):
                spans.append(link)
        return spans[:max_mentions]

    def _link_bracket(self, text: str, start: int, end: int) -> list[Link]:
        mention = text[start:end].strip()
        start += len(text[start:end]) - len(text[start:end].lstrip())
        ids = self._exact.get(mention)
        if ids:
            return [Link(self.entities[i], self.names[i], mention, start, start + len(mention), "bracket", 1.0)
                    for i in self._by_degree(ids)]
        # The bracket text is not a name as written: the cascade, restricted to the whole bracket text.
        whole = [c for c in self._candidates(text, start, start + len(mention)) if c[1] == start
                 and c[2] == start + len(mention)]
        return self._select(text, whole, max_links=5)

    def _by_degree(self, ids: Iterable[int]) -> list[int]:
        return sorted(ids, key=lambda i: (-int(self.degree[i]), i))

    def _spans(self, text: str, lo: int, hi: int) -> list[_Span]:
        """Every run of up to ``max_tokens`` tokens in text[lo:hi] that starts with a word and does not end
        inside punctuation, with per-token work (normalising, stop words) done once per token."""
        tokens = list(_TOKEN.finditer(text, lo, hi))
        is_word = [bool(_WORD.match(t.group())) for t in tokens]
        normal = [normalise(t.group()) if w else "" for t, w in zip(tokens, is_word, strict=True)]
        stop = [t.group().casefold() in self.stop_words for t in tokens]
        upper = [w and t.group()[0].isupper() for t, w in zip(tokens, is_word, strict=True)]
        spans = []
        for i in range(len(tokens)):
            if not is_word[i]:
                continue  # a mention starts with a word
            words = content = capitals = 0
            all_stop = True
            lead: bool | None = None
            key_parts: list[str] = []
            for j in range(i, min(i + self.max_tokens, len(tokens))):
                if is_word[j]:
                    words += 1
                    all_stop = all_stop and stop[j]
                    # Capitals mark names in lower-case questions; the question's first word is not evidence.
                    capital = upper[j] and j > 0
                    capitals += int(capital)
                    content += int(not stop[j] or capital)  # "Me and You" is a title, not three stop words
                    if lead is None and (capital or not stop[j]):
                        lead = upper[j]  # the question's first word counts here: "Ang Lee directed what"
                    if normal[j]:
                        key_parts.append(normal[j])
                elif tokens[j].group() not in ".)!?'":
                    continue
                spans.append(_Span(tokens[i].start(), tokens[j].end(), words, content, " ".join(key_parts), all_stop,
                                   capitals, bool(lead)))
        return spans

    def _rank(self, span: _Span, kind: str, score: float, ids: list[int], cased: bool) -> tuple:
        """Sort key, larger is better.

        Content words first (``the Prowl`` is no longer than ``Prowl``). In a question with capitals, then
        the more specific kind, capitals and similarity. In a question in lower case, where case says
        nothing, then all words of a dictionary match (``catch me if you can`` over the tag ``film``), then
        the kind. Ties: characters, then the best-connected entity.
        """
        degree = max(int(self.degree[i]) for i in ids)
        if cased:
            return (span.content, -_KIND_RANK[kind], span.capitals, score, span.words, span.end - span.start, degree)
        words = span.words if score == 1.0 else 0
        return (span.content, words, -_KIND_RANK[kind], 0, score, span.end - span.start, degree)

    def _candidates(self, text: str, lo: int, hi: int) -> list[tuple]:
        """(sort key, start, end, kind, score, entity ids) for every matching span inside text[lo:hi]."""
        spans = self._spans(text, lo, hi)
        cased = any(span.capitals for span in spans)
        found: list[tuple] = []
        best_words = 0
        for span in spans:
            surface = text[span.start : span.end]
            seen: set[int] | None = None
            for kind, ids in (("exact", self._exact.get(surface)),
                              ("case-insensitive", self._folded.get(surface.casefold())),
                              ("fuzzy", self._normal.get(span.key))):
                if not ids or (span.stop and not (kind == "exact" and span.capitals)):
                    continue
                if seen and set(ids) <= seen:
                    continue
                seen = set(ids) if seen is None else seen | set(ids)
                # Every kind is kept: the less specific ones add the case and accent twins of the best match.
                found.append((self._rank(span, kind, 1.0, ids, cased), span.start, span.end, kind, 1.0, ids))
                best_words = max(best_words, span.content)
        if best_words < 2:
            found += self._fuzzy(spans, cased)
        return found

    def _fuzzy(self, spans: list[_Span], cased: bool) -> list[tuple]:
        found = []
        # A question written with capitals uses them for names: then only spans that start with one (after
        # leading stop words: "the Prowler") are searched.
        for span in spans:
            key = span.key
            if cased and not span.leads_with_capital:
                continue
            if span.stop or not key or (span.words < 2 and (len(key) < 6 or not span.capitals)):
                continue  # one lower-case word is too often a plural or a variant ("directors", "persons")
            qwords = key.split()
            shared: dict[int, int] = defaultdict(int)
            for word in set(qwords):
                if word in self.stop_words:
                    continue
                keys = set(self._postings.get(word, ()))
                if len(word) > 4:
                    keys.update(self._postings.get(word[:4], ()))
                if len(keys) <= self.max_posting:
                    for k in keys:
                        shared[k] += 1
            # A name must share all but one of the span's words (a typo breaks at most one word).
            need = max(1, len(qwords) - 1)
            best, best_ids = 0.0, None
            pool = [k for k, n in shared.items() if n >= need and abs(int(self._key_words[k]) - len(qwords)) <= 1]
            if len(pool) > self.max_pool:  # the names sharing the most words first
                pool = sorted(pool, key=lambda k: -shared[k])[: self.max_pool]
            for k in pool:
                candidate = self._normal_keys[k]
                if abs(len(candidate) - len(key)) > 0.25 * max(len(key), len(candidate)):
                    continue
                score = _similarity(key, candidate)
                if score > best:
                    best, best_ids = score, self._normal[candidate]
            if best_ids is not None and best >= self.min_fuzzy:
                found.append((self._rank(span, "fuzzy", best, best_ids, cased), span.start, span.end, "fuzzy", best, best_ids))
        return found

    def _select(self, text: str, candidates: list[tuple], max_links: int) -> list[Link]:
        links: list[Link] = []
        taken: list[tuple[int, int]] = []
        ranked = sorted(candidates, key=lambda c: (c[0], -c[1]), reverse=True)
        for _, start, end, kind, score, ids in ranked:
            if any(start < b and a < end for a, b in taken):
                continue
            taken.append((start, end))
            for i in self._by_degree(ids):
                if all(link.entity != self.entities[i] or (link.start, link.end) != (start, end) for link in links):
                    links.append(Link(self.entities[i], self.names[i], text[start:end], start, end, kind,
                                      round(float(score), 4)))
            # Less specific matches of the same span follow (an exact lower-case tag, then its capitalised twin).
            for _, s2, e2, kind2, score2, ids2 in ranked:
                if (s2, e2) == (start, end) and ids2 is not ids:
                    for i in self._by_degree(ids2):
                        if all(link.entity != self.entities[i] for link in links):
                            links.append(Link(self.entities[i], self.names[i], text[start:end], start, end, kind2,
                                              round(float(score2), 4)))
            if len(links) >= max_links:
                break
        return links[:max_links]

    # ------------------------------------------------------------------------------------------
    def question(self, text: str, *, qid: str = "question", answers: Sequence[str] = (), hops: int | None = None,
                 source: str = "") -> Question | None:
        """A :class:`Question` with ``topic_entities`` from the best link (``None`` when nothing links).

        Brackets are removed from the stored text, as the MetaQA loader does.
        """
        links = self.link(text)
        if not links:
            return None
        best = [link for link in links if (link.start, link.end) == (links[0].start, links[0].end)]
        return Question(qid=qid, text=_BRACKET.sub(lambda m: m.group(1), text).strip(),
                        topic_entities=tuple(link.entity for link in best[:1]), answers=tuple(answers), hops=hops,
                        source=source)

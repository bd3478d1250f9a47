"""Value conditions applied to the answers, where the KG holds the values.

"Which films starring Ann Actor were released after 1990?" is a main path (the actor's films) plus a condition on a
value the answers must have. Where the KG stores such values as literal entities ("1994" as the tail of
``release_year``), this module reads the condition from the question's wording, finds the candidates' values
through the literal-valued relation whose name the question uses ("released" ~ ``release_year``), and keeps the
answers that meet it: a comparison or a date ("after 1990", "more than 500", "in 2008") drops the answers whose
values all fail it, a superlative ("the earliest", "the largest") keeps the answers holding the extreme value.
Answers with no value for the relation are kept behind those that meet the condition: a KG that misses a value
does not rule an answer out. Nothing changes when the question states no condition, when no candidate has a value
for a relation the question names, or when no candidate meets the condition (the condition is then reported, not
applied).

A KG without literal values (most evidence slices, an org chart) has no :class:`ValueIndex`; the rank stage then
skips this step, and :mod:`stem_jax.data.conditions` counts the questions whose conditions could not be applied.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from stem_jax.data.conditions import MONTHS, outside_names

YEAR_RANGE = (1000, 2100)  # a four-digit integer in this range reads as a year
_NUMBER = r"(-?\d[\d,]*(?:\.\d+)?)"
_YEAR = r"(1\d{3}|20\d{2})"
_ISO = re.compile(r"^(\d{4})-(\d{2})(?:-(\d{2}))?")
_PLAIN = re.compile(r"^-?\d[\d,]*(?:\.\d+)?$")
_MONTH_NAMES = MONTHS.split("|")
_MONTH_PREFIXES = frozenset(m[:3] for m in _MONTH_NAMES)

# (pattern over the question's wording outside topic names, what it compares as, operator); the first match wins
_COMPARISONS = (
    (re.compile(rf"\b(?:after|since|later than|from after)\s+(?:the\s+year\s+)?{_YEAR}\b", re.I), "date", ">"),
    (re.compile(rf"\b(?:before|prior to|earlier than|until)\s+(?:the\s+year\s+)?{_YEAR}\b", re.I), "date", "<"),
    (re.compile(rf"\bin\s+(?:the\s+year\s+)?{_YEAR}\b", re.I), "date", "="),
    (re.compile(rf"\bat least\s+{_NUMBER}", re.I), "number", ">="),
    (re.compile(rf"\bat most\s+{_NUMBER}", re.I), "number", "<="),
    (re.compile(rf"\b(?:more|greater|higher|larger|bigger)\s+than\s+{_NUMBER}", re.I), "number", ">"),
    (re.compile(rf"\b(?:over|above)\s+{_NUMBER}", re.I), "number", ">"),
    (re.compile(rf"\b(?:less|fewer|lower|smaller)\s+than\s+{_NUMBER}", re.I), "number", "<"),
    (re.compile(rf"\b(?:under|below)\s+{_NUMBER}", re.I), "number", "<"),
)
_SUPERLATIVES = (
    (re.compile(r"\b(?:earliest|oldest)\b", re.I), "date", "min"),
    (re.compile(r"\b(?:latest|newest|most recent|youngest)\b", re.I), "date", "max"),
    (re.compile(r"\b(?:largest|biggest|highest|greatest|longest|most)\b", re.I), "number", "max"),
    (re.compile(r"\b(?:smallest|lowest|least|fewest|shortest)\b", re.I), "number", "min"),
)
_WORD = re.compile(r"[a-z]+")
_STOP = frozenset("the a an of in on at to for by with and or is was were are be been has have had what which who "
                  "whom when where how that this than more less most least after before year years".split())
STEM_CHARS = 5  # words agree when they share this many first letters ("released" ~ "release_year")


@dataclasses.dataclass(frozen=True)
class ValueCondition:
    """A condition on a value, read from a question's wording.

    Attributes:
      kind: ``date`` (years and dates) or ``number``.
      op: ``>``, ``>=``, ``<``, ``<=``, ``=`` (a date: the same year), ``max`` or ``min`` (a superlative).
      value: the value compared with (a year for a date), None for a superlative.
      words: the wording it was read from.
    """

    kind: str
    op: str
    value: float | None
    words: str

    def holds(self, value: float) -> bool:
        if self.value is None:
            return False
        if self.op == "=":
            return int(value) == int(self.value)
        return {">": value > self.value, ">=": value >= self.value, "<": value < self.value,
                "<=": value <= self.value}[self.op]


def read_condition(question: str, topic_names: Sequence[str] = ()) -> ValueCondition | None:
    """The first value condition the question states outside its topic entities' names, else None."""
    text = outside_names(question, topic_names)
    for pattern, kind, op in _COMPARISONS:
        found = pattern.search(text)
        if found:
            return ValueCondition(kind, op, float(found.group(1).replace(",", "")), found.group(0))
    for pattern, kind, op in _SUPERLATIVES:
        found = pattern.search(text)
        if found:
            return ValueCondition(kind, op, None, found.group(0))
    return None


def read_value(name: str) -> tuple[str, float] | None:
    """(kind, value) of an entity name that is a literal: ``1994`` -> (date, 1994.0), ``1994-06-30`` -> a date
    with the month and day as a fraction of the year, ``March 3, 1994`` likewise, ``12,500`` -> (number,
    12500.0); None for any other name."""
    text = name.strip()
    iso = _ISO.match(text)
    if iso:
        month = int(iso.group(2))
        day = int(iso.group(3) or 1)
        return "date", int(iso.group(1)) + (min(max(month, 1), 12) - 1) / 12 + (min(max(day, 1), 31) - 1) / 372
    words = text.lower().replace(",", " ").split()
    if len(words) in (2, 3) and words[0] in _MONTH_NAMES and words[-1].isdigit() and len(words[-1]) == 4:
        day = int(words[1]) if len(words) == 3 and words[1].isdigit() else 1
        return "date", int(words[-1]) + _MONTH_NAMES.index(words[0]) / 12 + (min(max(day, 1), 31) - 1) / 372
    if _PLAIN.match(text):
        value = float(text.replace(",", ""))
        whole = value.is_integer() and "," not in text and "." not in text
        return ("date" if whole and len(text) == 4 and YEAR_RANGE[0] <= value <= YEAR_RANGE[1] else "number"), value
    return None


def _stems(text: str) -> set[str]:
    return {w[:STEM_CHARS] for w in _WORD.findall(text.lower().replace("_", " ").replace(".", " "))
            if w not in _STOP and len(w) > 2}


class ValueIndex:
    """A KG's literal values: for each entity, the (relation, kind, value) of its literal-valued neighbours."""

    def __init__(self, values: dict[int, list[tuple[int, str, float]]], relations: Sequence[str]) -> None:
        self.values = values
        self.relations = list(relations)
        self._stems = [_stems(r.rsplit(".", 1)[-1]) for r in self.relations]

    @classmethod
    def build(cls, entities: Sequence[str], relations: Sequence[str], triples: np.ndarray) -> ValueIndex | None:
        """The index of a KG (``triples``: [n, 3] head, relation, tail ids); None when no entity is a literal."""
        literal = {i: v for i, name in enumerate(entities) if name[:1].isdigit() or name.startswith("-") or
                   name[:3].lower() in _MONTH_PREFIXES if (v := read_value(name)) is not None}
        if not literal:
            return None
        is_literal = np.zeros(len(entities), bool)
        is_literal[list(literal)] = True
        triples = np.asarray(triples)
        heads, tails = is_literal[triples[:, 0]], is_literal[triples[:, 2]]
        values: dict[int, list[tuple[int, str, float]]] = defaultdict(list)
        # only the triples with exactly one literal end are read (a KG's few thousand, not its millions)
        for head, relation, tail in triples[tails & ~heads].tolist():
            values[head].append((relation, *literal[tail]))
        for head, relation, tail in triples[heads & ~tails].tolist():
            values[tail].append((relation, *literal[head]))
        return cls(dict(values), relations) if values else None

    def relation_for(self, condition: ValueCondition, question: str, candidates: Sequence[int]) -> int | None:
        """The literal-valued relation of ``condition``'s kind that the candidates have and whose name shares the
        most words with the question (at least one); None when there is none."""
        words = _stems(question)
        counts: dict[int, int] = defaultdict(int)
        for entity in candidates:
            for relation in {r for r, kind, _ in self.values.get(entity, ()) if kind == condition.kind}:
                counts[relation] += 1
        best = max(counts, key=lambda r: (len(self._stems[r] & words), counts[r], -r), default=None)
        return best if best is not None and self._stems[best] & words else None

    def apply(self, condition: ValueCondition, question: str, answers: list[tuple[int, float]]
              ) -> tuple[list[tuple[int, float]], dict | None]:
        """``answers`` (entity id, score), best first, with ``condition`` applied, and a note for the record
        (None when nothing was applied)."""
        relation = self.relation_for(condition, question, [a for a, _ in answers])
        if relation is None:
            return answers, None
        valued = {a: [v for r, kind, v in self.values.get(a, ()) if r == relation and kind == condition.kind]
                  for a, _ in answers}
        if condition.op in ("max", "min"):
            present = [v for vs in valued.values() for v in vs]
            if len({*present}) < 2:
                return answers, None
            extreme = max(present) if condition.op == "max" else min(present)
            meets = {a for a, vs in valued.items() if extreme in vs}
        else:
            meets = {a for a, vs in valued.items() if any(condition.holds(v) for v in vs)}
        if not meets:
            return answers, {"words": condition.words, "relation": self.relations[relation], "applied": False}
        fails = {a for a, vs in valued.items() if vs and a not in meets}
        kept = [item for item in answers if item[0] in meets] + [item for item in answers
                                                                 if item[0] not in meets and item[0] not in fails]
        return kept, {"words": condition.words, "relation": self.relations[relation], "applied": True,
                      "dropped": len(fails)}

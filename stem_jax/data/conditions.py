"""Value conditions a question states: dates, comparisons, superlatives and other numbers.

"Which teams in the American League West were founded prior to 1966?" can only be answered exactly where the KG
holds the teams' founding years. Many KGs (an evidence slice such as cwq-e, an org chart) hold no literal values,
and then no schema graph can apply the condition: the engine returns every team of the division. This module
finds such conditions in a question's wording, so that reports can count the questions whose answer depends on a
value, and say whether the KG holds values at all (:func:`literal_share`).

Detection is by wording and deliberately narrow: a number or year inside a topic entity's name ("Super Bowl
XLII", "Poor Richard's Almanac of 1735") is not a condition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december")
# "in 2008", "on 3-21-1975", "03/12/1897", "1795-03-04", "January 1, 1992"
DATE = re.compile(rf"\b(1[0-9]\d\d|20\d\d)\b|\b\d{{1,4}}[-/]\d{{1,2}}[-/]\d{{1,4}}\b|\b({MONTHS})\b", re.I)
COMPARISON = re.compile(
    r"\b(more|less|fewer|greater|higher|lower|larger|smaller|bigger|older|younger|earlier|later|longer|shorter)"
    r"\s+than\b|\b(before|after|prior to|since|until|at least|at most|over|under|above|below)\s+(the\s+)?"
    r"(year\s+|month\s+of\s+)?(\d|" + MONTHS + ")", re.I)
SUPERLATIVE = re.compile(
    r"\b(most|least|largest|smallest|biggest|highest|lowest|earliest|latest|oldest|youngest|longest|shortest|"
    r"greatest|fewest)\b", re.I)
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
KINDS = ("date", "comparison", "superlative", "number")


def outside_names(text: str, names: Iterable[str]) -> str:
    """``text`` with every (case-insensitive) occurrence of ``names`` blanked out."""
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        text = re.sub(re.escape(name), " ", text, flags=re.I)
    return text


def value_conditions(question: str, topic_names: Sequence[str] = ()) -> tuple[str, ...]:
    """The kinds of value condition (:data:`KINDS`, in that order) the question's wording states outside its topic
    entities' names; empty when it states none."""
    text = outside_names(question, topic_names)
    found = []
    if DATE.search(text):
        found.append("date")
    if COMPARISON.search(text):
        found.append("comparison")
    if SUPERLATIVE.search(text):
        found.append("superlative")
    if not found and NUMBER.search(text):
        found.append("number")  # "the ISO number 056", "a length of 112.0 minutes": a value the answer must have
    return tuple(found)


_LITERAL = re.compile(rf"^\s*(-?\d+(?:[.,]\d+)*(?:\s*[a-z%]{{0,3}})?|\d{{4}}-\d{{2}}(-\d{{2}})?.*|({MONTHS})\s+\d.*)\s*$",
                      re.I)


def literal_share(names: Iterable[str]) -> float:
    """The share of KG entity names that read as literal values (numbers, dates): near 0 for a KG that holds no
    values, where no value condition can be applied."""
    total = hits = 0
    for name in names:
        total += 1
        hits += bool(_LITERAL.match(name))
    return hits / total if total else 0.0

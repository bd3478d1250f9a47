"""Answer and retrieval metrics for KGQA evaluation.

Three families live here, plus an aggregator:

1. **RoG-compatible answer metrics** (``rog_*``), a re-implementation of the evaluator of
   Reasoning on Graphs, ``src/qa_prediction/evaluate_results.py`` in
   https://github.com/RManLuo/reasoning-on-graphs (commit 8553f30e). These are the numbers the
   STEM paper and its baselines report as Hit / F1 on WebQSP and CWQ, so they reproduce that
   evaluator's behaviour *including its quirks*, listed below. Use them for comparison with
   published tables, not as a measure of exact answer correctness.
2. **Strict set metrics** (:func:`strict_metrics`): exact matches between normalised entity
   names, over deduplicated sets; a lower bound that none of the RoG quirks inflate.
3. **Graph metrics** from the STEM paper: the evidence-subgraph coverage rate (eq. 17,
   :func:`coverage_rate`) and schema-graph precision / recall / F1 (eqs. 45-47,
   :func:`schema_prf`).
4. :class:`MetricAccumulator` averages per-question metric dicts overall and per group
   (hop count, answer-count bucket, ...) into a JSON-serialisable summary;
   :func:`format_markdown_table` renders that summary.

RoG evaluator semantics and quirks
----------------------------------
Per question, RoG's ``eval_result`` (with its default ``cal_f1=True``, the path
``predict_answer.py`` uses) does:

* a **string** prediction (raw LLM output) is split on ``"\\n"`` into a list; it is *not*
  deduplicated, and empty lines are kept as empty elements (``"A\\n\\nB"`` has 3 elements,
  a trailing newline adds one), which inflates the precision denominator;
* a **list** prediction is passed through ``extract_topk_prediction``: elements are counted,
  deduplicated, stably sorted by descending frequency (ties keep first-occurrence order) and
  cut to the top ``k`` (``k < 0`` or ``k`` larger than the number of distinct elements keeps all;
  ``k == 0`` keeps none). ``top_k`` never applies to string predictions;
* the list is joined with a single space into ``prediction_str``; ``acc`` and ``hit`` are
  computed on that string and ``f1``/``precision``/``recall`` on the list (:func:`rog_eval_f1`).

``normalize`` (:func:`rog_normalize`): lower-case; delete every ASCII ``string.punctuation``
character (deleted, not replaced by a space: ``"U.S."`` -> ``"us"``, ``"Jean-Paul"`` ->
``"jeanpaul"``; non-ASCII punctuation such as ``"–"`` or ``"’"`` survives); replace the whole
words ``a``/``an``/``the`` by a space (after punctuation removal, so ``"the-end"`` ->
``"theend"`` keeps its article); collapse whitespace. RoG also tries to remove ``<pad>``
with ``re.sub(r"\\b(<pad>)\\b", ...)``, but that step runs after ``<`` and ``>`` were
deleted and could never match anyway (``\\b`` before ``<`` needs a preceding word
character), so it is dead code: ``"<pad>"`` normalises to ``"pad"``. We reproduce the
behaviour, not the intent.

``match(prediction, answer)`` (:func:`rog_match`) is a raw **substring** test of the
normalised answer inside the normalised prediction: no word boundaries, so answer ``"1"``
matches prediction ``"1990"`` and ``"Paris"`` matches ``"Parisian"``; it also matches across
list-element boundaries of the joined string (``["New", "York"]`` matches ``"New York"``).
An answer that normalises to the empty string (``"The"``, ``"A"``, ``"?"``) matches every
prediction, including the empty one.

``eval_acc`` (:func:`rog_eval_acc`) is the fraction of gold answers matched (a recall, despite
the name); duplicate gold answers count separately. ``eval_hit`` (:func:`rog_eval_hit`) is 1
if any gold answer matches.

``eval_f1`` (:func:`rog_eval_f1`): an empty prediction *list* gives ``(0, 0, 0)``; otherwise
``matched`` = number of gold answers (duplicates included) that match the space-joined
prediction, ``precision = matched / len(prediction)`` and ``recall = matched / len(answers)``.
Because ``matched`` counts gold answers, not predictions, **precision can exceed 1**:
prediction ``["Barack Obama"]`` against gold ``["Barack Obama", "Obama"]`` has 2 matches for 1
prediction, precision 2.0, recall 1.0 and F1 = 2*2*1/3 = 4/3. Recall never exceeds 1. Note that
an empty *string* prediction is not an empty list: ``"".split("\\n") == [""]`` has length 1,
so it is scored (precision/recall 0 unless some answer normalises to ``""``).

Differences from RoG, all at the edges: RoG returns the int ``0`` in some branches, we always
return floats; with no gold answers RoG dies with ``ZeroDivisionError`` (in ``eval_acc``,
which it always calls) where we raise :class:`ValueError` (skip and count such questions);
RoG's final report multiplies the means by 100, :class:`MetricAccumulator` reports plain
means (:func:`format_markdown_table` scales by 100 by default).

Strict metrics and graph metrics choices are documented on :func:`strict_metrics`,
:func:`coverage_rate` and :func:`schema_prf`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from stem_jax.data.answer_names import normalize_entity, rog_normalize

Triple = tuple[str, str, str]

__all__ = [
    "MetricAccumulator",
    "SplitScorer",
    "answer_count_bucket",
    "coverage_rate",
    "format_markdown_table",
    "normalize_entity",
    "rog_eval_acc",
    "rog_eval_f1",
    "rog_eval_hit",
    "rog_extract_topk",
    "rog_match",
    "rog_normalize",
    "rog_prepare_prediction",
    "rog_question_metrics",
    "schema_prf",
    "strict_metrics",
]

# --------------------------------------------------------------------------------------------
# RoG-compatible answer metrics
# --------------------------------------------------------------------------------------------



def _normalize_joined(names: Sequence[str], normalize: Callable[[str], str] = rog_normalize) -> str:
    """``rog_normalize(" ".join(names))`` from each name's normalisation (names repeat, their joins rarely).

    Every step but the article words, Greek final sigma and whitespace acts per character; a space is neither a
    word character nor cased nor case-ignorable, so no step sees across it and the joined text normalises to its
    parts' non-empty normalisations joined by single spaces (property-tested against the direct call)."""
    return " ".join(filter(None, map(normalize, names)))


def rog_match(prediction: str, answer: str) -> bool:
    """RoG's ``match``: is the normalised ``answer`` a substring of the normalised ``prediction``?"""
    return rog_normalize(answer) in rog_normalize(prediction)


def _require_answers(answers: Sequence[str]) -> None:
    if isinstance(answers, str):
        raise TypeError("answers must be a sequence of strings, not a single string")
    if len(answers) == 0:
        raise ValueError("question has no gold answers; skip it (and count the skip) before scoring")


def rog_eval_acc(prediction: str, answers: Sequence[str]) -> float:
    """RoG's ``eval_acc``: the fraction of gold answers (duplicates counted) matched in ``prediction``.

    Raises:
      ValueError: ``answers`` is empty (RoG divides by zero).
    """
    _require_answers(answers)
    pred = rog_normalize(prediction)
    return sum(rog_normalize(a) in pred for a in answers) / len(answers)


def rog_eval_hit(prediction: str, answers: Sequence[str]) -> float:
    """RoG's ``eval_hit``: 1.0 if any gold answer matches ``prediction``, else 0.0 (also for no answers)."""
    if isinstance(answers, str):
        raise TypeError("answers must be a sequence of strings, not a single string")
    pred = rog_normalize(prediction)
    return 1.0 if any(rog_normalize(a) in pred for a in answers) else 0.0


def rog_eval_f1(prediction: Sequence[str], answers: Sequence[str]) -> tuple[float, float, float]:
    """RoG's ``eval_f1`` over a prediction list: returns ``(f1, precision, recall)``.

    ``matched`` counts gold answers found in the space-joined prediction, so
    ``precision = matched / len(prediction)`` can exceed 1 (see the module docstring).
    An empty prediction list scores ``(0.0, 0.0, 0.0)`` whatever the answers.

    Raises:
      ValueError: ``prediction`` is non-empty and ``answers`` is empty (RoG divides by zero).
    """
    if isinstance(prediction, str):
        raise TypeError("prediction must be a list of strings; use rog_prepare_prediction for raw text")
    if len(prediction) == 0:
        return 0.0, 0.0, 0.0
    _require_answers(answers)
    return _f1_of_matched(_matched(_normalize_joined(prediction), answers), len(prediction), len(answers))


def _matched(normalised_prediction: str, answers: Sequence[str], normalize: Callable[[str], str] = rog_normalize) -> int:
    """How many gold answers (duplicates counted) RoG's ``match`` finds in the normalised prediction."""
    return sum(map(normalised_prediction.__contains__, map(normalize, answers)))


def _f1_of_matched(matched: int, n_predictions: int, n_answers: int) -> tuple[float, float, float]:
    precision = matched / n_predictions
    recall = matched / n_answers
    if precision + recall == 0:
        return 0.0, precision, recall
    return 2 * precision * recall / (precision + recall), precision, recall


def rog_extract_topk(prediction: Sequence[str], k: int = -1) -> list[str]:
    """RoG's ``extract_topk_prediction``: distinct elements by descending count, first ``k``.

    Ties keep first-occurrence order (Python's sort is stable); ``k < 0`` or ``k`` above the
    number of distinct elements keeps them all, ``k == 0`` keeps none.
    """
    distinct = dict.fromkeys(prediction)
    if len(distinct) == len(prediction):  # every count 1 (one name per answer entity): the stable sort keeps the order
        ranked = list(distinct)
    else:
        counts = Counter(prediction)  # insertion-ordered, like RoG's dict
        ranked = sorted(counts, key=lambda p: counts[p], reverse=True)
    if k < 0 or k > len(ranked):
        k = len(ranked)
    return ranked[:k]


def rog_prepare_prediction(prediction: str | Sequence[str], topk: int = -1) -> list[str]:
    """Turn a stored prediction into RoG's prediction list.

    A string is split on ``"\\n"`` (no dedup, empty lines kept, ``topk`` ignored); a list goes
    through :func:`rog_extract_topk`.
    """
    if isinstance(prediction, str):
        return prediction.split("\n")
    return rog_extract_topk(list(prediction), topk)


def rog_question_metrics(
    prediction: str | Sequence[str], answers: Sequence[str], topk: int = -1
) -> dict[str, float]:
    """All RoG metrics for one question, as ``eval_result(cal_f1=True, topk=topk)`` computes them.

    Returns a dict with keys ``rog_acc``, ``rog_hit``, ``rog_f1``, ``rog_precision``,
    ``rog_recall`` (plain proportions; RoG's report multiplies the means by 100).

    Raises:
      ValueError: ``answers`` is empty.
    """
    return _rog_question_metrics(prediction, answers, topk, rog_normalize)


def _rog_question_metrics(prediction: str | Sequence[str], answers: Sequence[str], topk: int,
                          normalize: Callable[[str], str]) -> dict[str, float]:
    _require_answers(answers)
    pred_list = rog_prepare_prediction(prediction, topk)
    # acc, hit and f1 all match the answers against the one joined prediction: normalise and match it once
    matched = _matched(_normalize_joined(pred_list, normalize), answers, normalize)
    f1, precision, recall = _f1_of_matched(matched, len(pred_list), len(answers)) if pred_list else (0.0, 0.0, 0.0)
    return {
        "rog_acc": matched / len(answers),
        "rog_hit": 1.0 if matched else 0.0,
        "rog_f1": f1,
        "rog_precision": precision,
        "rog_recall": recall,
    }


# --------------------------------------------------------------------------------------------
# Strict set metrics
# --------------------------------------------------------------------------------------------


def _normalised_unique(names: Iterable[str], normalize: Callable[[str], str]) -> dict[str, None]:
    seen = dict.fromkeys(map(normalize, names))  # first occurrences, in order
    seen.pop("", None)
    return seen


def strict_metrics(ranked_predictions: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
    """Exact-match metrics between normalised predicted and gold entity names.

    Both sides are normalised with :func:`normalize_entity`, empty (all-whitespace) names dropped
    and duplicates removed (predictions keep their first-occurrence rank). With ``P`` the prediction set and
    ``G`` the gold set:

    * ``hit_at_1``: 1.0 if the top-ranked prediction is in ``G``;
    * ``hit``: 1.0 if any prediction is in ``G``;
    * ``precision`` = ``|P & G| / |P|``, ``recall`` = ``|P & G| / |G|``, ``f1`` their harmonic mean.

    No predictions (or only empty ones): every metric is 0.0.

    Raises:
      ValueError: no gold answers remain (the caller must skip such questions and count them).
    """
    return _strict_metrics(ranked_predictions, answers, normalize_entity)


def _strict_metrics(ranked_predictions: Sequence[str], answers: Sequence[str],
                    normalize: Callable[[str], str]) -> dict[str, float]:
    if isinstance(ranked_predictions, str) or isinstance(answers, str):
        raise TypeError("ranked_predictions and answers must be sequences of strings, not strings")
    gold = _normalised_unique(answers, normalize)
    if not gold:
        raise ValueError("question has no gold answers; skip it (and count the skip) before scoring")
    preds = list(_normalised_unique(ranked_predictions, normalize))
    if not preds:
        return {"hit_at_1": 0.0, "hit": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    correct = sum(map(gold.__contains__, preds))
    precision = correct / len(preds)
    recall = correct / len(gold)
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {
        "hit_at_1": 1.0 if preds[0] in gold else 0.0,
        "hit": 1.0 if correct else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


class _Memo(dict):
    """``function(key)`` by key, each computed once: a plain dict lookup when it repeats."""

    def __init__(self, function: Callable[[str], str]) -> None:
        super().__init__()
        self.function = function

    def __missing__(self, key: str) -> str:
        value = self[key] = self.function(key)
        return value


class SplitScorer:
    """:func:`strict_metrics` and :func:`rog_question_metrics` of many questions, each distinct name normalised
    once per scorer: a split's answers and predictions repeat (MetaQA test: 587k names, 32k distinct), and a
    dict lookup is cheaper than the shared LRU caches' bookkeeping. Same values as the functions."""

    def __init__(self) -> None:
        self._rog = _Memo(rog_normalize).__getitem__
        self._entity = _Memo(normalize_entity).__getitem__

    def strict_metrics(self, ranked_predictions: Sequence[str], answers: Sequence[str]) -> dict[str, float]:
        return _strict_metrics(ranked_predictions, answers, self._entity)

    def rog_question_metrics(self, prediction: str | Sequence[str], answers: Sequence[str],
                             topk: int = -1) -> dict[str, float]:
        return _rog_question_metrics(prediction, answers, topk, self._rog)


# --------------------------------------------------------------------------------------------
# Graph metrics (STEM paper eqs. 17 and 45-47)
# --------------------------------------------------------------------------------------------


def _triple_set(triples: Iterable[Sequence[str]], undirected: bool) -> set[Triple]:
    out: set[Triple] = set()
    for triple in triples:
        if len(triple) != 3:
            raise ValueError(f"expected (head, relation, tail) triples, got {triple!r}")
        h, r, t = triple
        if undirected and t < h:
            h, t = t, h
        out.add((h, r, t))
    return out


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _f1(precision: float, recall: float) -> float:
    return _ratio(2 * precision * recall, precision + recall)


def coverage_rate(
    gold_path_triples: Iterable[Sequence[str]],
    evidence_triples: Iterable[Sequence[str]],
    *,
    undirected: bool = False,
) -> float:
    """Coverage rate ``|R & G_reason| / |R|`` (STEM paper eq. 17).

    ``R`` is the set of ground-truth reasoning-path triples and ``G_reason`` the retrieved
    evidence subgraph, both compared as *sets* of ``(head, relation, tail)`` string triples
    (duplicates collapse). By default triples match exactly; ``undirected=True`` also accepts
    ``(t, r, h)`` for ``(h, r, t)``, by canonicalising each triple to ``(min(h, t), r, max(h, t))``
    on both sides (so a gold path listing one edge in both directions counts it once).

    Returns 0.0 when ``R`` is empty; callers should skip (and count) such questions rather
    than average the 0.0 in.
    """
    gold = _triple_set(gold_path_triples, undirected)
    evidence = _triple_set(evidence_triples, undirected)
    return _ratio(len(gold & evidence), len(gold))


def schema_prf(
    gold_triples: Iterable[Sequence[str]],
    schema_triples: Iterable[Sequence[str]],
    *,
    relation_only: bool = False,
    undirected: bool = False,
) -> dict[str, float]:
    """Schema-graph precision, recall and F1 (STEM paper eqs. 45-47).

    ``P = |R & G_sch| / |G_sch|``, ``R = |R & G_sch| / |R|``, ``F1 = 2PR / (P + R)``, with ``R``
    the gold reasoning-path triples and ``G_sch`` the generated schema-graph triples.

    * Default (``relation_only=False``): both sides are sets of triples compared exactly
      (``undirected=True`` canonicalises direction as in :func:`coverage_rate`). Only useful when
      both sides name nodes the same way: placeholders such as ``"[ENT1]"`` never equal KG names.
    * ``relation_only=True``: placeholder names are arbitrary, so compare only relations. Each
      side is first deduplicated as a set of triples, then reduced to the *multiset* of its
      relation names (direction is ignored, since heads and tails are dropped); the
      intersection size is the sum over relations of the smaller count. A relation used twice
      in the gold path must appear twice in the schema to be fully recalled. ``undirected`` is
      irrelevant in this mode.

    Zero denominators give 0.0 (empty schema -> P = 0; empty gold -> R = 0; P = R = 0 -> F1 = 0).
    """
    gold = _triple_set(gold_triples, undirected)
    schema = _triple_set(schema_triples, undirected)
    if relation_only:
        gold_rel = Counter(r for _, r, _ in gold)
        schema_rel = Counter(r for _, r, _ in schema)
        common = sum((gold_rel & schema_rel).values())
    else:
        common = len(gold & schema)
    precision = _ratio(common, len(schema))
    recall = _ratio(common, len(gold))
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall)}


# --------------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------------


def answer_count_bucket(n_answers: int) -> str:
    """The answer-count groups of the paper's per-#answers table: ``"1"``, ``"2-4"``, ``"5-9"``, ``">=10"``.

    Raises:
      ValueError: ``n_answers < 1`` (questions without answers are skipped, not bucketed).
    """
    if n_answers < 1:
        raise ValueError(f"n_answers must be >= 1, got {n_answers}")
    if n_answers == 1:
        return "1"
    if n_answers <= 4:
        return "2-4"
    if n_answers <= 9:
        return "5-9"
    return ">=10"


class _Stats:
    __slots__ = ("n", "skipped", "sums", "counts")

    def __init__(self) -> None:
        self.n = 0
        self.skipped: Counter[str] = Counter()
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: Mapping[str, float]) -> None:
        self.n += 1
        sums, counts = self.sums, self.counts
        for name, value in metrics.items():
            if name in sums:  # added in question order: the same float sums as one running total each
                sums[name] += value
                counts[name] += 1
            else:
                sums[name] = 0.0 + value
                counts[name] = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": {k: self.sums[k] / self.counts[k] for k in self.sums},
            "count": dict(self.counts),
            "skipped": dict(sorted(self.skipped.items())),
        }


def _group_sort_key(key: str) -> tuple[int, float, str]:
    try:
        number = float(key)
    except ValueError:
        return (1, 0.0, key)
    if math.isnan(number):
        return (1, 0.0, key)
    return (0, number, key)


class MetricAccumulator:
    """Averages per-question metric dicts, overall and per group.

    Example::

        acc = MetricAccumulator(group_name="hop")
        acc.add(strict_metrics(preds, answers) | rog_question_metrics(text, answers), group=q.hops)
        acc.skip("no gold answers", group=q.hops)
        summary = acc.summary()          # JSON-serialisable
        print(format_markdown_table(summary))

    Each metric is averaged over the questions that reported it, so dicts may carry different
    keys (e.g. coverage only where a gold path exists); the per-metric ``count`` says how many.
    Group keys are stored as ``str(group)`` (so ``2`` and ``"2"`` are one group); groups whose
    names parse as numbers come first, in numeric order, then the rest alphabetically.
    """

    def __init__(self, group_name: str = "group") -> None:
        self.group_name = group_name
        self._overall = _Stats()
        self._groups: dict[str, _Stats] = {}

    def _group(self, group: Hashable | None) -> _Stats | None:
        if group is None:
            return None
        key = str(group)
        if key not in self._groups:
            self._groups[key] = _Stats()
        return self._groups[key]

    def add(self, metrics: Mapping[str, float], group: Hashable | None = None) -> None:
        """Add one question's metrics (numbers; bools count as 0/1), optionally under ``group``."""
        clean: dict[str, float] = {}
        for name, value in metrics.items():
            if type(value) is float and type(name) is str and value - value == 0.0:  # a finite float: as below
                clean[name] = value
                continue
            if not isinstance(name, str):
                raise TypeError(f"metric names must be strings, got {name!r}")
            if not isinstance(value, int | float):
                raise TypeError(f"metric {name!r} must be a number, got {type(value).__name__}")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"metric {name!r} is not finite: {value}")
            clean[name] = value
        self._overall.add(clean)
        stats = self._group(group)
        if stats is not None:
            stats.add(clean)

    def skip(self, reason: str, group: Hashable | None = None) -> None:
        """Count a question that was not scored, by reason (and group)."""
        self._overall.skipped[reason] += 1
        stats = self._group(group)
        if stats is not None:
            stats.skipped[reason] += 1

    def summary(self) -> dict[str, Any]:
        """``{"group_name", "overall", "groups"}``; each entry has ``n``, ``mean``, ``count``, ``skipped``."""
        groups = sorted(self._groups, key=_group_sort_key)
        return {
            "group_name": self.group_name,
            "overall": self._overall.to_json(),
            "groups": {g: self._groups[g].to_json() for g in groups},
        }


def format_markdown_table(
    summary: Mapping[str, Any],
    metrics: Sequence[str] | None = None,
    *,
    scale: float = 100.0,
    digits: int = 2,
) -> str:
    """Render :meth:`MetricAccumulator.summary` as a Markdown table, one row per group then ``all``.

    Args:
      summary: the accumulator's summary.
      metrics: columns to show, in order; default all metrics seen, in first-seen order.
      scale: multiplier for means (100 gives percentages, as RoG and the paper report).
      digits: decimals shown. A metric a group never reported shows ``-``.
    A ``skipped`` column is added when any question was skipped.
    """
    overall = summary["overall"]
    groups: Mapping[str, Any] = summary.get("groups", {})
    if metrics is None:
        metrics = list(overall["mean"])
    rows = [(str(name), stats) for name, stats in groups.items()] + [("all", overall)]
    show_skipped = bool(overall.get("skipped"))
    header = [str(summary.get("group_name", "group")), "n", *metrics]
    if show_skipped:
        header.append("skipped")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for name, stats in rows:
        cells = [name, str(stats["n"])]
        for metric in metrics:
            mean = stats["mean"].get(metric)
            cells.append("-" if mean is None else f"{mean * scale:.{digits}f}")
        if show_skipped:
            cells.append(str(sum(stats.get("skipped", {}).values())))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

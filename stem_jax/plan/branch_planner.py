"""Schema graphs for natural questions: a main relation path plus a learned constraint branch per other topic.

The path planner (:mod:`stem_jax.plan.path_ranker`) plans a relation path from a question's first topic entity. A
question with several topic entities ("what movie featuring Logan Lerman had Candice White as a crew member") states
one more condition per extra entity. :class:`BranchPlanner` wraps any planner: for each schema graph in its beam that
is a chain from a topic, and each other topic entity of the question, it lists the branches that really meet the
chain's answers in the KG (:func:`~stem_jax.plan.branches.branch_options`: 1-2 steps through mediators, either
direction, ending at one of the chain's answers or at a mediator node on the chain, and narrowing its answers), scores each with a small learned model
(:class:`BranchModel`) and attaches the best one when its probability reaches the model's threshold; when none
fits, the branch is dropped and the chain stays as it was. The result is a :class:`SchemaGraph` tree over several
question entities, which the pipeline traces from one of them and prunes to the bindings that reach the others.

The model is trained from training questions' answers only (no gold paths needed): for a main path that reaches a
gold answer, a branch is positive when it raises the answer set's F1 (it keeps gold answers and removes others).
Its threshold is chosen, and the model kept at all, on questions its fitted weights did not see (training folds in
turn, and the held-out questions): attaching must raise their mean answer F1.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.atomic import write_text_atomic
from stem_jax.data.answer_names import gold_entities
from stem_jax.data.linker import EntityLinker
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.kg.mediators import mediator_mask
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.branches import MediatorBranch, branch_options, schema_with_branches, set_f1
from stem_jax.plan.question_text import mask_topics, topic_names
from stem_jax.plan.relation_paths import CandidatePath, PathCatalog
from stem_jax.plan.schema_paths import chain_path

BRANCHES_FOLDER = "branches"
MODEL_FILE = "branch-model.json"
# what a branch model reads; the bias column is last. "log_found" (how many branches meet the main path's answers
# from this entity) and "cos_gap" (how far the branch's relations sit below the best-matching branch's, in mean
# cosine to the question) give the model each branch's alternatives: a branch is the question's condition less
# often when many others meet the answers as well or better.
FEATURES = ("mean_cos", "max_cos", "kept_share", "log_kept", "log_candidates", "two_steps", "mention", "log_found",
            "cos_gap", "at_mediator", "bias")
FEATURES_V1 = ("mean_cos", "max_cos", "kept_share", "log_kept", "log_candidates", "two_steps", "mention", "bias")
THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
FOLDS = 5  # threshold chosen by cross-validation over the training questions' folds and the held-out ones
MIN_QUESTIONS = 20  # training questions with a second topic below which no model is trained
LINKED_TEXTS = 4096  # question texts whose entity mentions a planner keeps
MAIN_PATHS = 3  # main paths per training question (the ones with the best answer F1), as a planner's beam offers


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # the logistic function, without overflow for large |z|


def _mediators(catalog: PathCatalog, names: dict[str, str] | None) -> np.ndarray:
    """The catalog's mediator mask, else the KG's (training and planning read the same one)."""
    return catalog.mediators if catalog.mediators is not None else mediator_mask(catalog.index.entities, names)


@dataclasses.dataclass(frozen=True)
class BranchModel:
    """Logistic regression over :data:`FEATURES`: P(the branch narrows the main path's answers toward the gold)."""

    weights: tuple[float, ...]
    threshold: float = 0.5
    # the threshold for branches from entities the question mentions that are not its topic entities; None: such
    # branches did not raise held-out F1 and are never attached
    mention_threshold: float | None = None
    report: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)
    # the feature names the weights read, a subset of FEATURES in its order (a model trained before features were
    # added reads the ones it was trained on)
    features: tuple[str, ...] = FEATURES

    def __post_init__(self) -> None:
        if unknown := [f for f in self.features if f not in FEATURES]:
            raise ValueError(f"unknown branch features {unknown}; known: {list(FEATURES)}")
        if len(self.weights) != len(self.features):
            raise ValueError(f"{len(self.weights)} weights for {len(self.features)} features")

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """P(useful) of each row of ``features`` ([k, len(FEATURES)], the columns of :data:`FEATURES`)."""
        columns = [FEATURES.index(f) for f in self.features]
        return _sigmoid(np.asarray(features, np.float64)[:, columns] @ np.asarray(self.weights, np.float64))

    def save(self, folder: Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_text_atomic(Path(folder) / MODEL_FILE, json.dumps(
            {"kind": "branch-model", "features": list(self.features), "weights": list(self.weights),
             "threshold": self.threshold, "mention_threshold": self.mention_threshold, "report": self.report},
            indent=1))

    @classmethod
    def load(cls, folder: Path) -> BranchModel:
        path = Path(folder) / MODEL_FILE
        try:
            meta = json.loads(path.read_text())
            mention = meta.get("mention_threshold")
            return cls(tuple(float(w) for w in meta["weights"]), float(meta["threshold"]),
                       None if mention is None else float(mention), meta.get("report", {}),
                       tuple(meta.get("features", FEATURES_V1)))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise StemError(f"{path}: damaged branch model ({err})\n  how to fix: retrain with `stem-jax "
                            "train-planner`, or delete the folder to plan without branches") from None


class BranchFeatures:
    """The :data:`FEATURES` of (question, main-path answers, branch), with relation and question embeddings kept."""

    def __init__(self, index: KGIndex, embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None) -> None:
        self.index = index
        self.embed = embed
        self.names = names or {}
        self._relations: dict[str, np.ndarray] = {}
        self._questions: dict[str, np.ndarray] = {}

    @staticmethod
    def _unit(rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)

    def question(self, question: Question) -> np.ndarray:
        if question.text not in self._questions:
            self.questions([question])
        return self._questions[question.text]

    def questions(self, questions: Sequence[Question]) -> None:
        """Embed the topic-masked texts of ``questions`` not embedded yet, in one encoder call."""
        missing = list({q.text: q for q in questions if q.text not in self._questions}.values())
        if missing:
            masked = [mask_topics(q.text, topic_names(q, self.names))[0] for q in missing]
            for question, row in zip(missing, self._unit(self.embed(masked)), strict=True):
                self._questions[question.text] = row

    def prepare(self, relations: set[str]) -> None:
        missing = sorted(r for r in relations if r not in self._relations)
        if missing:
            for relation, row in zip(missing, self._unit(self.embed([relation_text(r) for r in missing])), strict=True):
                self._relations[relation] = row

    def __call__(self, question: np.ndarray, candidates: int, branches: Sequence[CandidatePath],
                 mention: bool = False) -> np.ndarray:
        self.prepare({s.relation for b in branches for s in b.path})
        rows = np.zeros((len(branches), len(FEATURES)), np.float32)
        for i, branch in enumerate(branches):
            cos = [float(question @ self._relations[s.relation]) for s in branch.path]
            rows[i] = (np.mean(cos), max(cos), len(branch.ends) / max(candidates, 1), np.log1p(len(branch.ends)),
                       np.log1p(candidates), float(len(branch.path) == 2), float(mention), np.log(len(branches)),
                       0.0, float(isinstance(branch, MediatorBranch)), 1.0)
        if len(branches):
            rows[:, FEATURES.index("cos_gap")] = rows[:, 0].max() - rows[:, 0]
        return rows


def _topic_ids(question: Question, index: KGIndex) -> list[int]:
    return list(dict.fromkeys(index.entity_ids[t] for t in question.topic_entities if t in index.entity_ids))


class TextLinks:
    """A KG's entity linker and its mentions of the latest texts (:meth:`EntityLinker.mentions
    <stem_jax.data.linker.EntityLinker.mentions>`): a text asked again, as a served question often is, is not linked
    again. Bounded to :data:`LINKED_TEXTS` texts, least recently asked first out; safe to share between threads."""

    _lock = threading.Lock()  # one for every memo, held only while one is read or updated, never while linking

    def __init__(self, index: KGIndex, names: dict[str, str] | None) -> None:
        self.linker = EntityLinker.from_index(index, names or None)
        self._links: OrderedDict[str, list] = OrderedDict()

    def links(self, text: str) -> list:
        """The linker's mentions in ``text``, kept for the latest :data:`LINKED_TEXTS` texts."""
        with self._lock:
            found = self._links.get(text)
            if found is not None:
                self._links.move_to_end(text)
                return found
        found = list(self.linker.mentions(text))  # linking reads the linker's tables only
        with self._lock:
            self._links[text] = found
            while len(self._links) > LINKED_TEXTS:
                self._links.popitem(last=False)
        return found


# (the KG index, its names, their TextLinks) of each KG opened in this process; an index is held weakly (it is not
# hashable, so the few entries are searched by identity), and the entries of a dropped one go on the next lookup
_TEXT_LINKS: list[tuple[weakref.ref, Any, TextLinks]] = []
_TEXT_LINKS_LOCK = threading.Lock()


def text_links(index: KGIndex, names: dict[str, str] | None) -> TextLinks:
    """The one :class:`TextLinks` of ``index`` with the display names ``names`` (the same dict object, or both
    empty): the constraint branches of the path planner and the answer scorer's mention features link a question's
    text once between them, with one linker."""
    names = names or None
    with _TEXT_LINKS_LOCK:
        _TEXT_LINKS[:] = [entry for entry in _TEXT_LINKS if entry[0]() is not None]
        for ref, known, links in _TEXT_LINKS:
            if ref() is index and known is names:
                return links
        links = TextLinks(index, names)
        _TEXT_LINKS.append((weakref.ref(index), names, links))
        return links


class Mentions(TextLinks):
    """The entities a question's text mentions besides its topic entities (:meth:`EntityLinker.mentions
    <stem_jax.data.linker.EntityLinker.mentions>`), mediators and mentions inside a topic's name left out. The linker
    and its kept mentions are the KG's shared ones (:func:`text_links`)."""

    def __init__(self, index: KGIndex, names: dict[str, str] | None, mediators: np.ndarray) -> None:
        self.index = index
        self.names = names or {}
        self.mediators = mediators
        shared = text_links(index, names)
        self.linker, self._links = shared.linker, shared._links

    def __call__(self, question: Question) -> list[int]:
        topics = set(_topic_ids(question, self.index))
        covered = [t.lower() for t in topic_names(question, self.names)]
        found = []
        for link in self.links(question.text):
            entity = self.index.entity_ids.get(link.entity, -1)
            if entity < 0 or entity in topics or self.mediators[entity] or entity in found:
                continue
            if any(link.mention.lower() in name for name in covered):
                continue
            found.append(entity)
        return found


@dataclasses.dataclass(frozen=True)
class BranchExample:
    """One (question, main path, other anchor) of training: the branches that meet the main path's answers."""

    rows: np.ndarray  # [k, len(FEATURES)]
    f1s: list[float]  # each branch's answer F1 after narrowing
    base: float  # the main path's answer F1 alone
    mention: bool  # the anchor is an entity the text mentions, not a topic entity
    question: int  # position of its question in the list given (folds keep a question's examples together)


def _examples(questions: Sequence[Question], golds: Sequence[set[int]], catalog: PathCatalog,
              features: BranchFeatures, mentions: Mentions | None = None) -> list[BranchExample]:
    out = []
    for position, (question, gold) in enumerate(zip(questions, golds, strict=True)):
        topics = _topic_ids(question, catalog.index)
        extra = mentions(question) if mentions is not None and topics else []
        if len(topics) + len(extra) < 2 or not gold:
            continue
        goal = np.asarray(sorted(gold), np.int64)
        mains = [(set_f1(p.ends.astype(np.int64), goal), p) for p in catalog.paths(topics[0])]
        mains = sorted([m for m in mains if m[0] > 0], key=lambda m: -m[0])[:MAIN_PATHS]
        qvec = features.question(question)
        for f1, main in mains:
            for other, is_mention in [*((t, False) for t in topics[1:]), *((m, True) for m in extra)]:
                found = branch_options(catalog, topics[0], main.path, other, main.ends)
                if found:
                    out.append(BranchExample(features(qvec, len(main.ends), found, is_mention),
                                             [set_f1(b.ends.astype(np.int64), goal) for b in found], f1,
                                             is_mention, position))
    return out


def _fit(rows: np.ndarray, labels: np.ndarray, steps: int = 500, lr: float = 0.5, l2: float = 1e-3) -> np.ndarray:
    """Logistic regression by full-batch gradient descent on standardised columns (the bias column kept as is)."""
    mean = rows[:, :-1].mean(0)
    std = rows[:, :-1].std(0) + 1e-6
    x = np.concatenate([(rows[:, :-1] - mean) / std, rows[:, -1:]], axis=1).astype(np.float64)
    w = np.zeros(x.shape[1])
    balance = np.where(labels > 0, 0.5 / max(labels.mean(), 1e-6), 0.5 / max(1 - labels.mean(), 1e-6))
    for _ in range(steps):
        p = _sigmoid(x @ w)
        w -= lr * (x.T @ ((p - labels) * balance) / len(x) + l2 * w)
    # fold the standardisation into the weights, so the stored model reads raw features
    raw = np.zeros_like(w)
    raw[:-1] = w[:-1] / std
    raw[-1] = w[-1] - float(np.sum(w[:-1] * mean / std))
    return raw


def _fit_examples(examples: Sequence[BranchExample], best_only: bool = False) -> np.ndarray:
    """Weights over :data:`FEATURES`: a branch is positive when it raises its main path's answer F1 (``best_only``:
    and no other branch of its example gives a higher F1, so the model learns which branch to attach, not only
    which ones help)."""
    rows = np.concatenate([e.rows for e in examples])
    labels = []
    for e in examples:
        f1s = np.asarray(e.f1s)
        raises = f1s > e.base + 1e-9
        labels.append(raises & (f1s >= f1s.max() - 1e-9) if best_only else raises)
    return _fit(rows, np.concatenate(labels).astype(np.float64))


def _gains(weights: np.ndarray, examples: Sequence[BranchExample]) -> dict[float, float]:
    """Per threshold, the summed F1 change over ``examples`` when the best branch at or above it is attached."""
    out = dict.fromkeys(THRESHOLDS, 0.0)
    for e in examples:
        p = _sigmoid(e.rows.astype(np.float64) @ weights)
        best = int(np.argmax(p))
        for t in THRESHOLDS:
            if p[best] >= t:
                out[t] += e.f1s[best] - e.base
    return out


def _out_of_fold_gains(examples: Sequence[BranchExample], held: Sequence[BranchExample], weights: np.ndarray,
                       folds: int = FOLDS, best_only: bool = False) -> dict[bool, dict[float, float]]:
    """Per kind of anchor (mention or not) and threshold, the mean F1 change on examples no fitted model saw: each
    training fold scored by a model fitted on the other folds, the held-out questions by ``weights`` (the model
    fitted on all of ``examples``)."""
    totals = {kind: dict.fromkeys(THRESHOLDS, 0.0) for kind in (False, True)}
    counts = dict.fromkeys((False, True), 0)
    scored = [(weights, list(held))]
    for fold in range(folds):
        fitting = [e for e in examples if e.question % folds != fold]
        scoring = [e for e in examples if e.question % folds == fold]
        if scoring and any(not e.mention for e in fitting):
            scored.append((_fit_examples(fitting, best_only), scoring))
    for weights, scoring in scored:
        for kind in (False, True):
            chosen = [e for e in scoring if e.mention == kind]
            counts[kind] += len(chosen)
            for t, gain in _gains(weights, chosen).items():
                totals[kind][t] += gain
    return {kind: {t: g / max(counts[kind], 1) for t, g in totals[kind].items()} for kind in (False, True)}


def branch_examples(train: Sequence[Question], held: Sequence[Question], index: KGIndex, catalog: PathCatalog,
                    embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None,
                    ) -> tuple[list[BranchExample], list[BranchExample]]:
    """The :class:`BranchExample` lists of ``train`` and ``held``: for each question that names a second entity (a
    topic, or one its text mentions), the branches that meet a main path's answers, with the answer F1 each gives.
    ``embed`` embeds the masked questions and the relation texts."""
    features = BranchFeatures(index, embed, names)
    mentions = Mentions(index, names, _mediators(catalog, names))
    features.questions([q for q in [*train, *held] if q.topic_entities])
    return tuple(_examples(qs, gold_entities(qs, index.entities, names), catalog, features, mentions)
                 for qs in (train, held))  # type: ignore[return-value]


def fit_branch_model(examples: Sequence[BranchExample], held_examples: Sequence[BranchExample], *,
                     best_only: bool = False, report: dict[str, Any] | None = None,
                     log: Callable[[str], None] = print) -> BranchModel | None:
    """A :class:`BranchModel` fitted on ``examples``; None when too few of them come from a second topic, or when no
    threshold raises answer F1 out of fold. The thresholds (one for topic entities, one for entities the text
    mentions) are chosen on the mean F1 change over every example no fitted model saw: ``examples``, fold by fold
    (:data:`FOLDS`), and ``held_examples``; so a threshold is chosen on about ten times as many main paths as the
    held-out ones alone offer. ``best_only``: see :func:`_fit_examples`; ``report``: more keys for the model's."""
    held_topics = [e for e in held_examples if not e.mention]
    train_topics = sum(not e.mention for e in examples)
    if train_topics < MIN_QUESTIONS or not held_topics:
        log(f"branch model: not trained ({train_topics} training and {len(held_topics)} held-out main paths with "
            f"another topic entity's branch, {MIN_QUESTIONS} and 1 needed)")
        return None
    weights = _fit_examples(examples, best_only)
    gains = _out_of_fold_gains(examples, held_examples, weights, best_only=best_only)
    threshold = max(THRESHOLDS, key=lambda t: (gains[False][t], t))
    mention_threshold = max(THRESHOLDS, key=lambda t: (gains[True][t], t))
    labels = np.concatenate([np.asarray(e.f1s) > e.base + 1e-9 for e in examples])
    report = {**(report or {}), "train_main_paths": len(examples), "held_out_main_paths": len(held_topics),
              "held_out_mention_main_paths": len(held_examples) - len(held_topics),
              "positive_share": float(labels.mean()), "folds": FOLDS,
              "out_of_fold_f1_gain": {str(t): g for t, g in gains[False].items()},
              "out_of_fold_mention_f1_gain": {str(t): g for t, g in gains[True].items()}}
    if gains[False][threshold] <= 0:
        log(f"branch model: not kept (no threshold raises answer F1 out of fold: {gains[False]})")
        return None
    keep_mentions = any(e.mention for e in [*examples, *held_examples]) and gains[True][mention_threshold] > 0
    log(f"branch model: threshold {threshold}, answer F1 +{gains[False][threshold]:.3f} per main path with a "
        "second topic, out of fold; mentioned entities' branches "
        + (f"at threshold {mention_threshold}, +{gains[True][mention_threshold]:.3f}" if keep_mentions
           else "not used"))
    return BranchModel(tuple(float(w) for w in weights), threshold, mention_threshold if keep_mentions else None,
                       report)


def train_branch_model(train: Sequence[Question], held: Sequence[Question], index: KGIndex, catalog: PathCatalog,
                       embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None, *,
                       log: Callable[[str], None] = print) -> BranchModel | None:
    """A :class:`BranchModel` from ``train``'s answers (:func:`branch_examples`, :func:`fit_branch_model`), its
    thresholds also chosen on ``held``'s."""
    examples, held_examples = branch_examples(train, held, index, catalog, embed, names)
    return fit_branch_model(examples, held_examples, log=log)


class BranchPlanner:
    """Wraps a batch planner: attaches to each chain in its beam the best-scoring branch of each other topic."""

    def __init__(self, base: Any, model: BranchModel, index: KGIndex, catalog: PathCatalog,
                 embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None = None) -> None:
        self.base = base
        self.model = model
        self.index = index
        self.catalog = catalog
        self.names = names or {}
        self.features = BranchFeatures(index, embed, names)
        self.mentions = (Mentions(index, names, _mediators(catalog, names))
                         if model.mention_threshold is not None else None)
        self.name = f"{getattr(base, 'name', 'planner')}+branches"
        self.stats: Counter = Counter()

    def __getattr__(self, name: str) -> Any:  # the wrapped planner's report, templates, ... stay reachable
        if name in ("base", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.base, name)

    def display(self, entity: int) -> str:
        key = self.index.entities[entity]
        return self.names.get(key, key)

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        beams = self.base.plan_batch(questions)
        self.features.questions([q for q in questions if q.topic_entities])
        return [self._branch(q, beam) for q, beam in zip(questions, beams, strict=True)]

    def plan(self, question: Question, index: KGIndex | None = None) -> list[Any]:
        return [entry.schema for entry in self.plan_batch([question])[0]]

    def _branch(self, question: Question, beam: list[ScoredSchema]) -> list[ScoredSchema]:
        topics = _topic_ids(question, self.index)
        extra = self.mentions(question) if self.mentions is not None and topics else []
        if len(topics) + len(extra) < 2:
            return beam
        out = []
        qvec = self.features.question(question)
        for entry in beam:
            path = chain_path(entry.schema)
            constant = entry.schema.constants()[0] if path is not None else None
            main = next((t for t in topics if constant in (self.index.entities[t], self.display(t))), None)
            ends = next((c.ends for c in self.catalog.paths(main) if c.path == path), None) if main is not None \
                else None
            if ends is None:
                out.append(entry)
                continue
            branches = []
            for other, is_mention in [*((t, False) for t in topics), *((m, True) for m in extra)]:
                if other == main:
                    continue
                found = branch_options(self.catalog, main, path, other, ends)
                if not found:
                    continue
                p = self.model.probabilities(self.features(qvec, len(ends), found, is_mention))
                best = int(np.argmax(p))
                threshold = self.model.mention_threshold if is_mention else self.model.threshold
                kind = "mentioned entity" if is_mention else "topic entity"
                if threshold is not None and p[best] >= threshold:
                    # a mentioned entity's branch ends at a constant named exactly as the KG entity, which the
                    # tracer checks (schema.ground); a topic entity is named as the question names it
                    name = self.index.entities[other] if is_mention else self.display(other)
                    branches.append((name, found[best].path, getattr(found[best], "at", 0)))
                    ends = found[best].ends
                    self.stats[f"branches attached ({kind})"] += 1
                else:
                    self.stats[f"branches dropped, none fits ({kind})"] += 1
            if branches:
                schema = schema_with_branches(constant, path, branches, entry.schema.strategy)
                out.append(ScoredSchema(schema, entry.score))
            else:
                out.append(entry)
        return out


def load_branch_planner(base: Any, planner_folder: Path, index: KGIndex, catalog: PathCatalog,
                        embed: Callable[[list[str]], np.ndarray], names: dict[str, str] | None) -> Any:
    """``base`` wrapped in a :class:`BranchPlanner` when the planner folder holds a branch model, else ``base``."""
    folder = Path(planner_folder) / BRANCHES_FOLDER
    if not (folder / MODEL_FILE).exists():
        return base
    return BranchPlanner(base, BranchModel.load(folder), index, catalog, embed, names)

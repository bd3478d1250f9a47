"""A learned, LLM-free answer scorer: re-ranks the tracer's candidates and cuts the answer set.

The tracer ranks a question's entities by how much of the planner's beam binds them (:mod:`stem_jax.answer.rank`).
On natural questions that leaves the answer among siblings the plan also reaches, and wrong plans' entities above
it. This scorer reads what retrieval knows about each candidate (:mod:`stem_jax.answer.features`) and gives it a
probability over the question's candidates:

    logit = MLP([numeric features, question word one-hot]) + (q A) . (type_bag T)

where ``q`` is the topic-masked question embedding and ``type_bag`` the entity's type keys, so that "who" questions
prefer people and "when" questions dates whatever the plan. Trained listwise on a KG's training questions (the
target spreads its mass over the candidates that are gold answers), with the softmax temperature and the answer-set
cut (keep candidates whose probability is at least ``cut`` times the best's) chosen on held-out training questions.
Candidates past the first ``MAX_CANDIDATES`` keep the tracer's order after the scored ones and are never in the set.

``stem-jax train-planner`` trains one per KG (:func:`train_answer_scorer`) and keeps it only when it improves held-out
Hit@1 over the tracer's ranking; the STEM pipeline applies it when one is stored (``engine.answer_scorer``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.answer.features import (
    CONSTRAINT_FEATURES,
    MENTION_FEATURES,
    N_QUESTION_WORDS,
    NUMERIC,
    NUMERIC_V1,
    RANKING_FEATURES,
    CandidateFeaturizer,
    Candidates,
    TypeVocabulary,
    feature_columns,
)
from stem_jax.errors import StemError
from stem_jax.trained_model import TrainedModel, params_from_members

SCORER_FILE = "scorer.json"
SCORER_FOLDER = "answer-scorer"  # inside a KG's cache folder, one per encoder: answer-scorer-<encoder>


def scorer_folder(cache_dir: Path, encoder_name: str) -> Path:
    """Where a KG's answer scorer for ``encoder_name`` lives inside its cache folder."""
    return Path(cache_dir) / f"{SCORER_FOLDER}-{encoder_name}"


@dataclasses.dataclass(frozen=True)
class ScorerTraining:
    hidden: int = 32
    rank: int = 16  # width of the question x type-bag bilinear term
    steps: int = 300
    lr: float = 3e-3
    weight_decay: float = 3e-2  # chosen on webqsp-r dev among 1e-3 .. 1e-1: 1e-2 and above held Hit@1 within a point
    seed: int = 0


def _init(d: int, v: int, n_numeric: int, config: ScorerTraining) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(config.seed)
    f = n_numeric + N_QUESTION_WORDS

    def dense(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * np.sqrt(1.0 / rows)).astype(np.float32)

    return {"w1": dense(f, config.hidden), "b1": np.zeros(config.hidden, np.float32),
            "w2": dense(config.hidden, 1)[:, 0] * 0.1, "lin": np.zeros(f, np.float32),
            "qa": dense(d, config.rank) * 0.1, "tb": dense(v, config.rank) * 0.1,
            "scale": np.zeros((n_numeric,), np.float32), "shift": np.zeros((n_numeric,), np.float32)}


def _logits(params, numeric, qword, types, question):
    import jax
    import jax.numpy as jnp

    x = (numeric - params["shift"]) * jnp.exp(params["scale"])
    onehot = jax.nn.one_hot(qword, N_QUESTION_WORDS)[:, None, :] * jnp.ones_like(x[..., :1])
    x = jnp.concatenate([x, onehot], axis=-1)
    hidden = jax.nn.gelu(x @ params["w1"] + params["b1"])
    mlp = hidden @ params["w2"] + x @ params["lin"]
    bilinear = jnp.einsum("qr,qmr->qm", question @ params["qa"], types @ params["tb"])
    return mlp + bilinear


def _standardise(params: dict[str, np.ndarray], numeric: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    live = numeric[mask]
    mean = live.mean(0) if len(live) else np.zeros(numeric.shape[-1], np.float32)
    std = live.std(0) if len(live) else np.ones(numeric.shape[-1], np.float32)
    return {**params, "shift": mean.astype(np.float32), "scale": (-np.log(np.maximum(std, 1e-3))).astype(np.float32)}


@dataclasses.dataclass
class AnswerScorer(TrainedModel):
    vocabulary: TypeVocabulary
    cut: float = 0.5
    # chance-of-being-right calibration of the best answer's probability p: sigmoid(a log p + b), fitted on held-out
    # questions, so that an answer's score reads like the tracer's beam support and engine.confident_at means the same
    calibration: tuple[float, float] = (1.0, 0.0)
    features: tuple[str, ...] = NUMERIC  # the numeric features it reads, by name (features.NUMERIC)

    def __post_init__(self) -> None:
        self._forward = None
        unknown = [f for f in self.features if f not in NUMERIC]
        if unknown:
            raise StemError(f"answer scorer reads unknown features {unknown}\n  how to fix: retrain it with "
                            "`stem-jax train-planner`")
        self._columns = feature_columns(self.features)

    def numeric(self, candidates: Candidates) -> np.ndarray:
        """The numeric feature columns this scorer reads."""
        return candidates.numeric[..., self._columns]

    def probabilities(self, candidates: Candidates) -> np.ndarray:
        """float [Q, M]: each question's softmax over its candidates (0 where ``mask`` is False)."""
        if not len(candidates.mask):
            return np.zeros((0, 0))
        if self._forward is None:
            import jax
            import jax.numpy as jnp

            def forward(params, numeric, qword, types, question, mask, temperature):
                logits = jnp.where(mask, _logits(params, numeric, qword, types, question) / temperature, -jnp.inf)
                return jax.nn.softmax(logits, axis=-1)

            self._forward = jax.jit(forward)
        q = len(candidates.mask)
        width = 1 << max(q - 1, 0).bit_length()  # pad the chunk to a power of two: few compiles
        pad = width - q

        def padded(array: np.ndarray) -> np.ndarray:
            return np.pad(array, [(0, pad)] + [(0, 0)] * (array.ndim - 1)) if pad else array

        mask = padded(candidates.mask)
        mask[q:, 0] = True  # padding rows: one dummy candidate, so their softmax is finite
        probs = self._forward(self.params, padded(self.numeric(candidates)), padded(candidates.qword),
                              padded(candidates.types), padded(candidates.question), mask,
                              np.float32(self.temperature))
        return np.where(candidates.mask, np.asarray(probs, np.float64)[:q], 0.0)

    def rerank(self, candidates: Candidates, cut: float | None = None) -> list[list[tuple[int, float]]]:
        """Per question, (entity, probability) best first (ties: the tracer's order), cut to the answer set: the
        candidates with probability >= ``cut`` (default: the trained one) x the best's."""
        cut = self.cut if cut is None else cut
        probs = self.probabilities(candidates)
        out: list[list[tuple[int, float]]] = []
        for qi, entities in enumerate(candidates.entities):
            m = int(candidates.mask[qi].sum())
            if m == 0:
                out.append([])
                continue
            p = probs[qi, :m]
            order = np.lexsort((np.arange(m), -p))
            floor = cut * p[order[0]] - 1e-12
            chance = self.chance(p)
            out.append([(int(entities[i]), float(chance[i])) for i in order if p[i] >= floor])
        return out

    def chance(self, p: np.ndarray) -> np.ndarray:
        """The calibrated chance that an answer of probability ``p`` is right (increasing in ``p``)."""
        a, b = self.calibration
        return 0.5 * (1.0 + np.tanh(0.5 * (a * np.log(np.maximum(p, 1e-12)) + b)))  # the sigmoid, no overflow

    def fingerprint(self) -> str:
        return self.report.get("arrays_sha256", "")

    def save(self, folder: Path) -> None:
        from stem_jax.atomic import save_model_files

        arrays = self.param_members()
        meta = {"kind": "answer-scorer", "encoder": self.encoder_name, "temperature": self.temperature,
                "cut": self.cut, "calibration": list(self.calibration), "type_keys": self.vocabulary.keys,
                "features": list(self.features), "report": self.report}
        save_model_files(folder, "scorer", arrays, SCORER_FILE, meta, what="answer scorer",
                         fix="make the cache folder writable (STEM_CACHE_DIR or --cache-dir)")

    @classmethod
    def load(cls, folder: Path) -> AnswerScorer:
        folder = Path(folder)

        def damaged(why: str) -> StemError:
            return StemError(f"{folder / SCORER_FILE}: damaged answer scorer ({why})\n  how to fix: retrain it with "
                             "`stem-jax train-planner`, or delete the folder to rank answers without it")

        from stem_jax.atomic import read_arrays_with_manifest

        meta, arrays, digest = read_arrays_with_manifest(folder, SCORER_FILE, damaged)
        return cls(params=params_from_members(arrays), vocabulary=TypeVocabulary(list(meta["type_keys"])), encoder_name=meta["encoder"],
                   temperature=float(meta["temperature"]), cut=float(meta["cut"]),
                   calibration=tuple(float(x) for x in meta["calibration"]),
                   report={**meta.get("report", {}), "arrays_sha256": digest},
                   features=tuple(meta.get("features", NUMERIC_V1)))


# ---------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------

def gold_targets(candidates: Candidates, gold: Sequence[set[int]]) -> np.ndarray:
    """float [Q, M]: 1 where the candidate is one of the question's gold entities."""
    target = np.zeros(candidates.mask.shape, np.float32)
    for qi, (entities, answers) in enumerate(zip(candidates.entities, gold, strict=True)):
        m = int(candidates.mask[qi].sum())
        target[qi, :m] = [int(e) in answers for e in entities[:m].tolist()]
    return target


def concat_candidates(parts: Sequence[Candidates]) -> Candidates:
    return Candidates(entities=[e for p in parts for e in p.entities], base=[b for p in parts for b in p.base],
                      numeric=np.concatenate([p.numeric for p in parts]), qword=np.concatenate([p.qword for p in parts]),
                      types=np.concatenate([p.types for p in parts]),
                      question=np.concatenate([p.question for p in parts]),
                      mask=np.concatenate([p.mask for p in parts]))


def _subset(c: Candidates, rows: np.ndarray) -> Candidates:
    return Candidates(entities=[c.entities[i] for i in rows], base=[c.base[i] for i in rows], numeric=c.numeric[rows],
                      qword=c.qword[rows], types=c.types[rows], question=c.question[rows], mask=c.mask[rows])


def set_metrics(ranked: Sequence[Sequence[tuple[int, float]]], gold: Sequence[set[int]]) -> dict[str, float]:
    """Mean Hit@1, Hit and F1 (in [0, 1]) of answer lists against gold entity sets (a question with no
    answers scores 0)."""
    hit1 = hit = f1 = 0.0
    for answers, answer_set in zip(ranked, gold, strict=True):
        found = [e for e, _ in answers]
        if not found or not answer_set:
            continue
        right = sum(e in answer_set for e in found)
        hit1 += found[0] in answer_set
        hit += right > 0
        if right:
            p, r = right / len(found), right / len(answer_set)
            f1 += 2 * p * r / (p + r)
    n = max(len(gold), 1)
    return {"hit_at_1": hit1 / n, "hit": hit / n, "f1": f1 / n}


def fit_chance(probs: np.ndarray, candidates: Candidates, gold: Sequence[set[int]]) -> tuple[float, float]:
    """(a, b) of sigmoid(a log p + b) ~ P(the best answer is right), a logistic fit on each question's best
    candidate (Newton steps, a small ridge; the slope kept positive so the order never changes)."""
    x, y = [], []
    for qi, (entities, answers) in enumerate(zip(candidates.entities, gold, strict=True)):
        m = int(candidates.mask[qi].sum())
        if m:
            top = int(np.argmax(probs[qi, :m]))
            x.append(np.log(max(probs[qi, top], 1e-12)))
            y.append(float(int(entities[top]) in answers))
    if len(set(y)) < 2:
        return (1.0, 0.0)
    features = np.stack([np.asarray(x), np.ones(len(x))], 1)
    target = np.asarray(y)
    w = np.array([1.0, 0.0])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-features @ w))
        grad = features.T @ (p - target) + 1e-2 * w
        hess = (features * (p * (1 - p))[:, None]).T @ features + 1e-2 * np.eye(2)
        w = w - np.linalg.solve(hess, grad)
    return (max(float(w[0]), 1e-3), float(w[1]))


CONSTRAINED_SHARE = 0.05  # training questions with a condition beyond the main path before the condition
# features are tried (a templated KG's one-topic questions never reach it, and train as before)


def constrained_share(candidates: Candidates) -> float:
    """Share of questions with at least one candidate that has a condition (another topic entity) to meet."""
    if not len(candidates.mask):
        return 0.0
    column = candidates.numeric[..., NUMERIC.index("constraints")]
    return float(np.mean(((column > 0) & candidates.mask).any(axis=1)))


def train_answer_scorer(train: Candidates, train_gold: Sequence[set[int]], held: Candidates,
                        held_gold: Sequence[set[int]], vocabulary: TypeVocabulary, *, encoder_name: str,
                        config: ScorerTraining = ScorerTraining(), tracer_cut: float = 0.5,
                        features: Sequence[str] = NUMERIC, log: Any = print) -> AnswerScorer:
    """Fit on ``train`` (questions whose gold is among their candidates), choose temperature and cut on ``held``,
    and report held-out Hit@1 / Hit / F1 of the tracer's ranking (cut at ``tracer_cut``) and the scorer's.

    When ``features`` leave out the condition features (:data:`~stem_jax.answer.features.CONSTRAINT_FEATURES`)
    and at least :data:`CONSTRAINED_SHARE` of the training questions name topic entities beyond the ones their
    plans leave from, three more scorers are fitted: one that also reads them, one that reads the mention
    features too (:data:`~stem_jax.answer.features.MENTION_FEATURES`), one that also reads how each candidate was
    reached and what it is (:data:`~stem_jax.answer.features.RANKING_FEATURES`), and the one with the best held-out
    Hit@1 + F1 is returned (ties keep the fewer features); its report says which."""
    features = tuple(features)
    first = _fit_scorer(train, train_gold, held, held_gold, vocabulary, encoder_name=encoder_name, config=config,
                        tracer_cut=tracer_cut, features=features, log=log)
    share = constrained_share(train)
    if set(CONSTRAINT_FEATURES) <= set(features) or share < CONSTRAINED_SHARE:
        return first
    log(f"answer scorer: {share:.0%} of training questions name other entities; fitting ones that read them")
    fitted = {"without": first}
    with_topics = features + tuple(f for f in CONSTRAINT_FEATURES if f not in features)
    fitted["topics"] = _fit_scorer(train, train_gold, held, held_gold, vocabulary, encoder_name=encoder_name,
                                   config=config, tracer_cut=tracer_cut, features=with_topics, log=log)
    with_mentions = with_topics + tuple(f for f in MENTION_FEATURES if f not in with_topics)
    fitted["topics+mentions"] = _fit_scorer(train, train_gold, held, held_gold, vocabulary, encoder_name=encoder_name,
                                            config=config, tracer_cut=tracer_cut, features=with_mentions, log=log)
    with_ranking = with_mentions + tuple(f for f in RANKING_FEATURES if f not in with_mentions)
    fitted["topics+mentions+ranking"] = _fit_scorer(train, train_gold, held, held_gold, vocabulary,
                                                    encoder_name=encoder_name, config=config, tracer_cut=tracer_cut,
                                                    features=with_ranking, log=log)

    def key(scorer: AnswerScorer) -> float:
        return scorer.report["held_out_scorer"]["hit_at_1"] + scorer.report["held_out_scorer"]["f1"]

    chosen = "without"
    for name, scorer in fitted.items():  # a later variant must do strictly better
        if key(scorer) > key(fitted[chosen]) + 1e-12:
            chosen = name
    result = fitted[chosen]
    result.report["condition_features"] = {"constrained_share": share, "chosen": chosen,
                                           **{f"held_out_{k}": v.report["held_out_scorer"] for k, v in fitted.items()}}
    return result


def _fit_scorer(train: Candidates, train_gold: Sequence[set[int]], held: Candidates, held_gold: Sequence[set[int]],
                vocabulary: TypeVocabulary, *, encoder_name: str, config: ScorerTraining, tracer_cut: float,
                features: Sequence[str], log: Any) -> AnswerScorer:
    import jax
    import jax.numpy as jnp
    import optax

    target = gold_targets(train, train_gold)
    rows = np.flatnonzero(target.sum(1) > 0)
    data = _subset(train, rows)
    target = target[rows]
    target = target / target.sum(1, keepdims=True)
    columns = feature_columns(features)
    numeric = data.numeric[..., columns]
    params = _standardise(_init(data.question.shape[1], len(vocabulary.keys), len(columns), config), numeric,
                          data.mask)
    fixed = {"shift": params["shift"], "scale": params["scale"]}
    trainable = {k: v for k, v in params.items() if k not in fixed}
    optimiser = optax.adamw(config.lr, weight_decay=config.weight_decay)
    state = optimiser.init(trainable)
    arrays = tuple(jnp.asarray(a) for a in (numeric, data.qword, data.types, data.question, data.mask, target))

    def loss_fn(p, numeric, qword, types, question, mask, goal):
        logits = jnp.where(mask, _logits({**p, **fixed}, numeric, qword, types, question), -1e9)
        return -jnp.mean(jnp.sum(goal * jax.nn.log_softmax(logits, axis=-1), axis=-1))

    @jax.jit
    def step(p, s):
        loss, grads = jax.value_and_grad(loss_fn)(p, *arrays)
        updates, s = optimiser.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    loss = float("nan")
    for _ in range(config.steps):
        trainable, state, loss = step(trainable, state)
    scorer = AnswerScorer(params={k: np.asarray(v) for k, v in {**trainable, **fixed}.items()},
                          vocabulary=vocabulary, encoder_name=encoder_name, features=tuple(features))
    base = [[(int(e), float(s)) for e, s in zip(ents, vals, strict=True)
             if s >= tracer_cut * (vals[0] if len(vals) else 0) - 1e-9]
            for ents, vals in zip(held.entities, held.base, strict=True)]
    before = set_metrics(base, held_gold)
    best: tuple[float, float, float] | None = None
    for temperature in (0.5, 0.75, 1.0, 1.5, 2.0):
        scorer.temperature = temperature
        for cut in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            m = set_metrics(scorer.rerank(held, cut), held_gold)
            key = m["f1"] + m["hit"]
            if best is None or key > best[0] + 1e-12:
                best = (key, temperature, cut)
    assert best is not None
    scorer.temperature, scorer.cut = best[1], best[2]
    scorer.calibration = fit_chance(scorer.probabilities(held), held, held_gold)
    after = set_metrics(scorer.rerank(held), held_gold)
    scorer.report = {"train_questions": len(rows), "held_out_questions": len(held.entities),
                     "final_loss": float(loss), "held_out_tracer": before, "held_out_scorer": after,
                     "temperature": scorer.temperature, "cut": scorer.cut,
                     "calibration": list(scorer.calibration), "config": dataclasses.asdict(config)}
    log(f"answer scorer: held-out Hit@1 {before['hit_at_1']:.3f} -> {after['hit_at_1']:.3f}, Hit {before['hit']:.3f}"
        f" -> {after['hit']:.3f}, F1 {before['f1']:.3f} -> {after['f1']:.3f} ({len(held.entities)} questions)")
    return scorer


class ScoredAnswers:
    """A stored scorer with the featurizer it reads: ``(questions, runs, outputs, ranked) -> ranked``, the hook the
    STEM pipeline calls on the tracer's uncut ranking."""

    def __init__(self, scorer: AnswerScorer, featurizer: CandidateFeaturizer) -> None:
        self.scorer = scorer
        self.featurizer = featurizer

    @classmethod
    def stored(cls, cache_dir: Path, index: Any, names: dict[str, str] | None, encoder: Any) -> ScoredAnswers | None:
        """The scorer stored for ``encoder`` in a KG's cache folder, or None when there is none."""
        folder = scorer_folder(cache_dir, encoder.name)
        if not (folder / SCORER_FILE).exists():
            return None
        scorer = AnswerScorer.load(folder)
        return cls(scorer, CandidateFeaturizer(index, names, scorer.vocabulary, encoder.encode,
                                               features=scorer.features))

    def warm_up(self) -> int:
        """Fill the featurizer's relation and type-key tables (:meth:`CandidateFeaturizer.warm_up`)."""
        return self.featurizer.warm_up()

    def fingerprint(self) -> dict[str, Any]:
        return {"arrays_sha256": self.scorer.fingerprint(), "cut": self.scorer.cut,
                "temperature": self.scorer.temperature}

    def __call__(self, questions: Sequence, runs: Sequence, outputs: Sequence,
                 ranked: Sequence[Sequence[tuple[int, float]]], pruned: Sequence | None = None,
                 ) -> list[list[tuple[int, float]]]:
        """``pruned``: the runs' pruned (nodes, via) per question, as :class:`CandidateFeaturizer` takes them."""
        return self.scorer.rerank(self.featurizer(questions, runs, outputs, ranked, pruned))


def warm_answer_scorer(engine: Any, *, method: str = "stem", log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fill the learned answer scorer's relation-text table (every KG relation) when ``method`` has one; returns how
    many texts and how long."""
    methods = getattr(engine, "method", None)  # an engine that retrieves without methods has no scorer
    scorer = getattr(getattr(methods(method), "context", None), "answer_scorer", None) if methods else None
    if scorer is None or not hasattr(scorer, "warm_up"):
        return {}
    log("  embedding the answer scorer's relation texts ...")
    began = time.perf_counter()
    texts = scorer.warm_up()
    seconds = time.perf_counter() - began
    log(f"  answer scorer: {texts} relation texts in {seconds:.1f}s")
    return {"answer_scorer_relations": texts, "answer_scorer_seconds": round(seconds, 3)}

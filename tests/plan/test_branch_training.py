"""Training the constraint-branch model: which branches it learns to attach, the threshold chosen on examples no
fitted model saw, and stored models of an earlier feature set still read as they were trained."""

import json

import numpy as np
import pytest

import stem_jax.plan.branch_planner as branch_planner
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index
from stem_jax.plan.branch_planner import (
    FEATURES,
    FEATURES_V1,
    MODEL_FILE,
    THRESHOLDS,
    BranchExample,
    BranchModel,
    _gains,
    _out_of_fold_gains,
    train_branch_model,
)
from stem_jax.plan.relation_paths import PathCatalog

FILMS = 40


def crew_kg() -> tuple[list[tuple[str, str, str]], list[Question], list[Question]]:
    """One actor in every film; each film has its own crew member, met through a crew-gig mediator. A question
    names the actor and one crew member: the crew member's branch narrows the actor's films to the answer."""
    triples = []
    for i in range(FILMS):
        triples += [(f"Film {i}", "film.film.starring", "Ann Actor"), (f"Film {i}", "film.film.crew", f"m.gig{i}"),
                    (f"m.gig{i}", "film.crew_gig.member", f"Crew {i}")]
    questions = [Question(f"q{i}", f"which film with Ann Actor had Crew {i} in its crew", ("Ann Actor", f"Crew {i}"),
                          (f"Film {i}",)) for i in range(FILMS)]
    return triples, questions[:30], questions[30:]


def embed(texts: list[str]) -> np.ndarray:
    rng = np.random.default_rng(0)
    table = {}
    return np.stack([table.setdefault(t, rng.standard_normal(8)) for t in texts]).astype(np.float32)


def catalog_of(triples):
    index = build_index(triples)
    return index, PathCatalog(index, mediators=np.asarray([e.startswith("m.") for e in index.entities]))


def test_a_branch_that_isolates_the_answer_is_learned_and_kept():
    triples, train, held = crew_kg()
    index, catalog = catalog_of(triples)
    model = train_branch_model(train, held, index, catalog, embed, None, log=lambda _: None)
    assert model is not None and model.features == FEATURES
    assert model.report["out_of_fold_f1_gain"][str(model.threshold)] > 0.5


def test_no_model_is_kept_when_narrowing_only_loses_answers():
    triples, train, held = crew_kg()
    every_film = tuple(f"Film {i}" for i in range(FILMS))
    train, held = ([Question(q.qid, q.text, q.topic_entities, every_film) for q in part] for part in (train, held))
    index, catalog = catalog_of(triples)
    assert train_branch_model(train, held, index, catalog, embed, None, log=lambda _: None) is None


def _random_examples(rng, n):
    out = []
    for question in range(n):
        k = int(rng.integers(1, 5))
        rows = np.concatenate([rng.normal(0, 1, (k, len(FEATURES) - 1)), np.ones((k, 1))], axis=1)
        out.append(BranchExample(rows, list(rng.uniform(0, 1, k)), float(rng.uniform(0, 1)),
                                 bool(rng.integers(0, 2)), question))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_gains_match_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    examples = _random_examples(rng, 30)
    weights = rng.normal(0, 1, len(FEATURES))
    got = _gains(weights, examples)
    for t in THRESHOLDS:
        expected = 0.0
        for e in examples:
            p = [1 / (1 + np.exp(-float(r @ weights))) for r in e.rows]
            best = max(range(len(p)), key=lambda i: (p[i], -i))
            if p[best] >= t:
                expected += e.f1s[best] - e.base
        assert got[t] == pytest.approx(expected, abs=1e-9)


def test_no_example_is_scored_by_weights_fitted_on_it(monkeypatch):
    rng = np.random.default_rng(1)
    examples, held = _random_examples(rng, 40), _random_examples(rng, 5)
    fitted: list[set[int]] = []
    scored: list[tuple[int, set[int]]] = []

    def fake_fit(chosen, best_only=False):
        fitted.append({id(e) for e in chosen})
        return np.full(len(FEATURES), float(len(fitted)))

    def fake_gains(weights, chosen):
        scored.append((int(weights[0]), {id(e) for e in chosen}))
        return dict.fromkeys(THRESHOLDS, 0.0)

    monkeypatch.setattr(branch_planner, "_fit_examples", fake_fit)
    monkeypatch.setattr(branch_planner, "_gains", fake_gains)
    on_all = fake_fit(examples)  # the model train_branch_model fits on every training example
    _out_of_fold_gains(examples, held, on_all)
    assert len(fitted) == 1 + branch_planner.FOLDS
    for model, ids in scored:
        assert not ids & fitted[model - 1]
    every = {id(e) for e in [*examples, *held]}
    assert set().union(*(ids for _, ids in scored)) == every


def test_a_model_stored_with_the_first_feature_set_reads_those_columns(tmp_path):
    weights = (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5)
    (tmp_path / MODEL_FILE).write_text(json.dumps({"kind": "branch-model", "features": list(FEATURES_V1),
                                                   "weights": list(weights), "threshold": 0.5}))
    model = BranchModel.load(tmp_path)
    assert model.features == FEATURES_V1
    rows = np.zeros((2, len(FEATURES)))
    rows[:, FEATURES.index("bias")] = 1.0
    rows[:, FEATURES.index("mean_cos")] = (0.0, 2.0)
    rows[:, FEATURES.index("cos_gap")] = 9.0  # not a feature of this model: never read
    expected = 1 / (1 + np.exp(-np.array([-0.5, 1.5])))
    np.testing.assert_allclose(model.probabilities(rows), expected)


def test_a_stored_model_with_an_unknown_feature_is_a_clear_error(tmp_path):
    (tmp_path / MODEL_FILE).write_text(json.dumps({"kind": "branch-model", "features": ["mean_cos", "shoe_size"],
                                                   "weights": [1.0, 2.0], "threshold": 0.5}))
    with pytest.raises(StemError, match="(?s)shoe_size.*retrain"):
        BranchModel.load(tmp_path)


def test_best_only_labels_teach_which_of_two_helpful_branches_to_attach():
    """Two branches raise F1 in every example: the exact one (higher cosine, keeps one answer) and a looser one
    (keeps many). Labelled "it helps", both are positive and the model cannot tell them apart; labelled by the
    best branch, it ranks the exact one first."""
    rng = np.random.default_rng(0)
    examples = []
    for question in range(40):
        exact = np.zeros(len(FEATURES))
        loose = np.zeros(len(FEATURES))
        exact[FEATURES.index("mean_cos")] = 0.7 + 0.1 * rng.random()
        loose[FEATURES.index("mean_cos")] = 0.3 + 0.1 * rng.random()
        exact[FEATURES.index("log_kept")], loose[FEATURES.index("log_kept")] = np.log1p(1), np.log1p(30)
        exact[-1] = loose[-1] = 1.0
        examples.append(BranchExample(np.stack([exact, loose]), [1.0, 0.6], 0.1, False, question))
    weights = branch_planner._fit_examples(examples, best_only=True)
    assert all(int(np.argmax(e.rows @ weights)) == 0 for e in examples)
    assert _gains(weights, examples)[0.2] == pytest.approx(0.9 * len(examples))

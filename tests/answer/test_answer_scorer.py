"""The learned answer scorer: type bags match a plain reference, it learns what the tracer's ranking cannot tell
apart, survives a save/load, and the engine applies the stored one unless told not to."""

import json

import numpy as np
import pytest

from stem_jax.answer.features import N_NUMERIC, Candidates, TypeVocabulary, question_word
from stem_jax.answer.scorer import AnswerScorer, ScorerTraining, scorer_folder, set_metrics
from stem_jax.answer.training import gold_entities, train_kg_scorer
from stem_jax.config import EncoderConfig, StemConfig, apply_overrides
from stem_jax.engine import Engine
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index


def type_bags_reference(triples, relations):
    bags = {}
    for h, r, t in triples:
        name = relations[r]
        bags.setdefault(h, set()).add("h:" + (name.rpartition(".")[0] or name))
        bags.setdefault(t, set()).add("t:" + name)
    return bags


@pytest.mark.parametrize("seed", range(5))
def test_type_bags_match_a_plain_reference_on_random_kgs(seed):
    rng = np.random.default_rng(seed)
    relations = ["people.person.gender", "film.film.directed_by", "link", "location.location.contains"]
    triples = [(f"e{rng.integers(12)}", relations[rng.integers(4)], f"e{rng.integers(12)}") for _ in range(30)]
    index = build_index(triples)
    vocabulary = TypeVocabulary.of(index, size=int(rng.integers(2, 9)))
    offsets, ids = vocabulary.table(index)
    expected = type_bags_reference(index.triples.tolist(), index.relations)
    for entity in range(index.num_entities):
        got = {vocabulary.keys[k] for k in ids[offsets[entity]:offsets[entity + 1]]}
        assert got == expected.get(entity, set()) & set(vocabulary.keys)


def test_the_question_word_is_the_first_wh_word():
    assert question_word("who directed X") == 0
    assert question_word("in what year was X born, and where") == 3
    assert question_word("how many films did X make") == 5
    assert question_word("name the director of X") == 7


def _kg(folder, n_topics=48):
    """Every topic links to a person and to a year: the plan `link` binds both, so the tracer's ranking ties them;
    "who" questions want the person, "when" questions the year."""
    triples, questions = [], []
    for i in range(n_topics):
        topic, person, year = f"Topic {i}", f"Person {i}", str(1900 + i)
        triples += [(topic, "link", person), (topic, "link", year), (person, "people.person.gender", "Male")]
        questions.append({"id": f"w{i}", "question": f"who is linked to {topic}", "topic_entities": [topic],
                          "answers": [person], "gold_path": ["link"]})
        questions.append({"id": f"y{i}", "question": f"when was {topic} linked", "topic_entities": [topic],
                          "answers": [year], "gold_path": ["link"]})
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in triples))
    (folder / "train.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return questions


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linked")
    _kg(folder)
    cache = tmp_path_factory.mktemp("cache")
    config = apply_overrides(StemConfig(encoder=EncoderConfig(name="hashing")), {"engine.answer_scorer": "off"})
    engine = Engine.open("files", config=config, planner="oracle", data_dir=folder, split="train", cache_dir=cache)
    questions = engine.dataset.questions
    train, held = questions[:64], questions[64:]
    scorer = train_kg_scorer(engine.method("stem"), train, held, config=ScorerTraining(steps=200), log=lambda _: None)
    scorer.save(scorer_folder(cache / engine.dataset.name, engine.encoder.name))
    return engine, scorer, held, folder, cache


def test_the_scorer_separates_what_the_tracers_ranking_ties(linked):
    _, scorer, held, _, _ = linked
    assert scorer.report["held_out_tracer"]["hit_at_1"] <= 0.75
    assert scorer.report["held_out_scorer"]["hit_at_1"] == 1.0
    assert scorer.report["held_out_scorer"]["f1"] > scorer.report["held_out_tracer"]["f1"]


def test_the_engine_applies_the_stored_scorer_and_off_ignores_it(linked):
    engine, _, held, folder, cache = linked
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    scored = Engine.open("files", config=config, planner="oracle", data_dir=folder, split="train", cache_dir=cache)
    answers = scored.retrieve(held)
    assert all(a.best in a.question.answers for a in answers)
    # confidence stays the beam support of the first answer (one gold plan: all of it), not the scorer's probability
    assert all(a.record["support"] == 1.0 and a.confident for a in answers)
    assert all(a.answers[0][1] < 1.0 for a in answers)
    assert scored.method("stem").fingerprint()["answer_scorer"]["arrays_sha256"]
    plain = engine.retrieve(held)
    assert sum(a.best in a.question.answers for a in plain) < len(held)
    assert engine.method("stem").fingerprint()["answer_scorer"] is None


def test_a_saved_scorer_loads_to_the_same_probabilities(linked, tmp_path):
    _, scorer, _, _, _ = linked
    scorer.save(tmp_path / "s")
    loaded = AnswerScorer.load(tmp_path / "s")
    rng = np.random.default_rng(0)
    q, m, v, d = 3, 5, len(scorer.vocabulary.keys), scorer.params["qa"].shape[0]
    candidates = Candidates(entities=[np.arange(m)] * q, base=[np.linspace(1, 0, m)] * q,
                            numeric=rng.standard_normal((q, m, N_NUMERIC)).astype(np.float32),
                            qword=np.array([0, 1, 7], np.int32), types=rng.random((q, m, v)).astype(np.float32),
                            question=rng.standard_normal((q, d)).astype(np.float32), mask=np.ones((q, m), bool))
    np.testing.assert_allclose(loaded.probabilities(candidates), scorer.probabilities(candidates), rtol=1e-6)
    assert loaded.cut == scorer.cut and loaded.temperature == scorer.temperature


def test_a_damaged_scorer_is_a_clear_error(linked, tmp_path):
    _, scorer, _, _, _ = linked
    scorer.save(tmp_path / "s")
    (arrays,) = (tmp_path / "s").glob("scorer-*.npz")
    arrays.write_bytes(arrays.read_bytes()[:-10])
    with pytest.raises(StemError, match="damaged answer scorer.*sha256"):
        AnswerScorer.load(tmp_path / "s")


def test_set_metrics_count_a_question_without_answers_as_a_miss():
    assert set_metrics([[(1, 0.9), (2, 0.1)], []], [{1}, {3}]) == {"hit_at_1": 0.5, "hit": 0.5, "f1": 0.5 * 2 / 3}


def test_gold_answers_match_by_id_or_normalised_name():
    from stem_jax.data.types import Question

    q = Question(qid="a", text="x", answers=("m.01", "  new YORK "), topic_entities=("t",))
    assert gold_entities([q], ["t", "m.01", "m.02"], {"m.02": "New York"}) == [{1, 2}]


def test_the_chance_calibration_keeps_the_order_and_follows_the_hit_rate():
    from stem_jax.answer.scorer import fit_chance

    rng = np.random.default_rng(0)
    n = 2000
    top = rng.uniform(0.05, 1.0, n)
    truth = 1 / (1 + np.exp(-(2.0 * np.log(top) + 1.0)))  # P(the best answer is right) in the model's family
    right = rng.uniform(size=n) < truth
    probs = np.stack([top, top / 2], 1)
    candidates = Candidates(entities=[np.array([0, 1])] * n, base=[np.array([1.0, 0.5])] * n,
                            numeric=np.zeros((n, 2, 16), np.float32), qword=np.zeros(n, np.int32),
                            types=np.zeros((n, 2, 1), np.float32), question=np.zeros((n, 1), np.float32),
                            mask=np.ones((n, 2), bool))
    gold = [{0} if r else {1} for r in right]
    a, b = fit_chance(probs, candidates, gold)
    scorer = AnswerScorer(params={}, vocabulary=TypeVocabulary([]), encoder_name="x", calibration=(a, b))
    grid = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    chance = scorer.chance(grid)
    assert a > 0 and np.all(np.diff(chance) > 0)
    np.testing.assert_allclose(chance, 1 / (1 + np.exp(-(2.0 * np.log(grid) + 1.0))), atol=0.05)


def test_a_scorer_reads_only_the_features_it_was_trained_on(linked, tmp_path):
    """A scorer reads its own feature columns of the featurizer's arrays, by name: columns it was not trained on
    (features added later) change nothing, and a stored scorer keeps its list."""
    from stem_jax.answer.features import NUMERIC, NUMERIC_V1

    _, scorer, _, _, _ = linked
    assert scorer.features == NUMERIC_V1 and len(NUMERIC) > len(NUMERIC_V1)
    scorer.save(tmp_path / "s")
    loaded = AnswerScorer.load(tmp_path / "s")
    assert loaded.features == NUMERIC_V1
    rng = np.random.default_rng(1)
    q, m, v, d = 2, 4, len(scorer.vocabulary.keys), scorer.params["qa"].shape[0]
    numeric = rng.standard_normal((q, m, len(NUMERIC))).astype(np.float32)
    candidates = Candidates(entities=[np.arange(m)] * q, base=[np.linspace(1, 0, m)] * q, numeric=numeric,
                            qword=np.array([0, 1], np.int32), types=rng.random((q, m, v)).astype(np.float32),
                            question=rng.standard_normal((q, d)).astype(np.float32), mask=np.ones((q, m), bool))
    width = len(NUMERIC_V1)
    changed = Candidates(**{**candidates.__dict__, "numeric": np.concatenate(
        [numeric[..., :width], rng.standard_normal((q, m, len(NUMERIC) - width)).astype(np.float32)], -1)})
    np.testing.assert_allclose(loaded.probabilities(changed), loaded.probabilities(candidates), rtol=1e-6)
    with pytest.raises(StemError, match="unknown features"):
        AnswerScorer(params=scorer.params, vocabulary=scorer.vocabulary, encoder_name="x", features=("no_such",))


def test_folds_are_stable_and_cover_every_fold():
    from stem_jax.answer.training import fold_of

    folds = [fold_of(f"q{i}", 4) for i in range(400)]
    assert set(folds) == {0, 1, 2, 3} and folds == [fold_of(f"q{i}", 4) for i in range(400)]
    assert min(folds.count(f) for f in range(4)) > 60


@pytest.mark.slow  # ~1-2 min: trains two fold planners on the demo KG
def test_out_of_sample_candidates_plan_every_question_once_by_a_planner_that_never_saw_it(tmp_path):
    from stem_jax.answer.training import fold_of, out_of_sample_candidates
    from stem_jax.data.registry import DatasetSpec

    config = apply_overrides(StemConfig(), {"encoder.name": "hashing", "engine.answer_scorer": "off"})
    spec = DatasetSpec(name="demo", split="train", limit=20)
    engine = Engine.open(spec, config=config, planner="pattern", cache_dir=tmp_path / "cache")
    questions = engine.dataset.questions
    candidates, planned = out_of_sample_candidates(engine, spec, config, questions, 2, tmp_path / "work",
                                                   log=lambda _: None)
    assert sorted(q.qid for q in planned) == sorted(q.qid for q in questions)
    assert len(candidates.entities) == len(questions) and candidates.mask[:, 0].mean() > 0.5
    assert [fold_of(q.qid, 2) for q in planned] == sorted(fold_of(q.qid, 2) for q in planned)  # fold by fold
    assert not any((tmp_path / "work").iterdir())  # the fold planners are removed


def test_the_featurizer_reads_the_pruned_bindings_it_is_given(linked):
    """The pipeline hands the scorer the bindings fold_chunk pruned; the featurizer reads those instead of pruning
    again, and with none given prunes the outputs itself to the same candidates."""
    import dataclasses

    from stem_jax.answer.features import CandidateFeaturizer

    engine, scorer, held, _, _ = linked
    method = engine.method("stem")
    method.prepare(held)
    pipeline = method.pipeline
    runs = [method.runs[q.qid] for q in held]
    flat, _ = pipeline.trace([r for mine in runs for r in mine], method.hyper)
    starts = np.cumsum([0, *map(len, runs)]).tolist()
    outputs = [flat[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
    chunk, _, pruned = pipeline._fold_chunk(held, runs, outputs)
    ranked = chunk.ranked("beam")
    featurizer = CandidateFeaturizer(engine.index, engine.dataset.entity_names, scorer.vocabulary, engine.encoder.encode)
    per_question = [pruned[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]

    def same(one: Candidates, other: Candidates) -> bool:
        ragged = ("entities", "base")  # a list of arrays per question
        return all(np.array_equal(x, y) for name in ragged
                   for x, y in zip(getattr(one, name), getattr(other, name), strict=True)) and \
            all(np.array_equal(getattr(one, f.name), getattr(other, f.name))
                for f in dataclasses.fields(Candidates) if f.name not in ragged)

    assert same(featurizer(held, runs, outputs, ranked, per_question), featurizer(held, runs, outputs, ranked))
    # bindings dropped from what it is given are gone from its candidates, as from outputs that never had them
    cut = [[(np.where(np.arange(n.shape[1]) == 0, n, -1), np.where(np.arange(n.shape[1]) == 0, v, -1))
            for n, v in mine] for mine in per_question]
    cut_outputs = [[{**out, "nodes": n, "via": v} for out, (n, v) in zip(outs, mine, strict=True)]
                   for outs, mine in zip(outputs, cut, strict=True)]
    assert same(featurizer(held, runs, outputs, ranked, cut), featurizer(held, runs, cut_outputs, ranked))

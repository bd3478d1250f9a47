"""train-planner's choice between templates and paths rests on a beam's best answer, walked exactly."""

from __future__ import annotations

from stem_jax.data.types import PathStep, Question
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.mixed import MixedPlanner
from stem_jax.plan.oracle import schema_from_path
from stem_jax.plan.training import beam_answer_hit

INDEX = build_index([("Kismet", "directed_by", "Dieterle"), ("Kismet", "written_by", "Knoblock"),
                     ("Kismet", "starred", "Colman"), ("Kismet", "starred", "Dietrich")])
QUESTION = Question(qid="q", text="who directed Kismet", topic_entities=("Kismet",), answers=("Dieterle",))


class FixedPlanner:
    def __init__(self, *beam):
        self.beam = [ScoredSchema(schema_from_path("Kismet", (PathStep(r),), "Breadth"), p) for r, p in beam]

    def plan_batch(self, questions):
        return [list(self.beam) for _ in questions]


def test_the_answer_with_most_beam_probability_counts():
    assert beam_answer_hit(FixedPlanner(("directed_by", 0.6), ("written_by", 0.4)), [QUESTION], INDEX) == 1.0
    assert beam_answer_hit(FixedPlanner(("written_by", 0.6), ("directed_by", 0.4)), [QUESTION], INDEX) == 0.0
    # two plans agreeing on an answer outweigh a more probable single plan
    agree = FixedPlanner(("written_by", 0.45), ("directed_by", 0.3), ("directed_by", 0.25))
    assert beam_answer_hit(agree, [QUESTION], INDEX) == 1.0


def test_a_tie_is_a_fair_draw_among_the_tied():
    q = Question(qid="q", text="who starred in Kismet", topic_entities=("Kismet",), answers=("Colman",))
    assert beam_answer_hit(FixedPlanner(("starred", 1.0)), [q], INDEX) == 0.5


def test_mixed_beams_add_the_probabilities_of_one_plan():
    mixed = MixedPlanner(FixedPlanner(("written_by", 0.9), ("directed_by", 0.1)),
                         FixedPlanner(("directed_by", 0.8), ("starred", 0.2)), weight=0.5)
    (beam,) = mixed.plan_batch([QUESTION])
    assert [(e.schema.triples[0].relation, round(e.score, 6)) for e in beam] == [
        ("written_by", 0.45), ("directed_by", 0.45), ("starred", 0.1)]


class _NoTemplates:
    report = {"mlp": {"template": {"top1": 0.0}}}
    index = None

    def plan_batch(self, questions):
        return [[] for _ in questions]


class _LengthRanker:
    """A path ranker stand-in whose plans depend on the longest path it was trained on."""

    def __init__(self, config, relation):
        self.plans = FixedPlanner((relation, 1.0))
        self.config = config
        self.beam = 4  # train-planner sets the beam it compares at

    def plan_batch(self, questions):
        return self.plans.plan_batch(questions)

    def save(self, folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ranker.json").write_text(str(self.config.max_hops))


def _select(tmp_path, monkeypatch, hops: str, longer_is_right: bool):
    import types

    from stem_jax.config import StemConfig, apply_overrides
    from stem_jax.data.types import Dataset
    from stem_jax.plan import path_ranker
    from stem_jax.plan.training import select_planner

    trained = []

    def train(train, val, index, *, config, **_):
        trained.append(config.max_hops)
        right = (config.max_hops > 2) == longer_is_right
        return _LengthRanker(config, "directed_by" if right else "written_by")

    monkeypatch.setattr(path_ranker, "train_path_ranker", train)
    val = [Question(qid=f"v{i}", text=QUESTION.text, topic_entities=QUESTION.topic_entities,
                    answers=QUESTION.answers) for i in range(20)]
    triples = [(INDEX.entities[h], INDEX.relations[r], INDEX.entities[t]) for h, r, t in INDEX.triples.tolist()]
    config = apply_overrides(StemConfig(), {"planner.path_hops": hops})
    selection = select_planner(Dataset("tiny", val, triples), [], val, _NoTemplates(), config, tmp_path,
                               encoder=types.SimpleNamespace(name="x"), embed=None, log=lambda _: None)
    return trained, selection, (tmp_path / "paths" / "ranker.json").read_text()


def test_held_out_questions_choose_the_longer_paths_when_they_answer_better(tmp_path, monkeypatch):
    trained, selection, stored = _select(tmp_path, monkeypatch, "auto", longer_is_right=True)
    assert trained == [2, 3]
    assert selection["path_max_hops"] == 3 and stored == "3"
    assert selection["beam_answer_hit"]["paths+3steps"] == 1.0 and selection["beam_answer_hit"]["paths"] == 0.0


def test_held_out_questions_keep_the_shorter_paths_on_a_tie_or_loss(tmp_path, monkeypatch):
    _, selection, stored = _select(tmp_path, monkeypatch, "auto", longer_is_right=False)
    assert selection["path_max_hops"] == 2 and stored == "2"


def test_fixed_path_hops_trains_one_length(tmp_path, monkeypatch):
    trained, selection, _ = _select(tmp_path, monkeypatch, "fixed", longer_is_right=True)
    assert trained == [2] and selection["path_max_hops"] == 2
    assert not any("steps" in name for name in selection["beam_answer_hit"])

"""The constraint-branch model beside the pretrained path planner: trained on the branch examples of several KGs with
one family left out, and attached by the planner a KG without its own planner gets."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig, apply_overrides
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder import get_encoder
from stem_jax.kg.index import build_index
from stem_jax.plan import pretrained
from stem_jax.plan.branch_planner import BRANCHES_FOLDER, FEATURES, BranchModel, BranchPlanner
from stem_jax.plan.factory import PlannerSpec, build_planner
from stem_jax.plan.pretrained import KGPart, prepare_branch_parts, train_multi_kg_branch_model

FILMS = 40


def crew_part(family: str, second_topic: bool = True) -> KGPart:
    """One actor in every film, each film with its own crew member met through a crew-gig mediator. A question
    names the actor and one crew member, whose branch narrows the actor's films to the answer; without
    ``second_topic`` it names the actor alone and asks for all the films."""
    triples = []
    for i in range(FILMS):
        triples += [(f"Film {i}", "film.film.starring", "Ann Actor"), (f"Film {i}", "film.film.crew", f"m.gig{i}"),
                    (f"m.gig{i}", "film.crew_gig.member", f"Crew {i}")]
    if second_topic:
        questions = [Question(f"{family}{i}", f"which film with Ann Actor had Crew {i} in its crew",
                              ("Ann Actor", f"Crew {i}"), (f"Film {i}",)) for i in range(FILMS)]
    else:
        questions = [Question(f"{family}{i}", "which films star Ann Actor", ("Ann Actor",),
                              tuple(f"Film {j}" for j in range(FILMS))) for i in range(FILMS)]
    return KGPart(family, family, Dataset(f"files-{family}", questions, triples), questions[:30], questions[30:])


def embed(texts: list[str]) -> np.ndarray:
    rng = np.random.default_rng(0)
    table: dict[str, np.ndarray] = {}
    return np.stack([table.setdefault(t, rng.standard_normal(8)) for t in texts]).astype(np.float32)


def test_the_pooled_branch_model_leaves_the_excluded_family_out():
    parts = prepare_branch_parts([crew_part("films"), crew_part("single", second_topic=False)], embed,
                                 log=lambda _: None)
    assert parts[0].train and not parts[1].train  # one topic per question: nothing to branch from
    model = train_multi_kg_branch_model(parts, log=lambda _: None)
    assert model is not None and model.features == FEATURES
    assert model.report["trained_on"] == {"films": len(parts[0].train)}
    assert model.report["out_of_fold_f1_gain"][str(model.threshold)] > 0.5
    # the only KG whose questions name a second entity left out: no model, rather than one fitted on nothing
    assert train_multi_kg_branch_model(parts, exclude_family="films", log=lambda _: None) is None


@pytest.mark.skipif(not pretrained.available(), reason="the pretrained planner is not built")
def test_the_pretrained_planner_attaches_the_branch_model_stored_beside_it(tmp_path):
    try:
        from stem_jax.encoder import minilm_model_dir

        minilm_model_dir()
    except Exception as err:  # noqa: BLE001 - any missing piece of the shipped weights skips
        pytest.skip(f"MiniLM weights unavailable: {err}")
    folder = tmp_path / "model"
    shutil.copytree(pretrained.model_folder(), folder, ignore=shutil.ignore_patterns(BRANCHES_FOLDER))
    weights = tuple(0.0 for _ in FEATURES[:-1]) + (1.0,)  # every branch scores sigmoid(1) = 0.73
    BranchModel(weights, 0.5, report={"trained_on": {"films": 30}}).save(folder / BRANCHES_FOLDER)
    dataset = crew_part("films").dataset
    question = dataset.questions[3]  # "which film with Ann Actor had Crew 3 in its crew"
    index, encoder = build_index(dataset.triples), get_encoder(EncoderConfig())

    planner, info = build_planner(PlannerSpec("pattern", path=folder), StemConfig(), dataset, index,
                                  cache_root=tmp_path, encoder=encoder)
    assert isinstance(planner, BranchPlanner)
    assert info["branches"] == {"threshold": 0.5, "trained_on": {"films": 30}}
    [beam] = planner.plan_batch([question])
    assert any(set(entry.schema.constants()) == {"Ann Actor", "Crew 3"} for entry in beam)

    off = apply_overrides(StemConfig(), {"planner.branches": "off"})
    plain, info = build_planner(PlannerSpec("pattern", path=folder), off, dataset, index, cache_root=tmp_path,
                                encoder=encoder)
    assert not isinstance(plain, BranchPlanner) and "branches" not in info
    assert all(entry.schema.constants() == ["Ann Actor"] for entry in plain.plan_batch([question])[0])

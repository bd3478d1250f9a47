"""SCR on a KG with mediator nodes (Freebase CVTs): beams walk through them, answers never name one."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hashing_tables import hashing_kg

from stem_jax.config import EngineConfig, ScrConfig, StemConfig
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.kg.mediators import mediator_mask
from stem_jax.methods.base import MethodContext
from stem_jax.methods.scr.graph import build_neighbour_table
from stem_jax.methods.scr.model import ScrModel, ScrSpec
from stem_jax.methods.scr.search import SearchTables, beam_search, beam_search_reference
from stem_jax.methods.scr.train import init_params, prepare_data, train_scr

ROSTERS = {  # player: [(team, from year)], one roster mediator per spell, as Freebase writes a sports career
    "Ann Reed": [("Lions", "2001"), ("Bears", "2004")],
    "Bo Lane": [("Bears", "2002")],
    "Cy Hart": [("Hawks", "2003"), ("Lions", "2005"), ("Owls", "2007")],
    "Di Moss": [("Owls", "2006")],
}


def roster_kg() -> tuple[list[tuple[str, str, str]], list[Question]]:
    triples, questions, n = [], [], 0
    for player, spells in ROSTERS.items():
        triples.append((player, "nationality", "Utopia"))
        for team, year in spells:
            cvt = f"m.0r{n:03d}"
            n += 1
            triples += [(player, "pro_athlete.teams", cvt), (cvt, "roster.team", team), (cvt, "roster.from", year)]
        questions.append(Question(f"t/{player}", f"what team did {player} play for", (player,),
                                  tuple(t for t, _ in spells), 2,
                                  gold_path=(PathStep("pro_athlete.teams"), PathStep("roster.team"))))
        questions.append(Question(f"n/{player}", f"what country is {player} from", (player,), ("Utopia",), 1,
                                  gold_path=(PathStep("nationality"),)))
    return triples, questions


@pytest.fixture(scope="module")
def rosters():
    kg = hashing_kg(*roster_kg())
    kg.mediators = mediator_mask(kg.index.entities)
    assert kg.mediators.sum() == sum(len(s) for s in ROSTERS.values())
    return kg


def test_search_never_stops_on_a_mediator_and_matches_the_reference(rosters):
    index = rosters.index
    spec = ScrSpec(layers=2, dim=16, head_layers=1, text_dim=rosters.encoder.dim, num_relations=index.num_relations,
                   max_steps=3, tau=5.0, neighbours=8)  # a high τ: near-uniform steps, so every stop gets a beam
    model = ScrModel(spec)
    params = init_params(spec, jax.random.key(3))
    rng = np.random.default_rng(0)
    free = SearchTables(jnp.asarray(rng.normal(size=(index.num_entities, spec.dim)), jnp.float32),
                        jnp.asarray(rosters.embeddings.entities.array), jnp.asarray(rosters.embeddings.relations.array))
    walled = dataclasses.replace(free, no_stop=jnp.asarray(rosters.mediators))
    neighbours = build_neighbour_table(index, spec.neighbours)
    topics = np.asarray([index.entity_ids[p] for p in ROSTERS])
    questions = rng.normal(size=(topics.size, rosters.encoder.dim)).astype(np.float32)
    options = {"beam": 8, "threshold": 0.0, "max_steps": 3, "min_hops": 1}
    unmasked, _ = beam_search(model, params, free, neighbours, questions, topics, **options)
    assert any(h.stopped and rosters.mediators[h.entities[-1]] for row in unmasked for h in row)  # the case exists
    masked, _ = beam_search(model, params, walled, neighbours, questions, topics, **options)
    for row, topic in enumerate(topics):
        assert masked[row] and not any(h.stopped and rosters.mediators[h.entities[-1]] for h in masked[row])
        reference = beam_search_reference(model, params, walled, neighbours, questions[row], int(topic), **options)
        assert [(h.entities, h.relations) for h in masked[row]] == [(h.entities, h.relations) for h in reference]
        np.testing.assert_allclose([h.prob for h in masked[row]], [h.prob for h in reference], rtol=1e-4)


@pytest.mark.parametrize("skip_mediators", [True, False], ids=["skip", "keep"])
def test_scr_answers_never_name_a_mediator(rosters, tmp_path_factory, skip_mediators):
    run = tmp_path_factory.getbasetemp() / "scr-rosters"
    config = ScrConfig(layers=1, dim=8, head_layers=1, tau=0.5, beam=6, threshold=0.0, max_steps=3, neighbours=8,
                       batch_questions=4, steps=2, train_batch=4, eval_every=2, patience=0)
    if not (run / "best").exists():
        data = prepare_data(rosters.questions, rosters.questions[:2], rosters.index, rosters.embeddings,
                            rosters.encoder, config)
        train_scr(data, config, run, plot=False, log=lambda _: None)
    # One search step: a beam on a roster mediator is forced to end there, so only the answer rule keeps it out.
    stem = StemConfig(scr=dataclasses.replace(config, max_steps=1, min_hops=1),
                      engine=EngineConfig(skip_mediators=skip_mediators))
    dataset = Dataset(name="rosters", questions=rosters.questions, triples=rosters.triples)
    context = MethodContext(dataset, rosters.index, rosters.embeddings, rosters.encoder, stem,
                            options={"checkpoint": run})
    from stem_jax.methods.scr import build

    retrievals = build(context).retrieve(rosters.questions)
    returned = [e for r in retrievals for e, _ in r.answers]
    if skip_mediators:
        assert returned and not rosters.mediators[returned].any()
        assert sum(r.info["scr_mediator_ends"] for r in retrievals) > 0
    else:  # the engine's switch off: SCR as the paper has it, mediators and all
        assert rosters.mediators[returned].any()
        assert all("scr_mediator_ends" not in r.info for r in retrievals)

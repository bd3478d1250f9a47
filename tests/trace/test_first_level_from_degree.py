"""A run is first traced at the capacity-ladder level its anchor's degree asks for, and that changes no output.

``first_levels`` picks, per run, the lowest level whose capacities hold the anchor's incident triples (a first step
matches at most those); a run started there that would have fitted lower is cut to the lower level's arrays. The
pipeline's outputs are checked against the same runs started at every fixed level, on a hub KG whose 2-step Breadth
run overflows the first levels.
"""

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem import trace as trace_stage
from stem_jax.methods.stem.pipeline import StemPipeline
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.trace.tracer import TracerShapes, capacity_ladder, fitting_levels

LADDER = capacity_ladder(TracerShapes(frontier=8, node_matches=4), 64)  # (8, 4) (16, 8) (32, 16) (64, 32)
GENRES = [f"genre {g}" for g in range(12)]
TRIPLES = [(f"film {f}", "starred_actors", "Hub Actor") for f in range(20)]
TRIPLES += [(f"film {f}", "has_genre", GENRES[(f * 2 + k) % len(GENRES)]) for f in range(20) for k in range(2)]
TRIPLES += [("film 0", "directed_by", "Quiet Director")]
HUB = SchemaGraph((SchemaTriple("[ENT1]", "starred_actors", "Hub Actor"), SchemaTriple("[ENT1]", "has_genre", "[ENT2]")),
                  answer="[ENT2]", strategy="Breadth")
QUIET = SchemaGraph((SchemaTriple("[ENT1]", "directed_by", "Quiet Director"),), answer="[ENT1]", strategy="Breadth")
QUESTIONS = [Question("hub", "what genres are the films of Hub Actor", ("Hub Actor",), tuple(GENRES), hops=2),
             Question("quiet", "what did Quiet Director direct", ("Quiet Director",), ("film 0",), hops=1)]


def test_first_level_is_the_lowest_that_holds_the_anchors_degree():
    res = SimpleNamespace(degree=np.array([0, 3, 4, 5, 17, 33, 200]))
    entity = np.array([[0, 1, 2, 3, 4, 5, 6, -1]])
    expected = np.minimum(fitting_levels(LADDER, np.stack([res.degree[entity[0, :7]]] * 2, axis=1)), len(LADDER) - 1)
    assert trace_stage.first_levels(res, entity, LADDER).tolist() == [*expected.tolist(), 0]
    assert trace_stage.first_levels(res, entity, LADDER).tolist() == [0, 0, 0, 1, 3, 3, 3, 0]


def test_first_level_over_several_points_is_the_lowest_of_theirs():
    res = SimpleNamespace(degree=np.array([2, 40]))
    entity = np.array([[1, 1, -1], [0, 1, 1]])
    assert trace_stage.first_levels(res, entity, LADDER).tolist() == [0, 3, 0]


def test_a_single_level_ladder_starts_every_run_at_it():
    res = SimpleNamespace(degree=np.array([500]))
    assert trace_stage.first_levels(res, np.zeros((1, 3), np.int64), LADDER[:1]).tolist() == [0, 0, 0]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    index = build_index(TRIPLES)
    encoder = HashingEncoder(dim=64)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=256, progress=False)
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, engine=dataclasses.replace(
        config.engine, frontier=8, node_matches=4, window=16, batch_breadth=8, batch_precision=8, max_frontier=128))
    pipeline = StemPipeline(Dataset("hub", QUESTIONS, TRIPLES), index, embeddings, encoder, config)
    plans = {"hub": [HUB], "quiet": [QUIET]}
    runs, _ = pipeline.plan_all(QUESTIONS, lambda q, _i: plans[q.qid])
    pipeline.embed_texts([t for rs in runs for r in rs for t in r.plan.step_texts()], show_progress=False)
    return pipeline, [r for rs in runs for r in rs]


@pytest.mark.parametrize("level", range(5))
def test_runs_started_at_any_level_trace_what_their_degree_level_traces(hub, monkeypatch, level):
    pipeline, runs = hub
    by_degree, _ = pipeline.trace(runs)
    assert by_degree[0]["capacity"] >= 32 and by_degree[1]["capacity"] == 8  # the hub climbs, the quiet run does not
    top = len(pipeline.ladder_for(False)) - 1
    monkeypatch.setattr(trace_stage, "first_levels",
                        lambda res, entity, ladder: np.full(entity.shape[1], min(level, top), np.int64))
    fixed, _ = pipeline.trace(runs)
    for got, want in zip(fixed, by_degree, strict=True):
        assert got["capacity"] == want["capacity"]
        for field in ("nodes", "scores", "via", "parents", "overflow"):
            np.testing.assert_array_equal(got[field], want[field], err_msg=field)

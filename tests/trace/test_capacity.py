"""Adaptive capacities: a Breadth run that overflows is re-traced one power-of-two bucket up.

The KG has a hub actor in 20 films, each with 2 genres; a 2-step Breadth plan fans out to 20
films and 40 genre bindings, far past a frontier of 8. With escalation the run ends in a bucket
that holds everything and returns what the uncapped reference tracer returns; with the ladder
capped below that, the overflow is still reported.
"""

import dataclasses

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem.pipeline import StemPipeline
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.trace.reference import trace_reference
from stem_jax.trace.tracer import TracerShapes, capacity_ladder
from stem_jax.trace.types import TraceOptions

GENRES = [f"genre {g}" for g in range(12)]
TRIPLES = [(f"film {f}", "starred_actors", "Hub Actor") for f in range(20)]
TRIPLES += [(f"film {f}", "has_genre", GENRES[(f * 2 + k) % len(GENRES)]) for f in range(20) for k in range(2)]
SCHEMA = SchemaGraph((SchemaTriple("[ENT1]", "starred_actors", "Hub Actor"), SchemaTriple("[ENT1]", "has_genre", "[ENT2]")),
                     answer="[ENT2]", strategy="Breadth")
QUESTION = Question("hub", "what genres are the films of Hub Actor", ("Hub Actor",), tuple(GENRES), hops=2)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    index = build_index(TRIPLES)
    encoder = HashingEncoder(dim=64)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=256, progress=False)
    return Dataset("hub", [QUESTION], TRIPLES), index, encoder, embeddings


def _trace(hub, max_frontier):
    dataset, index, encoder, embeddings = hub
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, engine=dataclasses.replace(
        config.engine, frontier=8, node_matches=8, window=16, batch_breadth=8, batch_precision=8,
        max_frontier=max_frontier))
    evaluator = StemPipeline(dataset, index, embeddings, encoder, config)
    runs, _ = evaluator.plan_all([QUESTION], lambda q, _i: [SCHEMA])
    evaluator.embed_texts(runs[0][0].plan.step_texts(), show_progress=False)
    outputs, _ = evaluator.trace(runs[0])
    return evaluator, runs[0], outputs


def test_ladder_doubles_frontier_and_matches():
    ladder = capacity_ladder(TracerShapes(frontier=64, node_matches=16), 512)
    assert [(s.frontier, s.node_matches) for s in ladder] == [(64, 16), (128, 32), (256, 64), (512, 128)]
    assert capacity_ladder(TracerShapes(frontier=64), 64) == [TracerShapes(frontier=64)]


def test_overflowing_run_is_retraced_until_it_fits(hub):
    evaluator, runs, outputs = _trace(hub, max_frontier=128)
    out = outputs[0]
    assert int(out["overflow"]) == 0
    assert out["capacity"] == 64  # 8 -> 16 -> 32 -> 64 holds 20 films x 2 genres
    _, index, _, embeddings = hub
    run = runs[0]
    step_emb = evaluator.text_emb[[evaluator.text_rows[t] for t in run.plan.step_texts()]]
    ref = trace_reference(index, run.plan, strategy="Breadth", anchor=int(out["nodes"][0, 0]),
                          anchor_score=float(out["scores"][0, 0]), triple_emb=embeddings.triples.array.astype(np.float32),
                          step_emb=step_emb, config=evaluator.config.tracer,
                          options=TraceOptions(relation_bonus=True))  # uncapped
    assert ref.overflow == 0
    live = out["nodes"][2] >= 0
    assert sorted(out["nodes"][2][live].tolist()) == sorted(ref.nodes[2])
    record = evaluator.record(QUESTION, runs, outputs, {})
    assert set(record["prediction"]) == set(GENRES) and record["capacity"] == 64


def test_overflow_is_reported_when_the_largest_bucket_is_too_small(hub):
    evaluator, _, outputs = _trace(hub, max_frontier=16)
    assert outputs[0]["capacity"] == 16 and int(outputs[0]["overflow"]) > 0


def test_high_retries_in_the_shared_steps_bucket_return_the_runs_own_arrays(hub):
    """Retries from SHARED_BUCKET_LEVEL up run in the widest steps bucket planned so far (here one noted
    16-step bucket): the 2-step run comes back with its own bucket's slots and the same bindings."""
    evaluator, runs, outputs = _trace(hub, max_frontier=128)
    assert outputs[0]["capacity"] >= 8 << evaluator.SHARED_BUCKET_LEVEL  # retried at least that high
    evaluator.shared_bucket = 16
    again, _ = evaluator.trace(runs)
    assert again[0]["capacity"] == outputs[0]["capacity"]
    for field in ("nodes", "scores", "via", "parents", "overflow"):
        np.testing.assert_array_equal(again[0][field], outputs[0][field], err_msg=field)

"""The JAX tracer equals the level-order reference under every KG convention: direction (undirected |
directed) x used-triple rule (run | branch | step), Precision and Breadth, tight and roomy capacities.

As in test_tracer_equivalence.py, embeddings lie on a dyadic grid so every score is exact in float32
and ties (part of what is checked) break identically. The KG has paired inverse relations and
self-loops, so walking back along a pair and re-using a loop are exercised.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracer_checks import assert_row_equals_reference, random_triples

from stem_jax.config import TracerConfig
from stem_jax.kg.index import build_index
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, SchemaTriple
from stem_jax.trace.reference import trace_reference
from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch
from stem_jax.trace.types import TraceOptions

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL = 12, 48, 8, 4, 3


@st.composite
def case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    triples = random_triples(rng, N_NODES, N_REL, draws=40, inverse=0.5)
    # self-loops and a ring first (every entity present), then the random part, cut to a fixed size so
    # every example shares the compiled shapes
    fixed = [(f"e{i}", "r0", f"e{i}") for i in range(0, N_NODES, 4)]
    fixed += [(f"e{i}", "r1", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    triples = list(dict.fromkeys(fixed + triples))[:N_TRIPLES]
    k = 0
    while len(triples) < N_TRIPLES:
        triples = list(dict.fromkeys(triples + [(f"e{k % N_NODES}", "r2", f"e{(k * 5 + 1) % N_NODES}")]))
        k += 1
    index = build_index(triples)
    assert index.num_triples == N_TRIPLES
    grid = lambda *shape: (rng.integers(-2, 3, shape) / 4).astype(np.float32)  # noqa: E731
    n_steps = draw(st.integers(1, MAX_STEPS))
    parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
    steps = np.asarray([(parents[s], s + 1, int(rng.integers(-1, len(index.relations)))) for s in range(n_steps)],
                       np.int32)
    return {
        "index": index, "triple_emb": grid(index.num_triples, DIM), "step_emb": grid(n_steps, DIM), "steps": steps,
        "forward": tuple(bool(x) for x in rng.random(n_steps) < 0.5),
        "anchor": int(rng.integers(0, index.num_entities)),
        "precision": draw(st.booleans()), "bonus": False,  # the bonus is covered by test_tracer_equivalence
        "theta": draw(st.sampled_from([0.0, 0.25, 0.5])),
        "direction": draw(st.sampled_from(["undirected", "directed"])),
        "used": draw(st.sampled_from(["run", "branch", "step"])),
    }


SHAPES = [TracerShapes(frontier=4, node_matches=2, window=8, guidance=4),
          TracerShapes(frontier=16, node_matches=16, window=16, guidance=4)]


@pytest.mark.parametrize("shapes", SHAPES, ids=["tight", "roomy"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case())
def test_jax_tracer_equals_reference_under_every_convention(shapes, c):
    index = c["index"]
    config = TracerConfig(theta=c["theta"], tau=0.0)
    schema = SchemaGraph((SchemaTriple("a", "r", "[ENT1]"),), answer="[ENT1]")  # only the arrays matter here
    plan = GroundedPlan(schema=schema, anchor="a", steps=c["steps"], step_edges=tuple(range(len(c["steps"]))),
                        answer_slot=1, forward=c["forward"])
    options = TraceOptions(relation_bonus=c["bonus"], breadth_cap=shapes.node_matches, frontier_cap=shapes.frontier,
                           order="level", direction=c["direction"], used=c["used"])
    ref = trace_reference(index, plan, strategy="Precision" if c["precision"] else "Breadth", anchor=c["anchor"],
                          anchor_score=1.0, triple_emb=c["triple_emb"], step_emb=c["step_emb"], config=config,
                          options=options)
    n_steps = len(c["steps"])
    steps = np.full((1, MAX_STEPS, 3), -1, np.int32)
    steps[0, :n_steps] = c["steps"]
    step_emb = np.zeros((1, MAX_STEPS, DIM), np.float32)
    step_emb[0, :n_steps] = c["step_emb"]
    forward = np.ones((1, MAX_STEPS), bool)
    forward[0, :n_steps] = c["forward"]
    batch = TraceBatch(steps=steps, step_mask=np.arange(MAX_STEPS)[None] < n_steps, step_emb=step_emb,
                       anchor=np.asarray([c["anchor"]], np.int32), anchor_score=np.ones(1, np.float32),
                       guidance=np.full((1, shapes.guidance), -1, np.int32), forward=forward)
    out = trace_batch(KGArrays.from_index(index, c["triple_emb"]), batch, Hyper(jnp.float32(0.0), jnp.float32(c["theta"])),
                      shapes=shapes, precision=c["precision"], relation_bonus=c["bonus"], direction=c["direction"],
                      used=c["used"])
    assert_row_equals_reference(out, ref, n_steps)


def test_directed_needs_orientation():
    index = build_index([("a", "r", "b")])
    batch = TraceBatch(steps=np.asarray([[[0, 1, 0]]], np.int32), step_mask=np.ones((1, 1), bool),
                       step_emb=np.zeros((1, 1, 2), np.float32), anchor=np.zeros(1, np.int32),
                       anchor_score=np.ones(1, np.float32), guidance=np.full((1, 4), -1, np.int32))
    with pytest.raises(ValueError, match="forward"):
        trace_batch(KGArrays.from_index(index, np.zeros((1, 2), np.float32)), batch,
                    Hyper(jnp.float32(0.0), jnp.float32(0.0)), shapes=SHAPES[0], precision=False, direction="directed")

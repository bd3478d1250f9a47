"""The JAX tracer must return exactly what the level-order reference tracer returns.

Embeddings live on a dyadic grid (multiples of 1/4 with few terms), so every dot product and
sum is exact in float32 and both tracers see identical scores, ties included: tie-breaking is
part of what is being checked.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracer_checks import assert_row_equals_reference

from stem_jax.config import TracerConfig
from stem_jax.kg.index import build_index
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, SchemaTriple
from stem_jax.trace.reference import anchor_reference, trace_reference
from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, anchor_batch, trace_batch
from stem_jax.trace.types import TraceOptions

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL = 24, 64, 8, 4, 3


@st.composite
def kg_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hub = 0
    heads = rng.integers(0, N_NODES, N_TRIPLES)
    heads[: N_TRIPLES // 3] = hub  # one hub with a third of the triples, wider than any window
    tails = rng.integers(0, N_NODES, N_TRIPLES)
    rels = rng.integers(0, N_REL, N_TRIPLES)
    triples = list(dict.fromkeys((f"e{h}", f"r{r}", f"e{t}") for h, r, t in zip(heads, rels, tails, strict=True)))
    # every node name present keeps the entity vocabulary size fixed
    triples += [(f"e{i}", "r0", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    triples = list(dict.fromkeys(triples))[:N_TRIPLES]
    while len(triples) < N_TRIPLES:
        triples.append((f"e{len(triples) % N_NODES}", f"r{len(triples) % N_REL}", f"e{(len(triples) * 7) % N_NODES}"))
        triples = list(dict.fromkeys(triples))
    index = build_index(triples)
    grid = lambda *shape: (rng.integers(-2, 3, shape) / 4).astype(np.float32)  # noqa: E731
    n_steps = draw(st.integers(1, MAX_STEPS))
    parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
    steps = np.asarray([(parents[s], s + 1, int(rng.integers(-1, N_REL))) for s in range(n_steps)], np.int32)
    guidance = rng.choice(index.num_entities, size=int(rng.integers(0, 10)), replace=False)
    return {
        "index": index,
        "triple_emb": grid(index.num_triples, DIM),
        "entity_emb": grid(index.num_entities, DIM),
        "mention": grid(DIM),
        "step_emb": grid(n_steps, DIM),
        "steps": steps,
        "guidance": guidance.astype(np.int32),
        "precision": draw(st.booleans()),
        "bonus": draw(st.booleans()),
        "tau_admits": draw(st.booleans()),
        "theta": draw(st.sampled_from([0.0, 0.25, 0.5])),
        "tau": draw(st.sampled_from([0.0, 0.5])),
        "lam": draw(st.sampled_from([1.0, 1.5])),
        # entities the question names: none, the exact topic id, or case/accent twins (FOLDED)
        "named": draw(st.sampled_from([(), ((3, 2),), ((5, 1), (7, 1)), ((2, 2), (9, 1))])),
    }


def _plan(steps: np.ndarray) -> GroundedPlan:
    schema = SchemaGraph((SchemaTriple("a", "r", "[ENT1]"),), answer="[ENT1]")  # only the arrays matter here
    return GroundedPlan(schema=schema, anchor="a", steps=steps, step_edges=tuple(range(len(steps))), answer_slot=1)


SHAPES = [TracerShapes(frontier=4, node_matches=2, window=8, guidance=16),
          TracerShapes(frontier=8, node_matches=8, window=16, guidance=16)]


@pytest.mark.parametrize("shapes", SHAPES, ids=["tight", "roomy"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=kg_case())
def test_jax_tracer_equals_level_reference(shapes, case):
    index = case["index"]
    config = TracerConfig(lam=case["lam"], tau=case["tau"], theta=case["theta"], top_n=5)
    entity_mask = np.zeros(index.num_entities, bool)
    entity_mask[case["guidance"]] = True
    triple_mask = entity_mask[index.triples[:, 0]] & entity_mask[index.triples[:, 2]]
    strategy = "Precision" if case["precision"] else "Breadth"
    options = TraceOptions(relation_bonus=case["bonus"], tau_admits=case["tau_admits"], breadth_cap=shapes.node_matches,
                           frontier_cap=shapes.frontier, order="level")

    anchor, anchor_score = anchor_reference(case["entity_emb"], case["mention"], config.top_n, config.lam, entity_mask,
                                            case["named"])
    guidance = np.full((1, shapes.guidance), -1, np.int32)
    guidance[0, : len(case["guidance"])] = case["guidance"]
    named = np.full((1, 4), -1, np.int32)
    level = np.zeros((1, 4), np.int32)
    for col, (entity, lvl) in enumerate(case["named"]):
        named[0, col], level[0, col] = entity, lvl
    jax_anchor, jax_score = anchor_batch(jnp.asarray(case["entity_emb"]), jnp.asarray(case["mention"][None]),
                                         jnp.asarray(guidance), jnp.float32(config.lam), jnp.asarray(named),
                                         jnp.asarray(level), top_n=config.top_n)
    assert int(jax_anchor[0]) == anchor and float(jax_score[0]) == anchor_score

    ref = trace_reference(index, _plan(case["steps"]), strategy=strategy, anchor=anchor, anchor_score=anchor_score,
                          triple_emb=case["triple_emb"], step_emb=case["step_emb"], config=config, options=options,
                          triple_guidance=triple_mask)

    n_steps = len(case["steps"])
    steps = np.full((1, MAX_STEPS, 3), -1, np.int32)
    steps[0, :n_steps] = case["steps"]
    step_emb = np.zeros((1, MAX_STEPS, DIM), np.float32)
    step_emb[0, :n_steps] = case["step_emb"]
    batch = TraceBatch(steps=jnp.asarray(steps), step_mask=jnp.asarray(np.arange(MAX_STEPS)[None] < n_steps),
                       step_emb=jnp.asarray(step_emb), anchor=jnp.asarray([anchor], jnp.int32),
                       anchor_score=jnp.asarray([anchor_score], jnp.float32), guidance=jnp.asarray(guidance))
    kg = KGArrays.from_index(index, case["triple_emb"])
    out = trace_batch(kg, batch, Hyper(jnp.float32(config.tau), jnp.float32(config.theta)), shapes=shapes,
                      precision=case["precision"], relation_bonus=case["bonus"], tau_admits=case["tau_admits"])
    assert_row_equals_reference(out, ref, n_steps)

"""Used triples are per run: a batch of runs over one KG must give each run what the level-order
reference gives it alone (the bounded per-run used list never leaks between runs, never drops).

Same dyadic-grid embeddings as test_tracer_equivalence (exact float32 sums, ties included).
"""

import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracer_checks import filled_to

from kernels.membership import row_contains
from stem_jax.config import TracerConfig
from stem_jax.kg.index import build_index
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, SchemaTriple
from stem_jax.trace.reference import trace_reference
from stem_jax.trace.tracer import (
    Hyper,
    KGArrays,
    TraceBatch,
    TracerShapes,
    sorted_used,
    trace_batch,
)
from stem_jax.trace.types import TraceOptions

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL, N_RUNS = 12, 48, 4, 4, 2, 5
SHAPES = TracerShapes(frontier=4, node_matches=3, window=8, guidance=8)


def _plan(steps: np.ndarray) -> GroundedPlan:
    schema = SchemaGraph((SchemaTriple("a", "r", "[ENT1]"),), answer="[ENT1]")
    return GroundedPlan(schema=schema, anchor="a", steps=steps, step_edges=tuple(range(len(steps))), answer_slot=1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), precision=st.booleans(), theta=st.sampled_from([-0.25, 0.0, 0.25]))
def test_batch_of_runs_equals_reference_per_run(seed, precision, theta):
    rng = np.random.default_rng(seed)
    heads = rng.integers(0, N_NODES, N_TRIPLES)
    heads[: N_TRIPLES // 4] = 0  # a hub, so runs revisit it and the used list matters
    tails = rng.integers(0, N_NODES, N_TRIPLES)
    triples = [(f"e{h}", f"r{r}", f"e{t}") for h, r, t in zip(heads, rng.integers(0, N_REL, N_TRIPLES), tails,
                                                            strict=True)]
    triples += [(f"e{i}", "r0", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    index = build_index(filled_to(triples, N_TRIPLES + N_NODES, N_NODES, "r1"))
    grid = lambda *shape: (rng.integers(-2, 3, shape) / 4).astype(np.float32)  # noqa: E731
    triple_emb = grid(index.num_triples, DIM)
    config = TracerConfig(tau=0.0, theta=theta)
    options = TraceOptions(breadth_cap=SHAPES.node_matches, frontier_cap=SHAPES.frontier, order="level")

    steps = np.full((N_RUNS, MAX_STEPS, 3), -1, np.int32)
    step_emb = np.zeros((N_RUNS, MAX_STEPS, DIM), np.float32)
    mask = np.zeros((N_RUNS, MAX_STEPS), bool)
    anchors = rng.integers(0, index.num_entities, N_RUNS).astype(np.int32)
    anchors[0] = 0  # the hub
    anchors[-1] = -1  # a padding run
    refs = []
    for run in range(N_RUNS):
        n_steps = int(rng.integers(1, MAX_STEPS + 1))
        parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
        run_steps = np.asarray([(parents[s], s + 1, -1) for s in range(n_steps)], np.int32)
        steps[run, :n_steps] = run_steps
        step_emb[run, :n_steps] = grid(n_steps, DIM)
        mask[run, :n_steps] = True
        if anchors[run] >= 0:
            refs.append(trace_reference(index, _plan(run_steps), strategy="Precision" if precision else "Breadth",
                                        anchor=int(anchors[run]), anchor_score=1.0, triple_emb=triple_emb,
                                        step_emb=step_emb[run, :n_steps], config=config, options=options))
    batch = TraceBatch(steps=jnp.asarray(steps), step_mask=jnp.asarray(mask), step_emb=jnp.asarray(step_emb),
                       anchor=jnp.asarray(anchors), anchor_score=jnp.ones(N_RUNS, jnp.float32),
                       guidance=jnp.full((N_RUNS, SHAPES.guidance), -1, jnp.int32))
    out = trace_batch(KGArrays.from_index(index, triple_emb), batch, Hyper(jnp.float32(0.0), jnp.float32(theta)),
                      shapes=SHAPES, precision=precision)
    for run, ref in enumerate(refs):
        for slot in range(len(ref.nodes)):
            live = np.asarray(out.nodes[run, slot]) >= 0
            assert np.asarray(out.nodes[run, slot])[live].tolist() == ref.nodes[slot], (run, slot)
            assert np.asarray(out.via[run, slot])[live].tolist() == ref.via[slot], (run, slot)
            assert np.asarray(out.parents[run, slot])[live].tolist() == ref.parents[slot], (run, slot)
            np.testing.assert_allclose(np.asarray(out.scores[run, slot])[live], ref.scores[slot], atol=1e-5)
        assert int(out.overflow[run]) == ref.overflow
    assert (np.asarray(out.nodes[-1]) == -1).all() and int(out.overflow[-1]) == 0


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 5), frontier=st.sampled_from([1, 2, 3, 4, 8]))
def test_sorted_used_membership_matches_sets(seed, steps, frontier):
    """``sorted_used`` + ``row_contains`` answer "was this triple bound in an earlier slot of this run"."""
    rng = np.random.default_rng(seed)
    via = rng.integers(0, 30, (3, steps + 1, frontier)).astype(np.int32)
    via[rng.random(via.shape) < 0.4] = -1  # empty bindings
    via[:, 0] = -1  # the anchor slot binds no triple
    rows = sorted_used(jnp.asarray(via))
    assert rows.shape[1] >= steps * frontier and rows.shape[1] & (rows.shape[1] - 1) == 0  # a power of two
    row = rng.integers(0, 3, 64).astype(np.int32)
    value = rng.integers(0, 32, 64).astype(np.int32)
    got = np.asarray(row_contains(rows, jnp.asarray(row), jnp.asarray(value)))
    want = np.asarray([v in set(via[r].ravel().tolist()) for r, v in zip(row, value, strict=True)])
    np.testing.assert_array_equal(got, want)

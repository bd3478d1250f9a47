"""Under compact triple rows (int8 codes, per-row scale, projection and mean) the JAX tracer still returns
exactly what the level-order reference tracer returns, and float16 KG arrays trace as before.

Codes, scales, basis, mean and step embeddings are small dyadic numbers, so every projection, dot
product, scale and bias is exact in float32 and both tracers see identical scores, ties included.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracer_checks import assert_row_equals_reference

from stem_jax.config import TracerConfig
from stem_jax.encoder.compact import CompactRows, compact_from_array
from stem_jax.kg.index import build_index
from stem_jax.plan.schema import GroundedPlan, SchemaGraph, SchemaTriple
from stem_jax.trace.reference import trace_reference
from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch
from stem_jax.trace.types import TraceOptions

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL = 20, 56, 8, 3, 3


def _index(rng):
    """Always N_TRIPLES triples over all N_NODES entities (one compiled tracer per strategy and format)."""
    triples = [(f"e{i}", "r0", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    heads = rng.integers(0, N_NODES, 4 * N_TRIPLES)
    heads[: N_TRIPLES // 3] = 0  # a hub wider than any window
    triples += [(f"e{h}", f"r{r}", f"e{t}") for h, r, t in
                zip(heads, rng.integers(0, N_REL, 4 * N_TRIPLES), rng.integers(0, N_NODES, 4 * N_TRIPLES), strict=True)]
    return build_index(list(dict.fromkeys(triples))[:N_TRIPLES])


def _rows(rng, m, fmt):
    dyadic = lambda *shape: (rng.integers(-2, 3, shape) / 4).astype(np.float32)  # noqa: E731
    k = DIM if fmt == "int8" else 4
    codes = rng.integers(-3, 4, (m, k)).astype(np.int8 if fmt != "pca" else np.float16)
    scale = (2.0 ** -rng.integers(0, 3, m)).astype(np.float32) if fmt != "pca" else None
    basis = dyadic(DIM, k) if fmt != "int8" else None
    mean = dyadic(DIM) if fmt != "int8" else None
    return CompactRows(fmt, codes, scale, basis, mean)


def _plan(steps):
    schema = SchemaGraph((SchemaTriple("a", "r", "[ENT1]"),), answer="[ENT1]")
    return GroundedPlan(schema=schema, anchor="a", steps=steps, step_edges=tuple(range(len(steps))), answer_slot=1)


def _trace_both(index, rows, step_emb, steps, precision, theta, shapes, guidance=()):
    config = TracerConfig(tau=0.5, theta=theta, top_n=5)
    options = TraceOptions(relation_bonus=True, breadth_cap=shapes.node_matches, frontier_cap=shapes.frontier,
                           order="level")
    entity_mask = np.zeros(index.num_entities, bool)
    entity_mask[list(guidance)] = True
    triple_mask = entity_mask[index.triples[:, 0]] & entity_mask[index.triples[:, 2]]
    ref = trace_reference(index, _plan(steps), strategy="Precision" if precision else "Breadth", anchor=0,
                          anchor_score=1.0, triple_emb=rows, step_emb=step_emb, config=config, options=options,
                          triple_guidance=triple_mask)
    n = len(steps)
    padded_steps = np.full((1, MAX_STEPS, 3), -1, np.int32)
    padded_steps[0, :n] = steps
    padded_emb = np.zeros((1, MAX_STEPS, DIM), np.float32)
    padded_emb[0, :n] = step_emb
    g = np.full((1, shapes.guidance), -1, np.int32)
    g[0, : len(guidance)] = list(guidance)
    batch = TraceBatch(jnp.asarray(padded_steps), jnp.asarray(np.arange(MAX_STEPS)[None] < n), jnp.asarray(padded_emb),
                       jnp.asarray([0], jnp.int32), jnp.asarray([1.0], jnp.float32), jnp.asarray(g))
    kg = KGArrays.from_index(index, rows)
    assert kg.query_dim == DIM
    out = trace_batch(kg, batch, Hyper(jnp.float32(config.tau), jnp.float32(theta)), shapes=shapes,
                      precision=precision, relation_bonus=True)
    return ref, out


SHAPES = [TracerShapes(frontier=4, node_matches=2, window=8, guidance=8),
          TracerShapes(frontier=8, node_matches=8, window=16, guidance=8)]


@pytest.mark.parametrize("shapes", SHAPES, ids=["tight", "roomy"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), fmt=st.sampled_from(["int8", "pca", "pca-int8"]), precision=st.booleans(),
       theta=st.sampled_from([0.0, 0.25, 0.5]))
def test_jax_tracer_equals_reference_on_compact_rows(shapes, seed, fmt, precision, theta):
    rng = np.random.default_rng(seed)
    index = _index(rng)
    rows = _rows(rng, index.num_triples, fmt)
    n_steps = int(rng.integers(1, MAX_STEPS + 1))
    parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
    steps = np.asarray([(parents[s], s + 1, int(rng.integers(-1, N_REL))) for s in range(n_steps)], np.int32)
    step_emb = (rng.integers(-2, 3, (n_steps, DIM)) / 4).astype(np.float32)
    guidance = rng.choice(index.num_entities, size=int(rng.integers(0, 6)), replace=False).tolist()
    ref, out = _trace_both(index, rows, step_emb, steps, precision, theta, shapes, guidance)
    assert_row_equals_reference(out, ref, n_steps)


def test_float16_rows_take_the_plain_path():
    rng = np.random.default_rng(3)
    index = _index(rng)
    table = (rng.integers(-2, 3, (index.num_triples, DIM)) / 4).astype(np.float16)
    kg = KGArrays.from_index(index, table)
    assert kg.triple_scale is None and kg.row_basis is None and kg.row_mean is None
    assert kg.query_dim == DIM and kg.triple_emb.dtype == jnp.float16
    compact = KGArrays.from_index(index, compact_from_array(table, "pca4-int8"))
    assert compact.triple_emb.shape == (index.num_triples, 4) and compact.triple_emb.dtype == jnp.int8
    assert compact.query_dim == DIM

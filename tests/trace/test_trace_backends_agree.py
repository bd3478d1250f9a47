"""The flat trace backend returns exactly what the blocks backend returns: bindings, scores (bit for bit),
via triples, parents, overflow and needs, for batches of runs under every KG convention and capacity.

Scores are random float16 rows (not a dyadic grid): the backends must compute each score by the same
operations, so equality is exact even where rounding happens. Small flat blocks make a step span several.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stem_jax.kg.index import build_index
from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, resolve_backend, trace_batch

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL, N_RUNS = 14, 64, 8, 4, 3, 6
SHAPES = [TracerShapes(frontier=4, node_matches=2, window=8, guidance=8),  # tight: overflow is common
          TracerShapes(frontier=8, node_matches=4, window=16, guidance=8, flat_edges=16)]  # several flat blocks
# static switches (each a compile per backend and shape): every convention and strategy at least once
SWITCHES = [
    {"precision": False, "relation_bonus": True, "tau_admits": True, "direction": "undirected", "used": "run",
     "halt_overflowed": False},
    {"precision": False, "relation_bonus": False, "tau_admits": False, "direction": "directed", "used": "branch",
     "halt_overflowed": True},
    {"precision": False, "relation_bonus": True, "tau_admits": False, "direction": "undirected", "used": "step",
     "halt_overflowed": True},
    {"precision": True, "relation_bonus": True, "tau_admits": True, "direction": "undirected", "used": "run",
     "halt_overflowed": False},
    {"precision": True, "relation_bonus": False, "tau_admits": True, "direction": "directed", "used": "branch",
     "halt_overflowed": True},
]


@st.composite
def batch_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    triples = []
    for _ in range(60):
        h, t, r = int(rng.integers(0, N_NODES)), int(rng.integers(0, N_NODES)), int(rng.integers(0, N_REL))
        triples.append((f"e{0 if rng.random() < 0.3 else h}", f"r{r}", f"e{t}"))  # a hub
    fixed = [(f"e{i}", "r0", f"e{i}") for i in range(0, N_NODES, 5)]  # self-loops
    fixed += [(f"e{i}", "r1", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    triples = list(dict.fromkeys(fixed + triples))[:N_TRIPLES]
    # fill up with r2 edges; k walks every (head, tail) pair, so a filler that is already there is passed over
    # (a filler indexed by len(triples) alone repeated a present triple forever and hung the test)
    k = len(triples)
    while len(triples) < N_TRIPLES:
        triples = list(dict.fromkeys(triples + [(f"e{k % N_NODES}", "r2", f"e{(3 * k + k // N_NODES) % N_NODES}")]))
        k += 1
    index = build_index(triples)
    triple_emb = (rng.standard_normal((index.num_triples, DIM)) / np.sqrt(DIM)).astype(np.float16)
    steps = np.full((N_RUNS, MAX_STEPS, 3), -1, np.int32)
    mask = np.zeros((N_RUNS, MAX_STEPS), bool)
    for run in range(N_RUNS):
        n_steps = int(rng.integers(1, MAX_STEPS + 1))
        parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
        steps[run, :n_steps] = [(parents[s], s + 1, int(rng.integers(-1, N_REL))) for s in range(n_steps)]
        mask[run, :n_steps] = True
    anchors = rng.integers(0, index.num_entities, N_RUNS).astype(np.int32)
    anchors[0], anchors[-1] = 0, -1  # the hub, and a padding run
    guidance = np.full((N_RUNS, 8), -1, np.int32)
    for run in range(N_RUNS):
        g = rng.choice(index.num_entities, size=int(rng.integers(0, 8)), replace=False)
        guidance[run, : len(g)] = g
    batch = TraceBatch(steps=jnp.asarray(steps), step_mask=jnp.asarray(mask),
                       step_emb=jnp.asarray(rng.standard_normal((N_RUNS, MAX_STEPS, DIM)).astype(np.float32)),
                       anchor=jnp.asarray(anchors), anchor_score=jnp.asarray(rng.random(N_RUNS).astype(np.float32)),
                       guidance=jnp.asarray(guidance), forward=jnp.asarray(rng.random((N_RUNS, MAX_STEPS)) < 0.5))
    hyper = Hyper(jnp.float32(draw(st.sampled_from([0.0, 0.3]))), jnp.float32(draw(st.sampled_from([-0.2, 0.1, 0.4]))))
    return KGArrays.from_index(index, triple_emb), batch, hyper


@pytest.mark.parametrize("static", SWITCHES, ids=["breadth-run", "breadth-branch-directed", "breadth-step",
                                                   "precision-run", "precision-branch-directed"])
@pytest.mark.parametrize("shapes", SHAPES, ids=["tight", "multi-block"])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=batch_case())
def test_flat_backend_equals_blocks_backend(shapes, static, case):
    kg, batch, hyper = case
    blocks = trace_batch(kg, batch, hyper, shapes=shapes, backend="blocks", **static)
    flat = trace_batch(kg, batch, hyper, shapes=shapes, backend="flat", **static)
    for name in blocks._fields:
        np.testing.assert_array_equal(np.asarray(getattr(flat, name)), np.asarray(getattr(blocks, name)), err_msg=name)


def test_auto_backend_is_blocks_on_the_cpu_and_unknown_names_fail():
    assert resolve_backend("auto") == "blocks" and resolve_backend("flat") == "flat"
    with pytest.raises(ValueError, match="unknown tracer backend"):
        resolve_backend("pallas")

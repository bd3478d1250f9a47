"""The capacity ladder's shortcuts give what climbing it one level at a time gives.

``TraceOutput.need`` holds a run's capacity needs up to the first step that overflowed, and
``fitting_levels`` turns it into a ladder level. The pipeline uses it two ways: a run that
overflowed goes straight to the lowest level that holds that step, and a run traced higher than
it needed is cut to the lowest level that holds it. Both are exact only if, whatever level a run
was traced at, (a) a trace without overflow names the level the old climb stops at, and its
arrays cut to that frontier are that level's arrays, and (b) a trace with overflow names a level
no lower than where the climb stops, or the top. Checked here on random KGs (hub, paired inverse
relations, self-loops), several runs per batch, every KG convention, Breadth and Precision, with
dyadic embeddings so every score and tie is exact.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracer_checks import filled_to, random_triples

from stem_jax.kg.index import build_index
from stem_jax.trace.tracer import (
    Hyper,
    KGArrays,
    TraceBatch,
    TracerShapes,
    capacity_ladder,
    fitting_levels,
    trace_batch,
)

N_NODES, N_TRIPLES, DIM, MAX_STEPS, N_REL, RUNS = 12, 56, 8, 4, 3, 4
LADDER = capacity_ladder(TracerShapes(frontier=1, node_matches=1, window=8, guidance=4), 16)
# (relation bonus, direction, used-triple rule): MetaQA's, and the other rules each once (a compile per
# level and switch set is what this file's time goes to)
SWITCHES = [(True, "undirected", "run"), (False, "directed", "branch"), (True, "directed", "step"),
            (False, "undirected", "branch")]
FIELDS = ("nodes", "scores", "via", "parents")


@st.composite
def case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    fixed = [(f"e{i}", "r0", f"e{i}") for i in range(0, N_NODES, 4)]  # self-loops
    fixed += [(f"e{i}", "r1", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]  # every entity present
    triples = random_triples(rng, N_NODES, N_REL, draws=60, inverse=0.4)
    index = build_index(filled_to(fixed + triples, N_TRIPLES, N_NODES, "r2"))
    steps = np.full((RUNS, MAX_STEPS, 3), -1, np.int32)
    mask = np.zeros((RUNS, MAX_STEPS), bool)
    for row in range(RUNS):
        n = int(rng.integers(1, MAX_STEPS + 1))
        parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n)]
        steps[row, :n] = [(parents[s], s + 1, int(rng.integers(-1, len(index.relations)))) for s in range(n)]
        mask[row, :n] = True
    grid = lambda *shape: (rng.integers(-2, 3, shape) / 4).astype(np.float32)  # noqa: E731
    anchor = rng.integers(0, index.num_entities, RUNS).astype(np.int32)
    anchor[-1] = -1 if rng.random() < 0.3 else anchor[-1]  # a padding row
    batch = TraceBatch(steps, mask, grid(RUNS, MAX_STEPS, DIM), anchor, np.ones(RUNS, np.float32),
                       np.full((RUNS, 4), -1, np.int32), rng.random((RUNS, MAX_STEPS)) < 0.5)
    return {
        "kg": KGArrays.from_index(index, grid(index.num_triples, DIM)), "batch": batch,
        "hyper": Hyper(jnp.float32(0.0), jnp.float32(draw(st.sampled_from([0.0, 0.25, 0.5])))),
        "switches": dict(zip(("relation_bonus", "direction", "used"), draw(st.sampled_from(SWITCHES)), strict=True)),
    }


def _climb(outs) -> list[int]:
    """Per run, the level where climbing the ladder one level at a time stops (the plain climb)."""
    stops = []
    for row in range(RUNS):
        level = 0
        while int(outs[level].overflow[row]) > 0 and level + 1 < len(LADDER):
            level += 1
        stops.append(level)
    return stops


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case())
# slow: ~35 s: every ladder level compiled per switch set; tests/trace/test_capacity.py checks the
# pipeline's climb quickly
@pytest.mark.slow
def test_need_names_the_level_the_climb_stops_at_from_any_level(c):
    outs = [trace_batch(c["kg"], c["batch"], c["hyper"], shapes=shapes, precision=False, **c["switches"])
            for shapes in LADDER]
    outs = [type(o)(*(np.asarray(x) for x in o)) for o in outs]
    stops = _climb(outs)
    for level, out in enumerate(outs):
        fits = fitting_levels(LADDER, out.need)
        for row in range(RUNS):
            stop = stops[row]
            if int(out.overflow[row]) == 0:
                assert fits[row] == stop <= level, (level, row)
                width = LADDER[stop].frontier
                for field in FIELDS:  # cut to the stop's frontier: the stop's own arrays, bit for bit
                    np.testing.assert_array_equal(getattr(out, field)[row][..., :width],
                                                  getattr(outs[stop], field)[row], err_msg=f"{field} {level}")
                assert (out.nodes[row][..., width:] < 0).all()
            else:
                assert fits[row] > level
                assert min(fits[row], len(LADDER) - 1) <= stop, (level, row)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case(), level=st.integers(0, len(LADDER) - 1))
def test_halting_overflowed_runs_changes_nothing_the_ladder_keeps(c, level):
    """``halt_overflowed`` (the pipeline's setting below the ladder's top): a run that fits gets the same
    arrays, and a run that overflows still overflows with the same needs, so the ladder sends it to the
    same level; only the bindings the ladder throws away are left out."""
    shapes = LADDER[level]
    full, halted = (trace_batch(c["kg"], c["batch"], c["hyper"], shapes=shapes, precision=False,
                                halt_overflowed=halt, **c["switches"]) for halt in (False, True))
    full, halted = (type(o)(*(np.asarray(x) for x in o)) for o in (full, halted))
    np.testing.assert_array_equal(halted.need, full.need)
    np.testing.assert_array_equal(halted.overflow > 0, full.overflow > 0)
    fits = full.overflow == 0
    for field in (*FIELDS, "overflow"):
        np.testing.assert_array_equal(getattr(halted, field)[fits], getattr(full, field)[fits], err_msg=field)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case(), level=st.integers(0, len(LADDER) - 1), precision=st.booleans())
@pytest.mark.slow  # ~20 s: two steps buckets per level and strategy
def test_a_wider_steps_bucket_traces_the_same_runs(c, level, precision):
    """Retries high on the ladder share the widest steps bucket (``StemPipeline.SHARED_BUCKET_LEVEL``): a
    batch padded with masked steps gives the same arrays in the runs' own slots, and nothing beyond them."""
    batch = c["batch"]
    pad = MAX_STEPS  # twice the steps
    wide = batch._replace(
        steps=np.concatenate([batch.steps, np.full((RUNS, pad, 3), -1, np.int32)], axis=1),
        step_mask=np.concatenate([batch.step_mask, np.zeros((RUNS, pad), bool)], axis=1),
        step_emb=np.concatenate([batch.step_emb, np.zeros((RUNS, pad, DIM), np.float32)], axis=1),
        forward=np.concatenate([batch.forward, np.ones((RUNS, pad), bool)], axis=1))
    shapes = LADDER[level]
    own, padded = (trace_batch(c["kg"], b, c["hyper"], shapes=shapes, precision=precision, **c["switches"])
                   for b in (batch, wide))
    own, padded = (type(o)(*(np.asarray(x) for x in o)) for o in (own, padded))
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(padded, field)[:, : MAX_STEPS + 1], getattr(own, field), err_msg=field)
    assert (padded.nodes[:, MAX_STEPS + 1 :] < 0).all()
    np.testing.assert_array_equal(padded.overflow, own.overflow)
    np.testing.assert_array_equal(padded.need, own.need)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=case())
def test_precision_needs_fit_its_single_level(c):
    shapes = dataclasses.replace(LADDER[0], frontier=1, node_matches=1)
    out = trace_batch(c["kg"], c["batch"], c["hyper"], shapes=shapes, precision=True, **c["switches"])
    assert (np.asarray(out.overflow) == 0).all()
    assert (fitting_levels([shapes], np.asarray(out.need)) == 0).all()


def test_fitting_levels_takes_the_lowest_level_that_holds_both_counts():
    ladder = capacity_ladder(TracerShapes(frontier=4, node_matches=2), 16)  # (4, 2), (8, 4), (16, 8)
    need = np.array([[0, 0], [2, 4], [3, 4], [2, 5], [8, 16], [9, 1], [1, 17]])
    assert fitting_levels(ladder, need).tolist() == [0, 0, 1, 1, 2, 3, 3]

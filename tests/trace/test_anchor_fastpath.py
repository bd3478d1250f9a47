"""Anchoring a run that names its topic's KG id skips the entity-table pass: same anchors and scores.

:meth:`StemPipeline.anchor` resolves EXACT runs on the host (:meth:`StemPipeline.exact_anchor`) and sends
only the rest through :func:`~stem_jax.trace.tracer.anchor_batch`; the device kernel over every run
is the reference.
"""

import dataclasses

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem.pipeline import Run, StemPipeline
from stem_jax.trace.tracer import EXACT, FOLDED


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    rng = np.random.default_rng(0)
    names = [f"entity {i}" for i in range(60)] + ["Entity 3", "ENTITY 7"]  # folded twins of 3 and 7
    triples = [(names[int(h)], f"rel_{int(r)}", names[int(t)])
               for h, r, t in zip(rng.integers(0, len(names), 200), rng.integers(0, 4, 200),
                                  rng.integers(0, len(names), 200), strict=True) if h != t]
    index = build_index(triples)
    encoder = HashingEncoder(dim=32)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=64, progress=False)
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, tracer=dataclasses.replace(config.tracer, lam=1.7, top_n=8))
    return StemPipeline(Dataset("fast", [], triples), index, embeddings, encoder, config)


def _random_runs(evaluator, rng, n):
    n_entities = evaluator.index.num_entities
    runs, guidance = [], np.full((n, evaluator.shapes[True].guidance), -1, np.int32)
    for i in range(n):
        kind = rng.integers(0, 4)
        anchor = int(rng.integers(0, n_entities))
        if kind == 0:  # the topic's own id, possibly with folded twins after it
            named = ((anchor, EXACT),) + tuple((int(e), FOLDED) for e in rng.integers(0, n_entities, rng.integers(0, 3)))
        elif kind == 1:  # several EXACT entries (not made by plan_all, but the kernel allows it)
            named = tuple((int(e), EXACT) for e in rng.integers(0, n_entities, 3))
        elif kind == 2:  # folded twins only: cosine decides, on the device
            anchor = -1 if rng.random() < 0.5 else anchor
            named = tuple((int(e), FOLDED) for e in rng.integers(0, n_entities, 2))
        else:  # paper rule: no named entities
            named = ()
        runs.append(Run(0, None, anchor, mention=evaluator.index.entities[max(anchor, 0)], named=named))  # type: ignore[arg-type]
        if rng.random() < 0.6:  # guidance holding some of the named entities
            pool = [e for e, _ in named] + rng.integers(0, n_entities, 5).tolist()
            picked = rng.choice(pool, size=min(len(pool), 4), replace=False)
            guidance[i, : len(picked)] = picked
    return runs, guidance


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_host_exact_anchor_matches_the_kernel(evaluator, seed):
    rng = np.random.default_rng(seed)
    runs, guidance = _random_runs(evaluator, rng, 37)
    timings = {"anchor": 0.0}
    anchors, scores = evaluator.anchor(runs, guidance, timings)
    ref_anchors, ref_scores = np.zeros(len(runs), np.int32), np.zeros(len(runs), np.float32)
    evaluator._anchor_on_device(runs, guidance, ref_anchors, ref_scores, np.arange(len(runs)), evaluator.hyper.lam)
    np.testing.assert_array_equal(anchors, ref_anchors)
    np.testing.assert_array_equal(scores, ref_scores)
    host = [i for i, run in enumerate(runs) if evaluator.exact_anchor(run, guidance[i]) is not None]
    assert 0 < len(host) < len(runs)  # both paths were exercised
    assert timings["anchor"] > 0


def test_exact_anchor_boost_and_first_on_ties(evaluator):
    lam = np.float32(evaluator.config.tracer.lam)
    run = Run(0, None, 5, named=((5, EXACT), (9, EXACT), (11, FOLDED)))  # type: ignore[arg-type]
    none = np.full(4, -1, np.int32)
    assert evaluator.exact_anchor(run, none) == (5, np.float32(1.0))  # tie: the first
    assert evaluator.exact_anchor(run, np.array([9, 11, -1, -1], np.int32)) == (9, lam)  # λ lifts the second
    assert evaluator.exact_anchor(Run(0, None, -1, named=((11, FOLDED),)), none) is None  # type: ignore[arg-type]

"""The gold-path walk (coverage's ground truth R) against a plain per-triple reference on random KGs.

``path_walk_triples`` reads each step's relation through :class:`~stem_jax.kg.index.RelationAdjacency`
(binary searches over (entity, relation) keys); the reference below scans every triple with Python sets."""

from __future__ import annotations

import numpy as np
import pytest

from stem_jax.data.types import PathStep
from stem_jax.kg.index import build_index
from stem_jax.plan.oracle import path_walk_triples


def reference_walk(triples: np.ndarray, topic: int, path: list[tuple[int, bool]], answers: set[int]) -> list[int]:
    frontier = {topic}
    steps = []
    for relation, forward in path:
        edges = []
        for tid, (h, r, t) in enumerate(triples.tolist()):
            source, target = (h, t) if forward else (t, h)
            if r == relation and source in frontier and target != topic:
                edges.append((tid, source, target))
        steps.append(edges)
        frontier = {target for _, _, target in edges}
    kept, wanted = set(), set(answers)
    for edges in reversed(steps):
        on_path = [(tid, source) for tid, source, target in edges if target in wanted]
        kept.update(tid for tid, _ in on_path)
        wanted = {source for _, source in on_path}
    return sorted(kept)


@pytest.mark.parametrize("seed", range(40))
def test_walk_equals_reference_on_random_kgs(seed):
    rng = np.random.default_rng(seed)
    n, r = int(rng.integers(3, 30)), int(rng.integers(1, 5))
    m = int(rng.integers(1, 150))
    raw = [(f"e{rng.integers(n)}", f"r{rng.integers(r)}", f"e{rng.integers(n)}") for _ in range(m)]
    index = build_index(raw)  # self-loops, parallel triples and dangling relations come up at random
    for _ in range(10):
        topic = int(rng.integers(index.num_entities))
        length = int(rng.integers(1, 4))
        path = [(int(rng.integers(index.num_relations)), bool(rng.integers(2))) for _ in range(length)]
        answers = set(rng.choice(index.num_entities, size=int(rng.integers(1, index.num_entities + 1)),
                                 replace=False).tolist())
        steps = [PathStep(index.relations[rel], forward) for rel, forward in path]
        got = path_walk_triples(index, topic, steps, np.asarray(sorted(answers)))
        assert got.tolist() == reference_walk(index.triples, topic, path, answers)


def test_unknown_relation_and_empty_frontier_walk_nothing():
    index = build_index([("a", "r", "b"), ("b", "s", "c")])
    a = index.entity_ids["a"]
    assert path_walk_triples(index, a, [PathStep("missing")], np.asarray([1])).size == 0
    # the topic is never a target: a -r-> b -r^-> a stops at the topic
    assert path_walk_triples(index, a, [PathStep("r"), PathStep("r", False)], np.asarray([a])).size == 0


@pytest.mark.parametrize("seed", range(20))
def test_step_edges_equal_a_scan_of_every_triple(seed):
    """One relation step of the bounds' walk (kg.paths.step_edges), both orientations, directed and not,
    against a scan of every triple: the same (triple, source, target) edges, a self-loop once."""
    from stem_jax.kg.paths import step_edges

    rng = np.random.default_rng(100 + seed)
    n, r = int(rng.integers(3, 20)), int(rng.integers(1, 4))
    raw = [(f"e{rng.integers(n)}", f"r{rng.integers(r)}", f"e{rng.integers(n)}") for _ in range(int(rng.integers(1, 80)))]
    index = build_index(raw)
    for _ in range(10):
        frontier = np.unique(rng.choice(index.num_entities, size=int(rng.integers(1, index.num_entities + 1))))
        relation, forward = int(rng.integers(index.num_relations)), bool(rng.integers(2))
        members = set(frontier.tolist())
        for directed in (True, False):
            expected = set()
            for tid, (h, rel, t) in enumerate(index.triples.tolist()):
                if rel != relation:
                    continue
                source, target = (h, t) if forward else (t, h)
                if source in members:
                    expected.add((tid, source, target))
                if not directed and target in members and h != t:
                    expected.add((tid, target, source))
            ids, sources, targets = step_edges(index, frontier, relation, forward, directed)
            got = list(zip(ids.tolist(), sources.tolist(), targets.tolist(), strict=True))
            assert len(got) == len(set(got)) and set(got) == expected

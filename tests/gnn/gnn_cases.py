"""Cases shared by the GNN tests: a random KG with hub entities and queries on it, and a small Triple-GNN
trained on the demo KG."""

from __future__ import annotations

from typing import Any

import numpy as np

from stem_jax.config import SubgraphConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.gnn.data import ExampleFactory, question_examples
from stem_jax.gnn.features import SchemaFeaturizer
from stem_jax.gnn.model import ModelSpec
from stem_jax.gnn.train import TrainConfig, train
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import KGIndex, build_index
from stem_jax.plan.oracle import OraclePlanner


def hub_kg_queries(rng: np.random.Generator, count: int = 40) -> tuple[KGIndex, list[list[int]], list[int]]:
    """A 600-triple KG over 150 entities with power-law degrees (a few hubs), and ``count`` queries on it:
    (index, seed entities of each query (1 or 2), hop radius of each (1 to 3))."""
    heads = np.minimum(rng.zipf(1.6, 600), 150) - 1
    tails = rng.integers(0, 150, 600)
    rels = rng.integers(0, 4, 600)
    index = build_index([(f"e{h}", f"r{r}", f"e{t}") for h, r, t in zip(heads, rels, tails, strict=True)])
    seeds = [list(rng.choice(index.num_entities, rng.integers(1, 3), replace=False)) for _ in range(count)]
    hops = list(rng.integers(1, 4, count))
    return index, seeds, hops


def train_on_demo(tmp_path_factory: Any, config: TrainConfig, **train_args: Any) -> dict[str, Any]:
    """A 2-layer Triple-GNN trained by ``config`` on four 1-hop demo questions (train split, hashing
    encoder, oracle plans), the questions also its validation set: {"factory", "pairs", "spec", "full" (what
    :func:`~stem_jax.gnn.train.train` returned), "dir" (its run folder)}."""
    dataset = load_dataset(DatasetSpec(name="demo", split="train"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder(dim=32)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=1024, progress=False)
    factory = ExampleFactory(index, SchemaFeaturizer(index, embeddings, encoder), SubgraphConfig())
    pairs, _ = question_examples(factory, [q for q in dataset.questions if q.hops == 1][:4], OraclePlanner().plan)
    spec = ModelSpec(layers=2, d_gnn=16, d_pem=32, num_relations=index.num_relations)
    full_dir = tmp_path_factory.mktemp("full")
    full = train(factory, pairs, pairs, spec, config, full_dir, show_progress=False, **train_args)
    return {"factory": factory, "pairs": pairs, "spec": spec, "full": full, "dir": full_dir}

"""Shared fixtures for the retrieval-method tests."""

import dataclasses

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem.pipeline import StemPipeline


@pytest.fixture(scope="session")
def random_kg_pipeline(tmp_path_factory):
    """Factory: a StemPipeline over a random KG (``entities`` named ``entity i``, ``triples`` draws over
    ``relations`` relations ``rel_j``, self-loops dropped), hashing encoder (d=16), tracer fields overridden."""

    def make(name: str, *, seed: int, entities: int, triples: int, relations: int, **tracer) -> StemPipeline:
        rng = np.random.default_rng(seed)
        names = [f"entity {i}" for i in range(entities)]
        rows = [(names[int(h)], f"rel_{int(r)}", names[int(t)])
                for h, r, t in zip(rng.integers(0, entities, triples), rng.integers(0, relations, triples),
                                   rng.integers(0, entities, triples), strict=True) if h != t]
        index = build_index(rows)
        encoder = HashingEncoder(dim=16)
        embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=64,
                                         progress=False)
        config = StemConfig(encoder=EncoderConfig(name="hashing"))
        config = dataclasses.replace(config, tracer=dataclasses.replace(config.tracer, **tracer))
        return StemPipeline(Dataset(name, [], rows), index, embeddings, encoder, config)

    return make

"""Entity and relation embedding tables of a small KG from the hashing encoder, shaped like the cached ones
(``.entities.array`` / ``.relations.array``, float16): what tests of methods that read the tables need."""

from types import SimpleNamespace

import numpy as np

from stem_jax.encoder.hashing import HashingEncoder
from stem_jax.kg.index import build_index, relation_text


def tables_for(index, encoder) -> SimpleNamespace:
    """``index``'s entity names and relation texts encoded by ``encoder``, as float16 tables."""

    def table(texts):
        return SimpleNamespace(array=encoder.encode(texts).astype(np.float16))

    return SimpleNamespace(entities=table(list(index.entities)),
                           relations=table([relation_text(r) for r in index.relations]))


def hashing_kg(triples, questions=(), **more) -> SimpleNamespace:
    """A small KG as method tests read it: ``triples``, ``questions``, its index, the hashing encoder and
    :func:`tables_for` as ``embeddings``, plus ``more``."""
    index = build_index(triples)
    encoder = HashingEncoder()
    return SimpleNamespace(triples=triples, questions=questions, index=index, encoder=encoder,
                           embeddings=tables_for(index, encoder), **more)

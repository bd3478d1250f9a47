"""Entity and relation embedding tables of a small KG from the hashing encoder, shaped like the cached ones
(``.entities.array`` / ``.relations.array``, float16): what tests of methods that read the tables need."""

from types import SimpleNamespace

import numpy as np

from stem_jax.kg.index import relation_text


def tables_for(index, encoder) -> SimpleNamespace:
    """``index``'s entity names and relation texts encoded by ``encoder``, as float16 tables."""

    def table(texts):
        return SimpleNamespace(array=encoder.encode(texts).astype(np.float16))

    return SimpleNamespace(entities=table(list(index.entities)),
                           relations=table([relation_text(r) for r in index.relations]))

"""Fixtures of the serving tests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides
from stem_jax.serve import create_app

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The app in a TestClient over the demo KG: oracle plans, hashing encoder, 3 questions per hop, batches of
    up to 4 (a module that needs another app defines its own ``client``)."""
    engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle",
                         cache_dir=tmp_path_factory.mktemp("cache"), limit=3)
    with TestClient(create_app(engine, max_batch=4, max_wait_ms=1, queue_size=16)) as c:
        yield c

"""``stem-jax serve``: an HTTP JSON API over one warmed engine, with dynamic batching (see app.py)."""

from stem_jax.serve.app import create_app
from stem_jax.serve.batcher import Batcher, Job, OverloadedError

__all__ = ["Batcher", "Job", "OverloadedError", "create_app"]

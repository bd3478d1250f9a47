"""Prometheus metrics of the service (its own registry, so several apps in one process do not clash)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STAGE_MS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 5000)
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _compiles() -> float:
    """Tracer and anchor compilations so far in this process (jit cache sizes)."""
    try:
        from stem_jax.trace.tracer import anchor_batch, trace_batch

        return float(trace_batch._cache_size() + anchor_batch._cache_size())
    except Exception:  # a jax without _cache_size: report nothing rather than fail /metrics
        return float("nan")


class ServeMetrics:
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, queue_depth: Callable[[], float], in_flight: Callable[[], float], *,
                 warming: Callable[[], float] | None = None):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("stem_requests", "HTTP requests by endpoint and status code",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("stem_request_seconds", "End-to-end request latency (admitted requests)",
                                 ["endpoint"], buckets=LATENCY_S, registry=r)
        self.stage = Histogram("stem_stage_ms", "Per-question engine stage time in milliseconds (Answer.stage_ms)",
                               ["stage"], buckets=STAGE_MS, registry=r)
        self.batch_size = Histogram("stem_batch_questions", "Distinct questions per engine.retrieve call",
                                    buckets=BATCH, registry=r)
        self.batch_seconds = Histogram("stem_batch_seconds", "Seconds per engine.retrieve call",
                                       buckets=LATENCY_S, registry=r)
        self.rejected = Counter("stem_rejected", "Requests refused with 503 (queue full or shutting down)",
                                registry=r)
        Gauge("stem_queue_depth", "Questions waiting for a batch", registry=r).set_function(queue_depth)
        Gauge("stem_in_flight", "Questions admitted and not yet answered", registry=r).set_function(in_flight)
        if warming is not None:
            Gauge("stem_warming", "1 while a staged warm-up compiles in the background, else 0",
                  registry=r).set_function(warming)
        Gauge("stem_compiles", "Tracer/anchor jit compilations in this process (compare before/after load)",
              registry=r).set_function(_compiles)

    def on_batch(self, questions: int, seconds: float) -> None:
        self.batch_size.observe(questions)
        self.batch_seconds.observe(seconds)

    def on_answer(self, stage_ms: dict[str, Any]) -> None:
        for stage, ms in stage_ms.items():
            try:
                self.stage.labels(stage=str(stage)).observe(float(ms))
            except (TypeError, ValueError):
                continue

    def render(self) -> bytes:
        return generate_latest(self.registry)

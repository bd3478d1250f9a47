"""``stem-jax bench serve``: open-loop load against a running ``stem-jax serve`` on this machine.

For each offered rate, requests are sent at Poisson arrival times (seeded) for ``duration`` seconds,
whatever the server's answers take (open loop, like vLLM's ``benchmark_serving``), at most
``max_outstanding`` in flight (beyond that a send is counted as ``dropped``, so the generator itself
stays bounded). Per rate: end-to-end latency p50/p95/p99 of successful requests, achieved throughput,
errors by status, and the server's batch sizes over that window (from its ``/metrics`` histogram,
read before and after).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np

from stem_jax.errors import StemError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_BUCKET = re.compile(r'^stem_batch_questions_bucket\{le="([^"]+)"\} ([0-9.e+]+)$')
_SUM = re.compile(r"^stem_batch_questions_(sum|count) ([0-9.e+]+)$")
_SECONDS = re.compile(r"^stem_batch_seconds_sum ([0-9.e+]+)$")


def checked_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme != "http" or parsed.hostname not in LOOPBACK:
        raise StemError(f"--url {url!r}: bench serve loads a server on this machine only\n"
                        "  how to fix: --url http://127.0.0.1:8000 (start it with `stem-jax serve`)")
    return url.rstrip("/")


def batch_histogram(metrics_text: str) -> dict[str, Any]:
    buckets: dict[float, float] = {}
    totals = {"sum": 0.0, "count": 0.0, "seconds": 0.0}
    for line in metrics_text.splitlines():
        if m := _SECONDS.match(line):
            totals["seconds"] = float(m.group(1))
        if m := _BUCKET.match(line):
            buckets[math.inf if m.group(1) == "+Inf" else float(m.group(1))] = float(m.group(2))
        elif m := _SUM.match(line):
            totals[m.group(1)] = float(m.group(2))
    return {"buckets": buckets, **totals}


def batch_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Batches in the window: count, mean questions per batch, and how many fell at each size bucket."""
    count = after["count"] - before["count"]
    cumulative = {le: after["buckets"].get(le, 0.0) - before["buckets"].get(le, 0.0) for le in after["buckets"]}
    per_bucket, previous = {}, 0.0
    for le in sorted(cumulative):
        n = cumulative[le] - previous
        previous = cumulative[le]
        if n > 0:
            per_bucket["+Inf" if le == math.inf else f"<={le:g}"] = int(round(n))
    seconds = after.get("seconds", 0.0) - before.get("seconds", 0.0)
    return {"batches": int(round(count)), "mean_batch": (after["sum"] - before["sum"]) / count if count else 0.0,
            "engine_ms_per_batch": 1000 * seconds / count if count else 0.0, "distribution": per_bucket}


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None}
    arr = np.asarray(values)
    return {"p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
            "p99": float(np.percentile(arr, 99)), "mean": float(arr.mean())}


async def _one_rate(client: httpx.AsyncClient, url: str, bodies: list[dict], rate: float, duration: float,
                    max_outstanding: int, timeout: float, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max(1, int(rate * duration * 1.5) + 8)))
    arrivals = arrivals[arrivals < duration]
    latencies: list[float] = []
    statuses: Counter = Counter()
    outstanding = 0
    dropped = 0

    async def send(body: dict) -> None:
        nonlocal outstanding
        began = time.perf_counter()
        try:
            response = await client.post(url + "/v1/ask", json=body, timeout=timeout)
            statuses[str(response.status_code)] += 1
            if response.status_code == 200:
                latencies.append(1000 * (time.perf_counter() - began))
        except httpx.HTTPError as err:
            statuses[type(err).__name__] += 1
        finally:
            outstanding -= 1

    before = batch_histogram((await client.get(url + "/metrics")).text)
    tasks = []
    start = time.perf_counter()
    for i, at in enumerate(arrivals):
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if outstanding >= max_outstanding:
            dropped += 1
            continue
        outstanding += 1
        tasks.append(asyncio.create_task(send(bodies[i % len(bodies)])))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    after = batch_histogram((await client.get(url + "/metrics")).text)
    ok = statuses.get("200", 0)
    return {"offered_rps": rate, "sent": len(tasks), "dropped": dropped, "ok": ok,
            "errors": {k: v for k, v in statuses.items() if k != "200"}, "wall_s": wall,
            "throughput_rps": ok / wall if wall > 0 else 0.0, "latency_ms": _percentiles(latencies),
            **batch_delta(before, after)}


async def run_load(url: str, rates: Sequence[float], *, duration: float = 10.0, questions: int = 64,
                   by: str = "qid", max_outstanding: int = 512, timeout: float = 60.0, warm: int = 16,
                   seed: int = 0) -> dict[str, Any]:
    """Offered-load sweep against ``url``; returns the server's info and one row per rate."""
    url = checked_url(url)
    limits = httpx.Limits(max_connections=max_outstanding, max_keepalive_connections=max_outstanding)
    async with httpx.AsyncClient(limits=limits) as client:
        info = (await client.get(url + "/v1/info")).json()
        listed = (await client.get(url + "/v1/questions", params={"limit": questions})).json()["questions"]
        if not listed:
            raise StemError("the server's split has no questions to send\n  how to fix: serve a dataset split")
        bodies = [{"qid": q["qid"]} if by == "qid" else {"question": q["question"]} for q in listed]
        for body in bodies[:warm]:  # untimed: first calls may still compile or fill caches
            await client.post(url + "/v1/ask", json=body, timeout=timeout)
        rows = []
        for i, rate in enumerate(rates):
            rows.append(await _one_rate(client, url, bodies, float(rate), duration, max_outstanding, timeout, seed + i))
    return {"server": info, "rows": rows}


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    headers = ["offered req/s", "sent", "ok", "errors", "throughput req/s", "p50 ms", "p95 ms", "p99 ms",
               "batches", "mean batch", "engine ms/batch"]
    out = []
    for r in rows:
        lat = r["latency_ms"]
        fmt = [round(lat[k], 1) if lat[k] is not None else "-" for k in ("p50", "p95", "p99")]
        errors = sum(r["errors"].values()) + r["dropped"]
        out.append([r["offered_rps"], r["sent"], r["ok"], errors, round(r["throughput_rps"], 1), *fmt,
                    r["batches"], round(r["mean_batch"], 2),
                    round(r["engine_ms_per_batch"], 1) if "engine_ms_per_batch" in r else "-"])
    return headers, out


def plot(results: dict[str, list[dict[str, Any]]], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rows in results.items():
        xs = [r["throughput_rps"] for r in rows if r["latency_ms"]["p50"] is not None]
        for q, style in (("p50", "-o"), ("p99", "--x")):
            ys = [r["latency_ms"][q] for r in rows if r["latency_ms"]["p50"] is not None]
            ax.plot(xs, ys, style, label=f"{label} {q}")
    ax.set_xlabel("achieved throughput (requests/s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

"""``stem-jax bench serve``: open-loop load against a running ``stem-jax serve`` on this machine.

For each offered rate, requests are sent at Poisson arrival times (seeded) for ``duration`` seconds,
whatever the server's answers take (open loop, like vLLM's ``benchmark_serving``), at most
``max_outstanding`` in flight (beyond that a send is counted as ``dropped``, so the generator itself
stays bounded). Latency is measured from each request's scheduled arrival, so a generator that falls
behind cannot hide queueing; how late the sends went out is reported beside it (``send_late_ms``),
and the same requests timed from the moment they were sent (``latency_from_send_ms``, as vLLM's
``benchmark_serving`` times them: the generator's timer wakes a little late, which the
scheduled-arrival latency counts against the server).
Per rate: end-to-end latency p50/p95/p99 of successful requests, achieved throughput, errors by
status, and the server's batch sizes over that window (from its ``/metrics`` histogram, read before
and after).

Questions are fresh by default: the rates walk on through the split's questions, so no question is
sent twice until the list runs out (a server answers a repeated question from its prepared plans,
which would flatter it); ``repeat`` cycles through the ``warm`` questions answered before the timed
load instead (every request then a second call, as ``stem-jax ask --warm`` times).

The client is a small HTTP/1.1 keep-alive client on asyncio streams with uvicorn's C parser
(httptools, in the serve extra). httpx's async client was the bottleneck at a few hundred requests in
flight: httpcore's connection pool scans every connection per request (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import httptools
import numpy as np

from stem_jax.errors import StemError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_BUCKET = re.compile(r'^stem_batch_questions_bucket\{le="([^"]+)"\} ([0-9.e+]+)$')
_SUM = re.compile(r"^stem_batch_questions_(sum|count) ([0-9.e+]+)$")
_SECONDS = re.compile(r"^stem_batch_seconds_sum ([0-9.e+]+)$")


class _Response:
    """httptools callbacks for one response: status, body, and whether the server keeps the connection."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.done = False
        self.keep_alive = False
        self.parser: Any = None

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        # llhttp answers should_keep_alive only inside the callbacks: after them it reads False
        self.keep_alive = bool(self.parser.should_keep_alive())
        self.done = True


class LoopbackClient:
    """HTTP/1.1 keep-alive client for a server on this machine: one connection per request in flight,
    reused once its response is read (so at most as many connections as requests ever in flight)."""

    def __init__(self, url: str, timeout: float = 60.0):
        parsed = urlparse(checked_url(url))
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.timeout = timeout
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._host_header = f"{self.host}:{self.port}".encode()

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """``(status, body)``; a connection the server closed is replaced and the request sent once more."""
        for attempt in (0, 1):
            reused = bool(self._idle) and not attempt  # the retry takes a new connection: others may be stale too
            reader, writer = self._idle.pop() if reused else await asyncio.open_connection(self.host, self.port)
            try:
                return await asyncio.wait_for(self._exchange(reader, writer, method, path, body), self.timeout)
            except (ConnectionError, asyncio.IncompleteReadError, EOFError):
                writer.close()
                if not reused:  # a fresh connection failed: a real error
                    raise
            except BaseException:
                writer.close()
                raise
        raise AssertionError("unreachable")

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, path: str,
                        body: bytes | None) -> tuple[int, bytes]:
        head = [f"{method} {path} HTTP/1.1".encode(), b"host: " + self._host_header]
        if body is not None:
            head += [b"content-type: application/json", b"content-length: " + str(len(body)).encode()]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + (body or b""))
        response = _Response()
        parser = response.parser = httptools.HttpResponseParser(response)
        while not response.done:
            chunk = await reader.read(1 << 16)
            if not chunk:
                raise EOFError("the server closed the connection before answering")
            parser.feed_data(chunk)
        if response.keep_alive:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return parser.get_status_code(), b"".join(response.body)

    async def get_json(self, path: str) -> Any:
        status, body = await self.request("GET", path)
        if status != 200:
            raise StemError(f"GET {path} answered {status}: {body[:200]!r}\n  how to fix: is it a stem-jax serve?")
        return json.loads(body)

    async def get_text(self, path: str) -> str:
        return (await self.request("GET", path))[1].decode()

    async def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


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


async def _one_rate(client: LoopbackClient, bodies: Sequence[bytes], rate: float, duration: float,
                    max_outstanding: int, seed: int) -> dict[str, Any]:
    """One offered rate; ``bodies`` are sent in order (the caller picks fresh or repeated questions)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max(1, int(rate * duration * 1.5) + 8)))
    arrivals = arrivals[arrivals < duration]
    latencies: list[float] = []
    from_send: list[float] = []  # the same requests timed from the moment they were sent (no generator lag)
    late: list[float] = []
    statuses: Counter = Counter()
    outstanding = 0
    dropped = 0

    async def send(body: bytes, due: float) -> None:
        nonlocal outstanding
        sent = time.perf_counter()
        late.append(1000 * (sent - due))
        try:
            status, _ = await client.request("POST", "/v1/ask", body)
            statuses[str(status)] += 1
            if status == 200:
                done = time.perf_counter()
                latencies.append(1000 * (done - due))
                from_send.append(1000 * (done - sent))
        except (TimeoutError, OSError, EOFError, httptools.HttpParserError) as err:
            statuses[type(err).__name__] += 1
        finally:
            outstanding -= 1

    before = batch_histogram(await client.get_text("/metrics"))
    load_before = os.getloadavg()[0]  # the machine is shared: every row says how busy it was
    tasks = []
    sent = 0
    start = time.perf_counter()
    for at in arrivals:
        due = start + at
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if outstanding >= max_outstanding:
            dropped += 1
            continue
        outstanding += 1
        tasks.append(asyncio.create_task(send(bodies[sent % len(bodies)], due)))
        sent += 1
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    after = batch_histogram(await client.get_text("/metrics"))
    ok = statuses.get("200", 0)
    return {"offered_rps": rate, "sent": len(tasks), "dropped": dropped, "ok": ok,
            "errors": {k: v for k, v in statuses.items() if k != "200"}, "wall_s": wall,
            "throughput_rps": ok / wall if wall > 0 else 0.0, "latency_ms": _percentiles(latencies),
            "latency_from_send_ms": _percentiles(from_send), "send_late_ms": _percentiles(late), "load_avg_1m": [load_before, os.getloadavg()[0]],
            **batch_delta(before, after)}


async def run_load(url: str, rates: Sequence[float], *, duration: float = 10.0, questions: int = 64,
                   by: str = "qid", max_outstanding: int = 512, timeout: float = 60.0, warm: int = 16,
                   repeat: bool = False, seed: int = 0) -> dict[str, Any]:
    """Offered-load sweep against ``url``; returns the server's info and one row per rate.

    ``warm`` questions are answered first, untimed (first calls may still compile or fill caches).
    Timed requests then take fresh questions, walking on through the ``questions`` listed across the
    rates (``repeat``: cycle through the warm questions instead, each then answered before)."""
    client = LoopbackClient(url, timeout)
    try:
        info = await client.get_json("/v1/info")
        listed = (await client.get_json(f"/v1/questions?limit={int(questions)}"))["questions"]
        if not listed:
            raise StemError("the server's split has no questions to send\n  how to fix: serve a dataset split")
        bodies = [json.dumps({"qid": q["qid"]} if by == "qid" else {"question": q["question"]}).encode()
                  for q in listed]
        warm = min(max(int(warm), 1 if repeat else 0), len(bodies))
        for body in bodies[:warm]:
            await client.request("POST", "/v1/ask", body)
        pool = bodies[:warm] if repeat else bodies[warm:] or bodies
        rows, total = [], 0  # timed requests so far: the next rate starts at question `total` of the pool
        for i, rate in enumerate(rates):
            cursor = total % len(pool)
            ordered = pool[cursor:] + pool[:cursor]
            row = await _one_rate(client, ordered, float(rate), duration, max_outstanding, seed + i)
            # requests that re-sent a question already timed (or, with repeat, answered in the warm pass)
            reused = row["sent"] if repeat else max(0, min(row["sent"], total + row["sent"] - len(pool)))
            row["questions"] = {"listed": len(listed), "warm": warm, "repeat": repeat, "reused": reused}
            total += row["sent"]
            rows.append(row)
    finally:
        await client.close()
    return {"server": info, "rows": rows}


def table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    headers = ["offered req/s", "sent", "ok", "errors", "throughput req/s", "p50 ms", "p95 ms", "p99 ms",
               "p50 ms from send", "batches", "mean batch", "engine ms/batch", "send late p99 ms", "load avg 1m"]
    out = []
    for r in rows:
        lat = r["latency_ms"]
        fmt = [round(lat[k], 1) if lat[k] is not None else "-" for k in ("p50", "p95", "p99")]
        errors = sum(r["errors"].values()) + r["dropped"]
        send_p50 = r.get("latency_from_send_ms", {}).get("p50")
        out.append([r["offered_rps"], r["sent"], r["ok"], errors, round(r["throughput_rps"], 1), *fmt,
                    round(send_p50, 1) if send_p50 is not None else "-", r["batches"], round(r["mean_batch"], 2),
                    round(r["engine_ms_per_batch"], 1) if "engine_ms_per_batch" in r else "-",
                    round(r["send_late_ms"]["p99"], 1) if r.get("send_late_ms", {}).get("p99") is not None else "-",
                    "-".join(f"{x:.1f}" for x in r["load_avg_1m"]) if "load_avg_1m" in r else "-"])
    return headers, out


def plot(results: dict[str, list[dict[str, Any]]], path: Any) -> None:
    """Latency (p50 solid, p99 dashed) against achieved throughput, one colour per run label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = plt.get_cmap("tab10" if len(results) <= 10 else "tab20")
    for i, (label, rows) in enumerate(results.items()):
        rows = [r for r in rows if r["latency_ms"]["p50"] is not None]
        xs = [r["throughput_rps"] for r in rows]
        for q, style in (("p50", "-o"), ("p99", "--x")):
            ax.plot(xs, [r["latency_ms"][q] for r in rows], style, color=colours(i), label=f"{label} {q}",
                    markersize=4)
    ax.set_xlabel("achieved throughput (requests/s)")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

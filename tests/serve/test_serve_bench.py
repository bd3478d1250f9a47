"""`stem-jax bench serve`'s load generator against a scripted HTTP server (no engine).

The generator's own client (keep-alive HTTP/1.1 on asyncio streams + httptools) must reuse connections,
survive a server that drops an idle keep-alive connection, and send fresh questions across rates (or
only the warm ones with ``repeat``), because a repeated question is cheaper for the engine.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest

from stem_jax.serve.bench import LoopbackClient, run_load

METRICS = ('stem_batch_questions_bucket{le="1.0"} 0.0\nstem_batch_questions_bucket{le="+Inf"} 0.0\n'
           "stem_batch_questions_sum 0.0\nstem_batch_questions_count 0.0\nstem_batch_seconds_sum 0.0\n")


class ScriptedServer:
    """A tiny HTTP/1.1 server: the stem-jax routes bench serve reads, with canned answers; counts connections
    and the questions asked. ``close_after`` > 0 drops each connection after that many responses, without
    saying so (as a server whose keep-alive timeout passed does)."""

    def __init__(self, questions: int = 50, close_after: int = 0):
        self.listed = [{"qid": f"t/{i}", "question": f"q{i} [E{i}]"} for i in range(questions)]
        self.close_after = close_after
        self.connections = 0
        self.asked: Counter = Counter()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ")
                length = next((int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length")), 0)
                body = await reader.readexactly(length) if length else b""
                if path == "/v1/info":
                    payload = json.dumps({"dataset": "scripted", "serve": {"max_batch": 4}}).encode()
                elif path.startswith("/v1/questions"):
                    limit = int(path.split("limit=")[1])
                    payload = json.dumps({"questions": self.listed[:limit]}).encode()
                elif path == "/metrics":
                    payload = METRICS.encode()
                else:
                    assert method == "POST" and path == "/v1/ask"
                    self.asked[json.loads(body)["question"]] += 1
                    payload = b'{"answers": []}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                await writer.drain()
                answered += 1
                if self.close_after and answered >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()


def _run(coro):
    return asyncio.run(coro)


def test_client_reuses_one_connection_for_sequential_requests():
    async def go():
        server = ScriptedServer()
        url = await server.start()
        client = LoopbackClient(url)
        try:
            for _ in range(20):
                status, body = await client.request("POST", "/v1/ask", b'{"question": "x"}')
                assert (status, json.loads(body)) == (200, {"answers": []})
        finally:
            await client.close()
            await server.stop()
        return server

    server = _run(go())
    assert server.connections == 1 and server.asked["x"] == 20


def test_client_retries_on_a_new_connection_when_every_idle_one_is_stale():
    async def go():
        server = ScriptedServer(close_after=1)
        url = await server.start()
        client = LoopbackClient(url)
        try:  # three connections in flight at once, then all three idle and all dropped by the server
            await asyncio.gather(*(client.request("POST", "/v1/ask", b'{"question": "z"}') for _ in range(3)))
            await asyncio.sleep(0.05)
            assert len(client._idle) == 3
            status, _ = await client.request("POST", "/v1/ask", b'{"question": "z"}')
        finally:
            await client.close()
            await server.stop()
        return status, server

    status, server = _run(go())
    assert status == 200 and server.asked["z"] == 4


def test_client_replaces_a_connection_the_server_dropped():
    async def go():
        server = ScriptedServer(close_after=1)  # every connection is dropped after one answer
        url = await server.start()
        client = LoopbackClient(url)
        try:
            for _ in range(5):
                await asyncio.sleep(0.02)  # let the close reach the client's idle connection
                status, _ = await client.request("POST", "/v1/ask", b'{"question": "y"}')
                assert status == 200
        finally:
            await client.close()
            await server.stop()
        return server

    server = _run(go())
    assert server.asked["y"] == 5 and server.connections >= 5


@pytest.mark.parametrize("repeat", [False, True])
def test_rates_send_fresh_questions_unless_repeat(repeat):
    async def go():
        server = ScriptedServer(questions=400)
        url = await server.start()
        try:
            result = await run_load(url, [40.0, 80.0], duration=0.5, questions=400, by="text", warm=10,
                                    repeat=repeat)
        finally:
            await server.stop()
        return server, result

    server, result = _run(go())
    rows = result["rows"]
    assert all(r["ok"] == r["sent"] > 0 for r in rows)
    warm = {f"q{i} [E{i}]" for i in range(10)}
    timed = sum(r["sent"] for r in rows)
    if repeat:  # only the warm questions, each answered once before the timed load
        assert set(server.asked) == warm and sum(server.asked.values()) == 10 + timed
        assert all(r["questions"]["reused"] == r["sent"] for r in rows)
    else:  # warm questions once, then every timed request a question never sent before
        assert sum(server.asked.values()) == len(server.asked) == 10 + timed
        assert all(r["questions"]["reused"] == 0 for r in rows)
    assert all(len(r["load_avg_1m"]) == 2 for r in rows)
    for r in rows:  # timed from the send, a request takes no longer than from its scheduled arrival (asyncio
        # may wake a timer up to its clock resolution early: the 0.01 ms)
        assert 0 < r["latency_from_send_ms"]["p50"] <= r["latency_ms"]["p50"] + 0.01

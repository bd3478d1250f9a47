"""The `stem-jax serve` command: flags, registration, and an end-to-end run on the demo KG."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from stem_jax.cli.main import build_parser


def test_serve_flags_parse():
    args = build_parser().parse_args(["serve", "--dataset", "demo", "--max-batch", "4", "--max-wait-ms", "2.5",
                                      "--queue-size", "9", "--port", "0", "--planner", "oracle"])
    assert (args.max_batch, args.max_wait_ms, args.queue_size, args.port, args.host) == (4, 2.5, 9, 0, "127.0.0.1")
    assert args.func.__name__ == "cmd_serve" and args.method == "stem" and args.warm_up


@pytest.mark.parametrize("flags", [["--max-batch", "0"], ["--max-wait-ms", "-1"], ["--queue-size", "x"],
                                   ["--port", "70000"]])
def test_serve_bad_flags_exit_2(flags, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--dataset", "demo", *flags])
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_end_to_end(tmp_path):
    """Start the real command (oracle planner, no warm-up), ask over HTTP, stop it with SIGTERM."""
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "stem_jax.cli.main", "serve", "--dataset", "demo", "--limit", "3",
           "--planner", "oracle", "--encoder.name=hashing", "--cache-dir", str(tmp_path), "--port", str(port),
           "--no-warm-up", "--no-progress", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline, "server did not come up"
            time.sleep(0.2)
        info = httpx.get(url + "/v1/info").json()
        qid = "demo/test/1-hop/0"
        body = httpx.post(url + "/v1/ask", json={"qid": qid}, timeout=120).json()
        assert info["dataset"] == "demo" and body["qid"] == qid and body["answers"]
        error = httpx.post(url + "/v1/ask", json={"question": "who is [Nobody Here]"}, timeout=60)
        assert error.status_code == 400 and "not in the KG" in error.json()["error"]["message"]
        assert "<svg" in httpx.get(url + "/").text  # the evidence explorer page
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: the default exit status of a TERM
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Traceback" not in out

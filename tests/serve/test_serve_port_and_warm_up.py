"""`serve --port 0` prints the port it got; warm-up says what it compiles and how long each part took."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import httpx
from serve_process import read_until

from stem_jax import Engine, StemConfig
from stem_jax.config import apply_overrides

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


def test_port_zero_prints_the_real_port(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "stem_jax.cli.main", "serve", "--dataset", "demo", "--limit", "3",
           "--planner", "oracle", "--encoder.name=hashing", "--cache-dir", str(tmp_path), "--port", "0",
           "--no-warm-up", "--no-progress", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = read_until(proc, "serving ")[-1]
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))
        assert port != 0
        for _ in range(100):  # the socket is listening already; uvicorn starts accepting in a moment
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
                break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError("nothing answered on the printed port")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_warm_up_reports_each_part(tmp_path):
    engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=tmp_path,
                         limit=3)
    engine.method("stem").pipeline.warm_up = lambda buckets, runs: 7  # the compiles themselves are tested elsewhere
    lines: list[str] = []
    info = engine.warm_up(2, step_buckets=[1, 2], log=lines.append)
    assert info["tracer_shapes"] == 7
    text = "\n".join(lines)
    assert "compiling the tracer: plans of 1, 2 steps, batches up to" in text and "tracer: 7 shapes in" in text

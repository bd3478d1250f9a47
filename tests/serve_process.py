"""The real `stem-jax serve` command in a child process, for tests of what it prints and how it stops."""

from __future__ import annotations

import subprocess
import time


def read_until(proc: subprocess.Popen, prefix: str, timeout_s: float = 240) -> list[str]:
    """The lines ``proc`` prints up to and including the first that starts with ``prefix``; fails (with every line
    read) when the process ends first or ``timeout_s`` passes."""
    lines: list[str] = []
    deadline = time.time() + timeout_s
    while True:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, "".join(lines)
        lines.append(line)
        if line.startswith(prefix):
            return lines
        assert time.time() < deadline, "".join(lines)

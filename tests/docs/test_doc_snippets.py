"""Every documented command that needs only the demo KG runs as written, on a fresh cache.

The snippets are read from README.md and docs/*.md by this test, not retyped: shell commands in fenced and
indented code blocks and in table cells, `&&` chains split into their steps, and Python blocks. A snippet
belongs to the demo KG when it names `--dataset demo`, `runs/demo-kg` or `stem-jax demo` (Python: opens the
demo or `runs/demo-kg`); the install steps are what CI itself runs, and `--planner vllm` needs a served model,
so both are left out (`demo_snippets` returns what was left out and why, and a test checks that list is short).

Cost is kept to minutes: each distinct command runs once (the pages repeat the README's tour), every command
shares one cache and one XLA compilation cache, and the pages start the demo server with one command, so one
server answers every `curl`. The shell commands run in page order (README first, then docs/ by name), so later
commands use earlier ones' output; the server starts where its page shows it and warms up (it compiles every
shape a full batch can reach) while the commands after it run; the Python snippets then run one after another
in a single interpreter, and the `curl` lines go last, once the server answers.
Everything runs in a scratch folder that links the checkout's `experiments/` and `.venv/`, with
`STEM_CACHE_DIR` pointing at an empty folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DEMO_MARKERS = ("--dataset demo", "runs/demo-kg", "stem-jax demo")
PYTHON_DEMO_MARKERS = ('Engine.open("demo"', "runs/demo-kg")
SHELL_STARTS = ("stem-jax ", ".venv/bin/stem-jax ", "python experiments/", "curl ")


@dataclass(frozen=True)
class Snippet:
    page: str          # path relative to the repository
    line: int          # 1-based line where the snippet starts
    kind: str          # "shell" or "python"
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _strip_comment(command: str) -> str:
    """Drop a trailing `# ...` comment that is not inside quotes."""
    quote = None
    for i, ch in enumerate(command):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or command[i - 1].isspace()):
            return command[:i].rstrip()
    return command.rstrip()


def _shell_commands(page: str, lines: list[tuple[int, str]]) -> list[Snippet]:
    """Shell commands in a code block: continuation lines joined, `&&` chains split, comments dropped."""
    joined: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in lines:
        text = raw.strip()
        if pending is not None:
            text = pending[1] + " " + text
            number = pending[0]
            pending = None
        if text.endswith("\\"):
            pending = (number, text[:-1].rstrip())
            continue
        joined.append((number, text))
    out = []
    for number, text in joined:
        for step in _strip_comment(text).split(" && "):
            step = step.strip()
            if step.startswith(SHELL_STARTS):
                out.append(Snippet(page, number, "shell", step))
    return out


def page_snippets(text: str, page: str = "README.md") -> list[Snippet]:
    """Shell and Python snippets of one Markdown page, in order."""
    lines = text.splitlines()
    snippets: list[Snippet] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            language = fence.group(1)
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append((i + 1, lines[i]))
                i += 1
            if language == "python":
                snippets.append(Snippet(page, body[0][0] if body else i, "python", "\n".join(t for _, t in body)))
            else:
                snippets.extend(_shell_commands(page, body))
            i += 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                if lines[i].strip():
                    body.append((i + 1, lines[i]))
                i += 1
            snippets.extend(_shell_commands(page, body))
            continue
        if line.startswith("|"):
            for cell in re.findall(r"`([^`]+)`", line):
                if cell.startswith(SHELL_STARTS):
                    snippets.append(Snippet(page, i + 1, "shell", cell))
        for call in re.findall(r"`(Engine\.open\([^`]*\))`", line):
            snippets.append(Snippet(page, i + 1, "python", f"from stem_jax import Engine\nengine = {call}"))
        i += 1
    return snippets


def all_snippets() -> list[Snippet]:
    """The snippets of README.md, then of docs/*.md by name."""
    out = []
    for path in PAGES:
        out += page_snippets(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    return out


def _is_demo(snippet: Snippet) -> bool:
    if snippet.kind == "python":
        return any(marker in snippet.text for marker in PYTHON_DEMO_MARKERS)
    return any(marker in snippet.text for marker in DEMO_MARKERS) or snippet.text.startswith("curl ")


def _key(snippet: Snippet) -> str:
    return snippet.text.removeprefix(".venv/bin/")


def demo_snippets(snippets: list[Snippet]) -> tuple[list[Snippet], list[tuple[Snippet, str]]]:
    """The distinct snippets that need only the demo KG, and those left out with the reason."""
    keep, left_out, seen = [], [], set()
    for snippet in snippets:
        if not _is_demo(snippet):
            continue
        if "--planner vllm" in snippet.text:
            left_out.append((snippet, "needs a served LLM"))
            continue
        if _key(snippet) in seen:
            continue  # the pages repeat the README's commands; running one twice tests nothing new
        seen.add(_key(snippet))
        keep.append(snippet)
    # curl lines belong to the serve block above them: keep only those that follow a demo `serve`.
    result, serving = [], False
    for snippet in keep:
        if snippet.kind == "shell" and _is_serve(snippet.text):
            serving = "--dataset demo" in snippet.text
        elif snippet.text.startswith("curl ") and not serving:
            left_out.append((snippet, "curl outside a demo serve block"))
            continue
        result.append(snippet)
    return result, left_out


def _is_serve(text: str) -> bool:
    return " serve " in f" {text} " and "bench serve" not in text


def test_extraction_finds_the_demo_snippets() -> None:
    """The extractor sees the snippets a newcomer would copy, and the costly ones stay small (no command runs)."""
    snippets, left_out = demo_snippets(all_snippets())
    texts = [s.text for s in snippets]
    assert ".venv/bin/stem-jax demo" in texts, "command 1's `stem-jax demo` step"
    assert any(t.startswith("stem-jax ask") and "--dataset demo" in t for t in texts)
    assert any(t.startswith("python experiments/export_metaqa_generic.py") for t in texts)
    assert any(t.startswith("stem-jax serve --dataset demo") for t in texts)
    assert sum(t.startswith("curl ") for t in texts) >= 2
    assert any(s.kind == "python" and "runs/demo-kg" in s.text for s in snippets)
    assert any(s.kind == "python" and 'Engine.open("demo"' in s.text for s in snippets)
    assert {s.page for s in snippets} > {"README.md"}, "the docs pages' commands are read too"
    assert len(left_out) <= 2, left_out
    serves = {s.text for s in snippets if s.kind == "shell" and _is_serve(s.text)}
    assert len(serves) == 1, f"every page starts the demo server with one command, so one server serves all: {serves}"
    for snippet in snippets:
        if " calibrate " in f" {snippet.text} ":
            assert "--limit" in snippet.text, f"{snippet}: show calibrate on the demo with a small --limit"


def test_the_page_order_puts_the_readme_first() -> None:
    assert PAGES[0].name == "README.md" and all(p.parent.name == "docs" for p in PAGES[1:])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(url: str, server: subprocess.Popen, timeout_s: float = 900.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"serve exited with rc {server.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"serve did not answer {url} within {timeout_s:.0f} s")


# Runs every Python snippet in turn in one interpreter, each in a fresh namespace; a failure names its snippet.
_PYTHON_RUNNER = """
import json, sys, time, traceback
for label, code in json.load(open(sys.argv[1])):
    started = time.monotonic()
    print(f"{label}: running python", flush=True)
    try:
        exec(compile(code, label, "exec"), {"__name__": "__main__"})
    except BaseException:
        print(f"SNIPPET FAILED {label}", flush=True)
        traceback.print_exc()
        sys.exit(1)
    print(f"  done in {time.monotonic() - started:.1f} s", flush=True)
"""


@pytest.mark.slow
def test_every_demo_snippet_runs_as_written(tmp_path: Path) -> None:
    snippets, _ = demo_snippets(all_snippets())
    work = tmp_path / "newcomer"
    work.mkdir()
    (work / "experiments").symlink_to(REPO / "experiments")
    venv_bin = Path(sys.executable).parent
    (work / ".venv").symlink_to(venv_bin.parent)
    env = dict(os.environ, STEM_CACHE_DIR=str(tmp_path / "cache"),
               PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=str(REPO))
    assert shutil.which("stem-jax", path=env["PATH"]), "stem-jax is not installed in the test's venv"
    serves = [s for s in snippets if s.kind == "shell" and _is_serve(s.text)]
    curls = [s for s in snippets if s.text.startswith("curl ")]
    python = [s for s in snippets if s.kind == "python"]
    server: subprocess.Popen | None = None
    port = _free_port()
    try:
        for snippet in snippets:
            if snippet.kind == "python" or snippet in curls:
                continue
            if snippet in serves:
                print(f"{snippet}: starting on port {port}", flush=True)
                server = subprocess.Popen(f"{snippet.text} --port {port}", shell=True, cwd=work, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True)
                continue
            started = time.monotonic()
            print(f"{snippet.page}:{snippet.line}: running {snippet.text[:100]}", flush=True)
            result = subprocess.run(snippet.text, shell=True, cwd=work, env=env, capture_output=True, text=True,
                                    timeout=900)
            assert result.returncode == 0, \
                f"{snippet}\nstdout: {result.stdout[-2000:]}\nstderr: {result.stderr[-3000:]}"
            if snippet.text.startswith("stem-jax ask"):
                assert "no answer" not in result.stdout, f"{snippet}\n{result.stdout}"
            print(f"  done in {time.monotonic() - started:.1f} s", flush=True)
        if python:
            started = time.monotonic()
            listing = tmp_path / "python-snippets.json"
            listing.write_text(json.dumps([[f"{s.page}:{s.line}", s.text] for s in python]))
            result = subprocess.run([sys.executable, "-c", _PYTHON_RUNNER, str(listing)], cwd=work, env=env,
                                    capture_output=True, text=True, timeout=1800)
            print(result.stdout, f"python snippets: {time.monotonic() - started:.1f} s", flush=True)
            assert result.returncode == 0, f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        if server is not None:
            started = time.monotonic()
            _wait_healthy(f"http://127.0.0.1:{port}/healthz", server)
            print(f"  server healthy after {time.monotonic() - started:.1f} s more", flush=True)
        for snippet in curls:
            assert server is not None, f"{snippet}: no server started before it"
            text = snippet.text.replace("localhost:8000", f"localhost:{port}")
            result = subprocess.run(f"{text} --fail-with-body", shell=True, cwd=work, env=env,
                                    capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, f"{snippet}\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
            assert '"answers"' in result.stdout and '"entity"' in result.stdout, f"{snippet}\n{result.stdout}"
    finally:
        _stop(server)


def _stop(server: subprocess.Popen | None) -> None:
    if server is None or server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()

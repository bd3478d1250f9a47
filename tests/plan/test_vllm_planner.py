"""The vLLM planner against recorded generations: batching, retries, grounding, backends, P3-P6 export."""

import io
import json
import logging
from collections import Counter

import pytest

from stem_jax.answer.generation import generate_answers
from stem_jax.data.demo_kg import load_demo
from stem_jax.data.types import Question
from stem_jax.encoder import HashingEncoder
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index, relation_text
from stem_jax.plan.llm_planner import (
    FewShotPool,
    RelationGrounder,
    VLLMPlanner,
    examples_from_training,
    schema_from_triples,
)
from stem_jax.plan.openai_client import OpenAIBackend
from stem_jax.plan.synthetic import export_records, path_assertions, reverse_generate, sample_masked_walks
from stem_jax.plan.vllm import VLLMBackend

RELATIONS = ("directed_by", "starred_actors", "has_genre", "release_year", "born_in")


class FakeLLM:
    """Recorded generations: ``script(prompt, call_kind, attempt)`` returns the text for one output.

    Records every call (number of prompts, n, beam) so tests can check batching.
    """

    def __init__(self, script):
        self.script = script
        self.calls = []
        self.attempts = Counter()

    def generate(self, prompts, *, n=1, beam=False, temperature=0.0, max_tokens=256, seed=None, **extra):
        call = len(self.calls)
        self.calls.append({"prompts": len(prompts), "n": n, "beam": beam, "temperature": temperature, **extra})
        out = []
        for position, prompt in enumerate(prompts):
            kind = _kind(prompt)
            key = (kind, prompt.rsplit("Question: ", 1)[-1][:80] if kind == "p1" else prompt[-200:])
            texts = []
            for j in range(n):
                self.attempts[key] += 1
                texts.append(self.script(prompt, kind, self.attempts[key] - 1, j, position=position, call=call))
            out.append(texts)
        return out


def _kind(prompt):
    if prompt.startswith(("You break multi-hop", "Rewrite the question")):
        return "p1"
    if prompt.startswith(("You turn single-hop", "Write each fact")):
        return "p2"
    if prompt.startswith("Answer the question"):
        return "p3"
    if prompt.startswith("Write one plain"):
        return "p4"
    if prompt.startswith("Pick the retrieval"):
        return "p5"
    return "p6"


def _question(text, topic):
    return Question(qid=text, text=text, topic_entities=(topic,), answers=("a", "b"))


def _planner(llm, **kwargs):
    pool = FewShotPool(examples_from_training(load_demo(split="train").questions[:30]), k=2)
    encoder = HashingEncoder()
    grounder = RelationGrounder(RELATIONS, encoder, encoder.encode([relation_text(r) for r in RELATIONS]))
    return VLLMPlanner(llm, RELATIONS, pool, grounder, **kwargs)


GOOD_P1 = ["Assertions:\n- {t} directed by [ENT1]\nStrategy: Precision",
           "Assertions:\n- {t} directed by [ENT1]\n- [ENT1] born in [ENT2]\nStrategy: Breadth",
           "Assertions:\n- {t} has genre [ENT1]\nStrategy: Breadth",
           "Assertions:\n- {t} directed by [ENT1]\nStrategy: Precision"]  # duplicate of beam 0


def _p2_for(prompt):
    statements = prompt.rsplit("Statements:\n", 1)[1].split("\nTriples:")[0].splitlines()
    out = []
    for s in statements:
        s = s[2:]
        for phrase, rel in (("directed by", "directed_by"), ("born in", "was born in"), ("has genre", "genre")):
            if phrase in s:
                head, tail = s.split(f" {phrase} ")
                out.append(f'("{head}", "{rel}", "{tail}")')
    return "\n".join(out)


def test_one_beam_call_for_the_batch_then_one_sagb_call():
    def script(prompt, kind, attempt, j, **_):
        topic = prompt.rsplit("Question: who directed ", 1)[-1].strip()
        return GOOD_P1[j].format(t=topic) if kind == "p1" else _p2_for(prompt)

    llm = FakeLLM(script)
    questions = [_question(f"who directed Film{i}", f"Film{i}") for i in range(5)]
    planner = _planner(llm)
    beams = planner.plan_batch(questions)
    assert [c["prompts"] for c in llm.calls] == [5, 5 * 3]  # SGDA: 5 prompts, SAGB: 3 distinct beams each
    assert llm.calls[0] == {"prompts": 5, "n": 4, "beam": True, "temperature": 0.0}
    assert llm.calls[1]["temperature"] == 0.0 and not llm.calls[1]["beam"]
    beam = beams[2]
    assert [b.schema.describe() for b in beam] == [
        "{(Film2, directed_by, [ENT1])} -> [ENT1] [Precision]",
        "{(Film2, directed_by, [ENT1]); ([ENT1], born_in, [ENT2])} -> [ENT2] [Breadth]",
        "{(Film2, has_genre, [ENT1])} -> [ENT1] [Breadth]",
    ]
    assert planner.stats["sgda_calls"] == 1 and planner.stats["sagb_calls"] == 1


def test_retries_then_precision_default():
    """Beam 0 never names a strategy (-> Precision after 5 retries); beam 1 is garbage until retry 3."""

    def script(prompt, kind, attempt, j, position=0, call=0):
        if kind == "p2":
            return _p2_for(prompt)
        if call == 0:  # the beam call: one output per beam
            return "Assertions:\n- X directed by [ENT1]\n" if j == 0 else "I am not sure."
        if position == 0:  # retries of beam 0: assertions, but the strategy is cut off
            return "Assertions:\n- X has genre [ENT1]\nStrat"
        return "Assertions:\n- X has genre [ENT1]\nStrategy: Breadth" if call >= 3 else "I am not sure."

    llm = FakeLLM(script)
    planner = _planner(llm, beam=2, retries=5)
    beams = planner.plan_batch([_question("who directed X", "X")])
    sgda_calls = llm.calls[:-1]
    assert len(sgda_calls) == 1 + 5  # the beam call + 5 retry rounds (beam 0 never gets a strategy)
    assert [c["prompts"] for c in sgda_calls[1:]] == [2, 2, 2, 1, 1]  # beam 1 is fixed by retry 3
    assert all(c["temperature"] > 0 and c["n"] == 1 for c in sgda_calls[1:])
    assert planner.stats["strategy_defaulted_to_precision"] == 1
    assert [b.schema.describe() for b in beams[0]] == [
        "{(X, directed_by, [ENT1])} -> [ENT1] [Precision]",
        "{(X, has_genre, [ENT1])} -> [ENT1] [Breadth]",
    ]


def test_unparseable_beams_are_dropped_after_retries():
    def script(prompt, kind, attempt, j, **_):
        return "nonsense" if kind == "p1" else "((("

    llm = FakeLLM(script)
    planner = _planner(llm, beam=2, retries=2)
    assert planner.plan_batch([_question("who directed X", "X")]) == [[]]
    assert planner.stats["beams_dropped_no_assertions"] == 2
    assert planner.stats["questions_without_plan"] == 1


def test_truncated_sagb_output_is_retried():
    def script(prompt, kind, attempt, j, **_):
        if kind == "p1":
            return "Assertions:\n- X directed by [ENT1]\nStrategy: Precision"
        return '("X", "directed_by", "[EN' if attempt == 0 else '("X", "directed_by", "[ENT1]")'

    llm = FakeLLM(script)
    planner = _planner(llm, beam=1)
    beams = planner.plan_batch([_question("who directed X", "X")])
    assert beams[0][0].schema.describe() == "{(X, directed_by, [ENT1])} -> [ENT1] [Precision]"
    assert planner.stats["sagb_retry_rounds"] == 1


def test_relation_grounding_exact_normalised_nearest(caplog):
    encoder = HashingEncoder()
    emb = encoder.encode([relation_text(r) for r in RELATIONS])
    grounder = RelationGrounder(RELATIONS, encoder, emb)
    assert grounder.ground("directed_by") == "directed_by"
    assert grounder.ground("Directed By") == "directed_by"
    assert grounder.ground("film.film.directed_by") == "directed_by"
    with caplog.at_level(logging.INFO, logger="stem_jax.plan.llm_planner"):
        assert grounder.ground("was born in") == "born_in"
    assert "grounded relation 'was born in' -> 'born_in' (nearest" in caplog.text
    assert grounder.stats["exact"] == 1 and grounder.stats["normalised"] == 2 and grounder.stats["nearest"] == 1
    bare = RelationGrounder(RELATIONS)
    assert bare.ground("mascot") == "mascot" and bare.stats["unknown"] == 1


def test_schema_from_triples_answer_rule():
    s = schema_from_triples([("[ENT1]", "directed_by", "Kismet"), ("[ENT1]", "born_in", "ent 2")], "Breadth")
    assert s.answer == "[ENT2]" and s.strategy == "Breadth"
    s = schema_from_triples([("Kismet", "directed_by", "[ENT1]"), ("Kismet", "has_genre", "Drama")], "Nonsense")
    assert s.answer == "[ENT1]" and s.strategy == "Precision"
    assert schema_from_triples([("Kismet", "has_genre", "Drama")], "Precision") is None


def test_few_shot_pool_picks_similar_distinct_templates():
    train = load_demo(split="train").questions
    pool = FewShotPool(examples_from_training(train), encoder=HashingEncoder(), k=3)
    picked = pool.pick([Question("q", "which films did Someone Else direct", ("Someone Else",), ("a",))])[0]
    assert len(picked) == 3
    assert len({tuple(r for _, r, _ in e.triples) for e in picked}) >= 2
    assert "direct" in picked[-1].question  # the most similar example sits last, next to the question
    canonical = FewShotPool(examples_from_training(train), encoder=HashingEncoder(), k=3, canonical=True)
    first = canonical.pick([Question("q", "which films did Someone Else direct", ("Someone Else",), ("a",))])[0]
    assert [e.triples[0][1] for e in first] == [e.triples[0][1] for e in picked]  # same templates ...
    assert all(e in canonical._canonical.values() for e in first)  # ... shown by their first example
    plain = FewShotPool(examples_from_training(train[:20]), k=2).pick([train[0], train[1]])
    assert plain[0] == plain[1] and len(plain[0]) == 2


def test_openai_backend_request_and_response():
    seen = {}

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def opener(request, timeout):
        seen["url"] = request.full_url
        seen["body"] = json.loads(request.data)
        seen["auth"] = request.headers.get("Authorization")
        choices = [{"index": i, "text": f"out{i}"} for i in reversed(range(4))]
        return Response(json.dumps({"choices": choices}).encode())

    backend = OpenAIBackend("http://gpu:8000/v1", "qwen", api_key="k", opener=opener, server="vllm")
    out = backend.generate(["p0", "p1"], n=2, beam=True, max_tokens=64)
    assert out == [["out0", "out1"], ["out2", "out3"]]
    assert seen["url"] == "http://gpu:8000/v1/completions"
    assert seen["body"]["prompt"] == ["p0", "p1"] and seen["body"]["use_beam_search"] and seen["body"]["n"] == 2
    assert seen["auth"] == "Bearer k"
    with pytest.raises(StemError, match="without choices"):
        OpenAIBackend.parse_response({"error": "x"}, 1, 1)

    def failing(request, timeout):
        raise OSError("connection refused")

    with pytest.raises(StemError, match="vllm serve"):
        OpenAIBackend("http://gpu:8000", "m", opener=failing, server="vllm").generate(["p"])


class _Response(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _llama_server(texts_by_temperature, owned_by="me"):
    """A fake llama.cpp server: one choice per request, ``n`` ignored, logprobs on request."""
    seen = []

    def opener(request, timeout):
        if request.full_url.endswith("/models"):
            seen.append({"url": request.full_url})
            return _Response(json.dumps({"data": [{"id": "m", "owned_by": owned_by}]}).encode())
        body = json.loads(request.data)
        seen.append(body)
        text, logprob = texts_by_temperature(body)
        choice = {"index": 0, "text": text,
                  "logprobs": {"token_logprobs": [logprob, logprob]} if body.get("logprobs") else None}
        return _Response(json.dumps({"choices": [choice],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 2}}).encode())

    return opener, seen


def test_llama_cpp_flavour_one_prompt_per_request_sampled_candidates_ranked(caplog):
    def answer(body):
        if body["temperature"] == 0.0:
            return "greedy", -0.5
        return ("better", -0.1) if body["seed"] % 2 else ("greedy", -0.5)  # a duplicate of the greedy one

    opener, seen = _llama_server(answer)
    backend = OpenAIBackend("http://127.0.0.1:8080", "m", opener=opener)  # auto: /v1/models says llama.cpp
    with caplog.at_level(logging.WARNING, logger="stem_jax.plan.openai_client"):
        out = backend.generate(["p0", "p1"], n=3, beam=True, max_tokens=16, seed=4, grammar="root ::= \"x\"")
        backend.generate(["p2"], n=2, beam=True)
    assert backend.server == "llama.cpp" and seen[0]["url"] == "http://127.0.0.1:8080/v1/models"
    completions = [b for b in seen if "prompt" in b]
    assert [b["prompt"] for b in completions[:6]] == ["p0"] * 3 + ["p1"] * 3  # one request per prompt and sample
    assert [b["temperature"] for b in completions[:3]] == [0.0, 0.7, 0.7]
    assert all(b["grammar"] == 'root ::= "x"' and "use_beam_search" not in b and "n" not in b for b in completions[:6])
    assert out == [["better", "greedy"], ["better", "greedy"]]  # de-duplicated, ranked by mean logprob
    assert caplog.text.count("one completion per request") == 1  # said once
    assert backend.usage["requests"] == 8 and backend.usage["completion_tokens"] == 16
    assert backend.tokens_per_second()["completion_tokens_per_s"] > 0


def test_auto_flavour_detects_vllm_and_unknown_servers():
    opener, seen = _llama_server(lambda body: ("x", 0.0), owned_by="vllm")
    assert OpenAIBackend("http://h:1/v1", "m", opener=opener).flavour() == "vllm"

    def down(request, timeout):
        raise OSError("refused")

    assert OpenAIBackend("http://h:1/v1", "m", opener=down).flavour() == "llama.cpp"
    with pytest.raises(StemError, match="unknown LLM server flavour"):
        OpenAIBackend("http://h:1/v1", "m", server="tgi")


def test_compact_constrained_planner_sends_grammars_and_cuts_continuations():
    def script(prompt, kind, attempt, j, **_):
        if kind == "p1":
            assert prompt.endswith("Question: who directed X\nFacts:\n")
            return "- X directed by [ENT1]\nStrategy: Precision\n\nQuestion: who wrote Y\nFacts:\n- Strategy: Breadth"
        assert prompt.endswith("- X directed by [ENT1]\nTriples:\n")
        return '("X", "directed_by", "[ENT1]")\n\nFacts:\n- Y written by [ENT1]'

    llm = FakeLLM(script)
    planner = _planner(llm, beam=1, style="compact", constrained=True)
    beams = planner.plan_batch([_question("who directed X", "X")])
    assert [b.schema.describe() for b in beams[0]] == ["{(X, directed_by, [ENT1])} -> [ENT1] [Precision]"]
    assert "Strategy: " in llm.calls[0]["grammar"] and '"\\"directed_by\\""' in llm.calls[1]["grammar"]
    assert llm.calls[1]["grammar"].startswith("root ::= triple{1}")  # one triple per assertion, exactly
    assert planner.failures == [None]
    with pytest.raises(StemError, match="compact"):
        _planner(llm, constrained=True)


def test_failures_say_parse_or_ground():
    def script(prompt, kind, attempt, j, **_):
        if kind == "p1":
            return "Assertions:\n- X directed by [ENT1]\nStrategy: Precision" if "X" in prompt[-30:] else "no idea"
        return '("X", "directed_by", "Y")'  # no placeholder: no answer node

    planner = _planner(FakeLLM(script), beam=1, retries=1)
    assert planner.plan_batch([_question("who directed X", "X"), _question("who directed Z", "Z")]) == [[], []]
    assert planner.failures == ["ground", "parse"]


def test_vllm_backend_without_vllm_is_a_clear_error():
    pytest.importorskip("stem_jax")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(StemError, match=r"pip install -e '\.\[vllm\]'"):
            VLLMBackend("some/model")
    else:  # pragma: no cover - only where vLLM is installed
        pytest.skip("vLLM is installed here")


def test_generate_answers_uses_dfs_chains():
    def script(prompt, kind, attempt, j, **_):
        assert "Kismet -directed_by-> William Dieterle" in prompt
        return '["William Dieterle"]'

    llm = FakeLLM(script)
    answers = generate_answers(llm, ["who directed Kismet"], [[("Kismet", "directed_by", "William Dieterle")]],
                               [["Kismet"]])
    assert answers == [["William Dieterle"]] and len(llm.calls) == 1


def test_reverse_generation_and_path_assertions_export(tmp_path):
    demo = load_demo(split="train")
    index = build_index(demo.triples)
    samples = sample_masked_walks(index, 6, max_hops=2, seed=1)
    assert len(samples) == 6
    for triples, answer in samples:
        assert answer == f"[ENT{len(triples)}]"
        assert not triples[0][0].startswith("[ENT") or not triples[0][2].startswith("[ENT")

    def script(prompt, kind, attempt, j, **_):
        if kind == "p6":
            n = prompt.split("Triples:\n")[-1].count("(")
            if "[ENT2]" in prompt.split("Triples:\n")[-1] and attempt == 0:
                return "No Solution" if n == 99 else "Sentences:\n- half"  # malformed, retried
            return "Sentences:\n" + "".join(f"- fact {i}\n" for i in range(n)) + "Question: what is it?"
        if kind == "p5":
            return "Breadth" if attempt else "hmm"
        if kind == "p4":
            n = prompt.split("Triples:\n")[-1].count("(")
            return "Sentences:\n" + "".join(f"- sentence {i} [ENT1]\n" for i in range(n))
        raise AssertionError(kind)

    llm = FakeLLM(script)
    stats = Counter()
    records = reverse_generate(llm, samples, stats=stats)
    assert len(records) == 6 and all(r.strategy == "Breadth" and r.source == "reverse" for r in records)
    records += path_assertions(llm, demo.questions[:4], stats=stats)
    assert [r.source for r in records[-4:]] == ["path"] * 4
    assert len(records[-1].assertions) == len(records[-1].triples)
    n = export_records(tmp_path / "sft.jsonl", records)
    lines = (tmp_path / "sft.jsonl").read_text().splitlines()
    assert n == len(lines) == 10
    assert set(json.loads(lines[0])) == {"question", "assertions", "strategy", "schema_graph", "answer", "source"}


def test_no_solution_is_dropped():
    llm = FakeLLM(lambda prompt, kind, attempt, j, **_: "No Solution")
    stats = Counter()
    assert reverse_generate(llm, [([("A", "r", "[ENT1]")], "[ENT1]")], stats=stats) == []
    assert stats["no_solution"] == 1

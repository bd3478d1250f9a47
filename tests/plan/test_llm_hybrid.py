"""The hybrid planner (LLM first, pattern fallback) and the KG grounding check, on the demo KG."""

from collections import Counter

import pytest

from stem_jax.data.demo_kg import load_demo
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.hybrid import HybridPlanner, grounding_failure, reaches_answer
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.schema import SchemaGraph, SchemaTriple


@pytest.fixture(scope="module")
def demo():
    data = load_demo(split="train")
    return data, build_index(data.triples)


def _graph(*triples, answer="[ENT1]", strategy="Precision"):
    return SchemaGraph(tuple(SchemaTriple(*t) for t in triples), answer, strategy)


class FixedPlanner:
    """A batch planner answering from a dict (qid -> beam); optional failures list like VLLMPlanner's."""

    def __init__(self, beams, name="fixed", failures=None, error=None):
        self.beams, self.name, self.failures_by_qid, self.error = beams, name, failures or {}, error
        self.asked = []

    def plan_batch(self, questions):
        self.asked.append([q.qid for q in questions])
        if self.error:
            raise StemError(self.error)
        self.failures = [self.failures_by_qid.get(q.qid) for q in questions]
        return [list(self.beams.get(q.qid, [])) for q in questions]


def _director_question(data):
    return next(q for q in data.questions if q.qtype == "fwd:directed_by")


def test_grounding_failure_reasons(demo):
    data, index = demo
    q = _director_question(data)
    topic = q.topic_entities[0]
    good = _graph((topic, "directed_by", "[ENT1]"))
    assert grounding_failure(good, q, index) is None
    assert reaches_answer(good, topic, index.entity_ids[topic], index)
    # either direction is followed, as the tracer does
    assert grounding_failure(_graph(("[ENT1]", "directed_by", topic)), q, index) is None
    assert grounding_failure(_graph((topic, "mascot", "[ENT1]")), q, index) == "relation not in the KG"
    assert grounding_failure(_graph(("Nobody Here", "directed_by", "[ENT1]")), q, index) == \
        "no schema node names a question entity"
    assert grounding_failure(_graph((topic, "born_in", "[ENT1]")), q, index) == "no KG path along the plan"
    detached = _graph((topic, "directed_by", "[ENT1]"), ("[ENT2]", "born_in", "[ENT3]"), answer="[ENT3]")
    assert grounding_failure(detached, q, index) == "answer unreachable from the question entity"


def test_hybrid_keeps_grounded_llm_plans_and_falls_back_otherwise(demo):
    data, index = demo
    qs = [q for q in data.questions if q.qtype == "fwd:directed_by"][:4]
    oracle = {q.qid: [ScoredSchema(s, 0.9) for s in OraclePlanner().plan(q)] for q in qs}
    t = [q.topic_entities[0] for q in qs]
    llm = FixedPlanner({
        qs[0].qid: [ScoredSchema(_graph((t[0], "directed_by", "[ENT1]"), strategy="Breadth"))],
        qs[1].qid: [ScoredSchema(_graph((t[1], "born_in", "[ENT1]")))],       # does not ground
        qs[2].qid: [],                                                       # unparseable
        qs[3].qid: [ScoredSchema(_graph((t[3], "mascot", "[ENT1]"))),         # dropped ...
                    ScoredSchema(_graph((t[3], "directed_by", "[ENT1]")))],   # ... kept
    }, failures={qs[2].qid: "parse"})
    hybrid = HybridPlanner(llm, FixedPlanner(oracle, name="pattern"), index)
    beams = hybrid.plan_batch(qs)
    assert beams[0][0].schema.strategy == "Breadth"  # the LLM's plan
    assert beams[1] == oracle[qs[1].qid] and beams[2] == oracle[qs[2].qid]
    assert [b.schema.triples[0].relation for b in beams[3]] == ["directed_by"]
    assert [hybrid.records[q.qid]["planner"] for q in qs] == ["llm", "pattern", "pattern", "llm"]
    assert hybrid.records[qs[1].qid]["reason"] == "llm plan does not ground: no KG path along the plan"
    assert hybrid.records[qs[2].qid]["reason"] == "llm plan failed: parse"
    assert hybrid.stats["plans_from_llm"] == 2 and hybrid.stats["llm_beams_dropped: relation not in the KG"] == 1


def test_hybrid_gate_and_server_errors(demo):
    data, index = demo
    qs = [q for q in data.questions if q.qtype == "fwd:directed_by"][:2]
    fallback = FixedPlanner({qs[0].qid: [ScoredSchema(OraclePlanner().plan(qs[0])[0], 0.99)],
                             qs[1].qid: [ScoredSchema(OraclePlanner().plan(qs[1])[0], 0.4)]}, name="pattern")
    llm = FixedPlanner({})
    hybrid = HybridPlanner(llm, fallback, index, consult_below=0.5)
    hybrid.plan_batch(qs)
    assert llm.asked == [[qs[1].qid]]  # only the question the pattern planner is unsure of
    assert hybrid.records[qs[0].qid] == {"planner": "pattern", "reason": "fallback confident"}
    broken = HybridPlanner(FixedPlanner({}, error="server down"), fallback, index)
    beams = broken.plan_batch(qs)
    assert beams == [fallback.beams[q.qid] for q in qs]
    assert Counter(r["reason"] for r in broken.records.values()) == {"llm plan failed: llm error": 2}

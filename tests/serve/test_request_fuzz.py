"""Random JSON bodies against the API: never a 500, always a JSON error of a documented status, bounded in size."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYS = st.sampled_from(["question", "qid", "topic", "top", "evidence_limit", "method", "questions", "x", ""])
SCALARS = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=40)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                      max_leaves=12)
BODIES = st.dictionaries(KEYS, VALUES, max_size=6) | VALUES




@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES, route=st.sampled_from(["/v1/ask", "/v1/retrieve"]))
def test_random_bodies_get_documented_answers(client, body, route):
    r = client.post(route, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 404, 413, 422), r.text[:300]
    assert len(r.content) < 200_000
    data = r.json()
    if r.status_code != 200:
        assert set(data) == {"error"} and data["error"]["message"] and data["error"]["type"]
        assert len(data["error"].get("details", [])) <= 20


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300))
def test_random_bytes_get_documented_answers_too(client, raw):
    r = client.post("/v1/ask", content=raw, headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 404, 422), r.text[:300]
    assert r.status_code != 200 or json.loads(raw)

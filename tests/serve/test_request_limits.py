"""Bounded requests: a body too large is refused unread, error lists are capped, types are strict, and
every malformed body gets the same 422."""

from __future__ import annotations

import json
import time

import pytest

from stem_jax.serve.app import MAX_BODY_BYTES, MAX_ERRORS_LISTED

ASK = "who directed [The Saidor]"




def test_a_huge_body_is_refused_unread(client):
    body = json.dumps({"question": ASK, **{f"key{i}": 1 for i in range(650_000)}}).encode()
    assert len(body) > 10_000_000
    began = time.perf_counter()
    r = client.post("/v1/ask", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413 and time.perf_counter() - began < 2.0
    error = r.json()["error"]
    assert error["type"] == "too_large" and error["limit_bytes"] == MAX_BODY_BYTES and "how to fix" in error["message"]
    assert len(r.content) < 1000


def test_a_streamed_body_without_a_length_is_cut_at_the_limit(client):
    def chunks():
        yield b'{"question": "' + b"x" * 1000
        for _ in range(MAX_BODY_BYTES // 1000 + 2):
            yield b"x" * 1000
        yield b'"}'

    r = client.post("/v1/ask", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_the_error_list_is_capped(client):
    keys = {f"k{i}": 1 for i in range(40_000)}
    body = json.dumps({"question": ASK, **keys}).encode()
    assert len(body) < MAX_BODY_BYTES
    began = time.perf_counter()
    r = client.post("/v1/ask", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and time.perf_counter() - began < 5.0
    error = r.json()["error"]
    assert len(error["details"]) == MAX_ERRORS_LISTED and error["problems"] == 40_000
    assert "and 39980 more problems" in error["message"] and len(r.content) < 10_000


@pytest.mark.parametrize("top", ["3", True, 3.0, None])
def test_top_takes_only_a_whole_number(client, top):
    r = client.post("/v1/ask", json={"question": ASK, "top": top})
    assert r.status_code == 422 and "top" in r.json()["error"]["message"]


def test_top_as_a_number_works(client):
    r = client.post("/v1/ask", json={"question": ASK, "top": 1, "evidence_limit": 0})
    assert r.status_code == 200 and len(r.json()["answers"]) <= 1


@pytest.mark.parametrize("body", [b"\xff\xfe{", b"[" * 1000 + b"]" * 1000, b'{"question": ', b"not json"])
def test_every_malformed_body_is_the_same_422(client, body):
    r = client.post("/v1/ask", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request"


def test_head_of_the_explorer_page(client):
    r = client.head("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html") and not r.content

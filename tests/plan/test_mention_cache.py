"""The branch planner links a question text once while it stays among the latest texts, and keeps at most that many."""

from __future__ import annotations

import types

import stem_jax.plan.branch_planner as module
from stem_jax.plan.branch_planner import Mentions


def test_a_text_is_linked_once_and_the_kept_texts_are_bounded(monkeypatch):
    monkeypatch.setattr(module, "LINKED_TEXTS", 2)
    asked: list[str] = []
    mentions = Mentions.__new__(Mentions)
    mentions._links = module.OrderedDict()
    mentions.linker = types.SimpleNamespace(mentions=lambda text: asked.append(text) or [text.upper()])
    assert mentions.links("a") == ["A"] and mentions.links("a") == ["A"] and asked == ["a"]
    mentions.links("b")
    mentions.links("a")  # refreshed: "b" is now the least recently asked
    mentions.links("c")
    assert list(mentions._links) == ["a", "c"]
    mentions.links("b")
    assert asked == ["a", "b", "c", "b"]

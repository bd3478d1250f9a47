"""The path planner's constraint branches and the answer scorer's mention features link a question's text once
between them: one linker and one bounded memo per KG index and names table (``text_links``)."""

from __future__ import annotations

import gc

import numpy as np

import stem_jax.plan.branch_planner as module
from stem_jax.data.types import Question
from stem_jax.kg.index import build_index
from stem_jax.plan.branch_planner import Mentions, text_links

TRIPLES = [("Logan Lerman", "film.actor", "Fury"), ("Candice White", "film.crew", "Fury"),
           ("Fury", "film.genre", "War film")]


def counting_linker(monkeypatch) -> list[str]:
    asked: list[str] = []
    original = module.EntityLinker.mentions

    def mentions(self, text):
        asked.append(text)
        return original(self, text)

    monkeypatch.setattr(module.EntityLinker, "mentions", mentions)
    return asked


def test_branches_and_answer_features_link_a_text_once(monkeypatch):
    asked = counting_linker(monkeypatch)
    index, names = build_index(TRIPLES), {}
    question = Question("q", "what movie featuring Logan Lerman had Candice White as a crew member", ("Logan Lerman",),
                        ("Fury",))
    branches = Mentions(index, names, np.zeros(index.num_entities, bool))
    found = branches(question)
    assert [index.entities[e] for e in found] == ["Candice White"]
    shared = text_links(index, None)  # the answer scorer's lookup ({} and None are the same empty names)
    assert [link.entity for link in shared.links(question.text)] == [link.entity for link in branches.links(question.text)]
    assert asked == [question.text]
    assert branches.linker is shared.linker


def test_another_index_or_names_table_gets_its_own_linker():
    index = build_index(TRIPLES)
    names = {"Fury": "Fury (2014 film)"}
    assert text_links(index, names) is text_links(index, names)
    assert text_links(index, names) is not text_links(index, None)
    assert text_links(build_index(TRIPLES), names) is not text_links(index, names)


def test_a_dropped_index_leaves_no_entry():
    index = build_index(TRIPLES)
    text_links(index, None)
    del index
    gc.collect()
    other = build_index(TRIPLES[:1])
    text_links(other, None)  # a lookup drops the entries of indexes gone since
    assert all(ref() is not None for ref, _, _ in module._TEXT_LINKS)
    assert [ref() for ref, _, _ in module._TEXT_LINKS].count(other) == 1

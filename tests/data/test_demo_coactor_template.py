"""The demo's co-actor template asks about a person and answers people.

"which actors shared a film with [X]" walked film -> actors -> films: its topics were films and its
answers films (8 of 150 2-hop test questions).
"""

from __future__ import annotations

import pytest

from stem_jax.data.demo_kg import SPLITS, generate_demo_kg, load_demo


@pytest.mark.parametrize("split", SPLITS)
def test_co_actor_questions_ask_about_an_actor_and_answer_actors(split):
    triples = generate_demo_kg()
    actors = {t for _, r, t in triples if r == "starred_actors"}
    films = {h for h, r, _ in triples if r == "starred_actors"}
    cast: dict[str, set[str]] = {}
    for film, r, actor in triples:
        if r == "starred_actors":
            cast.setdefault(film, set()).add(actor)
    questions = [q for q in load_demo(split=split).questions
                 if q.text.startswith(("which actors shared a film with", "who acted together with"))]
    assert questions
    for q in questions:
        assert q.topic_entities[0] in actors and q.topic_entities[0] not in films, q.text
        assert set(q.answers) <= actors and not set(q.answers) & films, q.text
        assert q.topic_entities[0] not in q.answers  # the topic is excluded, as MetaQA does
        costars = {a for members in cast.values() if q.topic_entities[0] in members for a in members}
        assert set(q.answers) == costars - {q.topic_entities[0]}, q.text

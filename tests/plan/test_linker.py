"""Entity linker: exact, case-insensitive and fuzzy matches, longest span, brackets, case twins."""

import pytest
from triple_tables import rows

from stem_jax.data.linker import EntityLinker, normalise
from stem_jax.kg.index import build_index

TRIPLES = rows("""
    Harriet the Spy | starred_actors | Michelle Trachtenberg
    Black Christmas | starred_actors | Michelle Trachtenberg
    Black Christmas | has_tags       | michelle trachtenberg
    Spy             | directed_by    | Paul Feig
    Grégoire Colin  | starred_actors | Grégoire Colin
    Before the Rain | starred_actors | Grégoire Colin
    Me and You      | directed_by    | director
    Up              | has_genre      | Animation
    Up              | has_tags       | pixar
    Persona         | has_genre      | Drama
""")


@pytest.fixture(scope="module")
def linker():
    return EntityLinker.from_index(build_index(TRIPLES))


def best(linker, text):
    links = linker.link(text)
    return (links[0].entity, links[0].kind, links[0].mention) if links else None


def test_exact_match_keeps_case_twins_apart(linker):
    assert best(linker, "what films did Michelle Trachtenberg star in") == (
        "Michelle Trachtenberg", "exact", "Michelle Trachtenberg")
    assert best(linker, "which movies are tagged michelle trachtenberg") == (
        "michelle trachtenberg", "exact", "michelle trachtenberg")


def test_case_insensitive_when_no_exact_spelling(linker):
    entity, kind, mention = best(linker, "what films did MICHELLE TRACHTENBERG star in")
    # Both twins match case-insensitively; the better-connected one (2 triples) comes first.
    assert (entity, kind, mention) == ("Michelle Trachtenberg", "case-insensitive", "MICHELLE TRACHTENBERG")
    links = linker.link("what films did MICHELLE TRACHTENBERG star in")
    assert {link.entity for link in links[:2]} == {"Michelle Trachtenberg", "michelle trachtenberg"}


def test_longest_span_wins(linker):
    assert best(linker, "who starred in Harriet the Spy")[0] == "Harriet the Spy"
    assert best(linker, "who directed Spy")[0] == "Spy"
    # "the Prowl"-style extensions by a stop word do not make a span longer than the exact name.
    assert best(linker, "who directed the Spy")[0] == "Spy"


def test_fuzzy_accents_and_typos(linker):
    link = linker.link("what does Gregoire Colin appear in")[0]
    assert (link.entity, link.kind, link.score) == ("Grégoire Colin", "fuzzy", 1.0)
    typo = linker.link("what films did Michelle Trachtenburg star in")[0]
    assert typo.entity == "Michelle Trachtenberg" and typo.kind == "fuzzy" and 0.9 <= typo.score < 1.0
    assert typo.mention == "Michelle Trachtenburg" and typo.start == len("what films did ")


def test_stop_words_and_single_lowercase_words_are_not_fuzzy(linker):
    # "person" is one edit from "Persona" but a lower-case single word: not linked by similarity.
    assert all(link.entity != "Persona" for link in linker.link("which person directed it"))
    # A title made of stop words links when written with capitals, and beats a lower-case tag word.
    assert best(linker, "who is the director of Me and You")[0] == "Me and You"
    assert best(linker, "who directed Up")[0] == "Up"
    assert linker.link("who is in it and what") == []


def test_brackets_use_the_bracket_text(linker):
    links = linker.link("what films did [michelle trachtenberg] star in, not Harriet the Spy")
    assert [(link.entity, link.kind) for link in links] == [("michelle trachtenberg", "bracket")]
    assert links[0].mention == "michelle trachtenberg"
    # A bracket whose text is not a name as written falls back to the cascade inside the bracket.
    assert best(linker, "who starred in [harriet the spy]") == ("Harriet the Spy", "case-insensitive",
                                                                 "harriet the spy")


def test_question_helper_fills_topics(linker):
    question = linker.question("who starred in [Harriet the Spy]", qid="q1", answers=("Michelle Trachtenberg",))
    assert question.text == "who starred in Harriet the Spy"
    assert question.topic_entities == ("Harriet the Spy",) and question.qid == "q1"
    assert linker.question("nothing to see here") is None


def test_entity_ids_with_names():
    index = build_index([("/m/1", "/film/film/directed_by", "/m/2"), ("/m/3", "/film/film/directed_by", "/m/2")])
    names = {"/m/1": "Kismet", "/m/2": "William Dieterle", "/m/3": "Kismet"}
    linker = EntityLinker.from_index(index, names)
    links = linker.link("who directed Kismet")
    assert [(link.entity, link.name) for link in links] == [("/m/1", "Kismet"), ("/m/3", "Kismet")]


def test_normalise():
    assert normalise("Grégoire  Colin!") == "gregoire colin"
    assert normalise("Straße") == "strasse"


def test_case_twins_follow_the_exact_match(linker):
    links = linker.link("which movies are tagged michelle trachtenberg")
    assert [(link.entity, link.kind) for link in links[:2]] == [
        ("michelle trachtenberg", "exact"), ("Michelle Trachtenberg", "case-insensitive")]
    assert links[0].start == links[1].start and links[0].end == links[1].end


def test_fuzzy_at_the_start_of_a_question(linker):
    link = linker.link("Michelle Trachtenburg starred in which films")[0]
    assert (link.entity, link.kind, link.start) == ("Michelle Trachtenberg", "fuzzy", 0)

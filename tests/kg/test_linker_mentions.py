"""Every entity a question mentions: one link per span, the best-ranked span first, each a constraint anchor."""

from stem_jax.data.linker import EntityLinker
from stem_jax.kg.index import build_index

TRIPLES = [("Fury", "film.film.starring", "Logan Lerman"), ("Fury", "film.film.other_crew", "m.0crew"),
           ("m.0crew", "film.crew_gig.crew_member", "Candice White"), ("Perks", "film.film.starring", "Logan Lerman"),
           ("Germany", "location.location.adjoin_s", "Switzerland"), ("germany", "tag.of", "Perks")]


def test_a_question_with_two_conditions_gets_both_entities():
    linker = EntityLinker.from_index(build_index(TRIPLES))
    found = linker.mentions("On what movie featuring Logan Lerman was Candice White a crew member?")
    assert {link.entity for link in found} == {"Logan Lerman", "Candice White"}
    assert len({(link.start, link.end) for link in found}) == len(found)


def test_same_name_twins_of_one_span_count_once():
    linker = EntityLinker.from_index(build_index(TRIPLES))
    found = linker.mentions("Which country borders Germany?")
    assert [link.mention for link in found] == ["Germany"]
    assert len(linker.link("Which country borders Germany?")) >= 1


def test_mentions_are_capped_and_empty_when_nothing_links():
    linker = EntityLinker.from_index(build_index(TRIPLES))
    assert linker.mentions("what is the weather like") == []
    assert len(linker.mentions("Fury Perks Germany Logan Lerman Candice White", max_mentions=2)) == 2

import pytest

from stem_jax.data.conditions import literal_share, value_conditions


@pytest.mark.parametrize("question, topics, kinds", [
    ("Which teams in the American League West were founded prior to 1966?", ["American League West"],
     ("date", "comparison")),
    ("What film starring Kim Richards that was released on 3-21-1975?", ["Kim Richards"], ("date",)),
    ("Which university attended by Charles Drew has the smallest number of postgraduates?", ["Charles R. Drew"],
     ("superlative",)),
    ("Where did Drew Brees attend university, that has less than 31,290 undergraduates?", ["Drew Brees"],
     ("comparison",)),
    ("What country with the ISO number 056 shares a border with France?", ["France"], ("number",)),
    ("What movie did Billy Ray Cyrus produce that starred Miley Cyrus?", ["Billy Ray Cyrus", "Miley Cyrus"], ()),
])
def test_value_conditions_names_what_the_wording_asks_of_a_value(question, topics, kinds):
    assert value_conditions(question, topics) == kinds


def test_numbers_inside_a_topic_entity_name_are_no_condition():
    question = "What was invented by the author of \"Poor Richard's Almanac of 1735\"?"
    assert value_conditions(question, ["Poor Richard's Almanac of 1735"]) == ()
    assert value_conditions(question) == ("date",)


def test_literal_share_counts_names_that_read_as_values():
    assert literal_share(["1966", "3.5", "1795-03-04", "Canada", "Super Bowl XLII", "Tron: Legacy"]) == 0.5
    assert literal_share([]) == 0.0

"""Prompt rendering (P1-P6) and the tolerant parsers, including malformed and truncated generations."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from stem_jax.plan import prompts
from stem_jax.plan.prompts import Decomposition, FewShotExample

EXAMPLE = FewShotExample(
    question="who directed the films starring Tom Hanks",
    assertions=("[ENT1] starred actors Tom Hanks", "[ENT1] directed by [ENT2]"),
    strategy="Breadth",
    triples=(("[ENT1]", "starred_actors", "Tom Hanks"), ("[ENT1]", "directed_by", "[ENT2]")),
)


def test_render_p1_has_rules_examples_and_question():
    text = prompts.render_p1("what genre is Kismet", [EXAMPLE])
    assert "Precision" in text and "Breadth" in text and "[ENT1]" in text
    assert "Question: who directed the films starring Tom Hanks" in text
    assert "- [ENT1] directed by [ENT2]\nStrategy: Breadth" in text
    assert text.rstrip().endswith("Question: what genre is Kismet")
    assert "Examples:" not in prompts.render_p1("q", [])


def test_render_p2_lists_relations_and_quotes_triples():
    text = prompts.render_p2(["Kismet has genre [ENT1]"], ["directed_by", "has_genre"], [EXAMPLE])
    assert "Relations: directed_by, has_genre" in text
    assert '("[ENT1]", "starred_actors", "Tom Hanks")' in text
    assert text.rstrip().endswith("- Kismet has genre [ENT1]\nTriples:")


def test_render_p3_to_p6():
    assert "Kismet -directed_by-> William Dieterle" in prompts.render_p3("who directed Kismet",
                                                                         ["Kismet -directed_by-> William Dieterle"])
    assert "(no paths found)" in prompts.render_p3("q", [])
    p4 = prompts.render_p4("who directed Kismet", [("Kismet", "directed_by", "[ENT1]")], [EXAMPLE])
    assert '("Kismet", "directed_by", "[ENT1]")' in p4 and "Sentences:" in p4
    p5 = prompts.render_p5("who directed Kismet", ["Kismet directed by [ENT1]"], [EXAMPLE])
    assert p5.rstrip().endswith("Strategy:") and "Strategy: Breadth" in p5
    p6 = prompts.render_p6([("Kismet", "directed_by", "[ENT1]")], "[ENT1]")
    assert "Answer entity: [ENT1]" in p6 and "No Solution" in p6


def test_parse_decomposition_in_the_prompted_format():
    text = "Assertions:\n- ENT1's mascot is Clutch the Bear\n- [ent 1]'s arena stadium is [ENT2].\nStrategy: Breadth\n"
    d = prompts.parse_decomposition(text)
    assert d == Decomposition(("[ENT1]'s mascot is Clutch the Bear", "[ENT1]'s arena stadium is [ENT2]"), "Breadth")


def test_parse_decomposition_in_the_paper_tuple_format():
    d = prompts.parse_decomposition('(("Kismet is directed by [ENT1]", "[ENT1] was born in [ENT2]"), Precision)')
    assert d == Decomposition(("Kismet is directed by [ENT1]", "[ENT1] was born in [ENT2]"), "Precision")
    d = prompts.parse_decomposition("((Kismet is directed by [ENT1], [ENT1] was born in [ENT2]), Precision)")
    assert d == Decomposition(("Kismet is directed by [ENT1]", "[ENT1] was born in [ENT2]"), "Precision")


def test_parse_decomposition_numbered_with_prose_and_no_strategy():
    text = "Sure! Here is the plan.\nAssertions:\n1. Kismet has genre [ENT1]\n2) Kismet released in [ENT2]\n"
    d = prompts.parse_decomposition(text)
    assert d.assertions == ("Kismet has genre [ENT1]", "Kismet released in [ENT2]") and d.strategy is None


def test_parse_decomposition_truncated_and_malformed():
    # truncated mid-strategy: assertions survive, the strategy is missing -> caller retries
    d = prompts.parse_decomposition("Assertions:\n- Kismet has genre [ENT1]\nStrat")
    assert d.assertions == ("Kismet has genre [ENT1]",) and d.strategy is None
    assert prompts.parse_decomposition("") is None
    assert prompts.parse_decomposition("I cannot help with that.") is None
    assert prompts.parse_decomposition("Strategy: Precision") is None


def test_parse_strategy():
    assert prompts.parse_strategy("Strategy: breadth") == "Breadth"
    assert prompts.parse_strategy("**Strategy**: Precision") == "Precision"
    assert prompts.parse_strategy("Precision") == "Precision"
    assert prompts.parse_strategy("Precision or Breadth?") is None  # ambiguous without a label
    assert prompts.parse_strategy("Precision... no wait. Strategy: Breadth") == "Breadth"
    assert prompts.parse_strategy("nothing") is None


def test_parse_triples():
    text = '("Kismet", "directed_by", "[ENT1]")\n([ENT2], directed_by, [ENT1])'
    assert prompts.parse_triples(text) == [("Kismet", "directed_by", "[ENT1]"), ("[ENT2]", "directed_by", "[ENT1]")]
    # an unquoted title with a comma is split around the known relation
    assert prompts.parse_triples("(Lust, Caution, directed_by, [ENT1])", ["directed_by"]) == [
        ("Lust, Caution", "directed_by", "[ENT1]")]
    assert prompts.parse_triples("(Lust, Caution, directed_by, [ENT1])") is None  # no vocabulary: ambiguous
    assert prompts.parse_triples('("Kismet", "directed_by", "[ENT1]")\n("[ENT2]", "direc') is None  # truncated
    assert prompts.parse_triples("no triples here") is None
    assert prompts.parse_triples('[\n("Kismet", "has_genre", "ent 1"),\n]') == [("Kismet", "has_genre", "[ENT1]")]


def test_parse_answers_sentences_reverse():
    assert prompts.parse_answers('["William Dieterle", "Heat"]') == ["William Dieterle", "Heat"]
    assert prompts.parse_answers("Answer: Drama | Comedy") == ["Drama", "Comedy"]
    assert prompts.parse_answers("- Drama\n- Comedy\n") == ["Drama", "Comedy"]
    assert prompts.parse_answers("") == []
    assert prompts.parse_sentences("- a b\n- c d\n", expected=2) == ["a b", "c d"]
    assert prompts.parse_sentences("- a b\n", expected=2) is None
    text = "Sentences:\n- Kismet was directed by [ENT1]\n- [ENT1] was born in [ENT2]\nQuestion: Where was the director of Kismet born?"
    assert prompts.parse_reverse(text, 2) == (["Kismet was directed by [ENT1]", "[ENT1] was born in [ENT2]"],
                                               "Where was the director of Kismet born?")
    assert prompts.parse_reverse("No Solution", 2) is None
    assert prompts.parse_reverse('[("Kismet was directed by [ENT1]"), "Who directed Kismet?"]', 1) == (
        ["Kismet was directed by [ENT1]"], "Who directed Kismet?")
    assert prompts.parse_reverse("Sentences:\n- Kismet was directed by [ENT1]\nQuest", 1) is None  # truncated


# ---------------------------------------------------------------------------------------------
# Properties: parsers never raise, the prompted format round-trips, truncation never invents data
# ---------------------------------------------------------------------------------------------

_words = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=0x24F),
                 min_size=1, max_size=8)
_assertion = st.lists(st.one_of(_words, st.integers(1, 5).map(lambda i: f"[ENT{i}]")), min_size=2, max_size=6).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise(text):
    prompts.parse_decomposition(text)
    prompts.parse_triples(text, ["directed_by"])
    prompts.parse_answers(text)
    prompts.parse_sentences(text, 2)
    prompts.parse_reverse(text, 2)
    prompts.parse_strategy(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(_assertion, min_size=1, max_size=4, unique=True), st.sampled_from(["Precision", "Breadth"]))
def test_prompted_decomposition_format_round_trips(assertions, strategy):
    text = "Assertions:\n" + "".join(f"- {a}\n" for a in assertions) + f"Strategy: {strategy}\n"
    d = prompts.parse_decomposition(text)
    assert d is not None and d.strategy == strategy
    assert d.assertions == tuple(dict.fromkeys(prompts.normalise_placeholders(a) for a in assertions))


_name = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd", "Zs"), max_codepoint=0x24F),
                min_size=1, max_size=12).map(str.strip).filter(bool)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_name, st.sampled_from(["directed_by", "has_genre"]), _name), min_size=1, max_size=4),
       st.data())
def test_triples_round_trip_and_truncation_is_never_a_different_graph(triples, data):
    text = "\n".join(prompts.format_triple(t) for t in triples)
    parsed = prompts.parse_triples(text)
    expected = [tuple(prompts.normalise_placeholders(p) for p in t) for t in triples]
    assert parsed == expected
    cut = data.draw(st.integers(0, len(text)))
    partial = prompts.parse_triples(text[:cut])
    # a cut generation parses to nothing, or to a prefix of the full graph (never to other triples)
    if partial is not None:
        assert partial == expected[: len(partial)]


def test_format_triple_is_json_quoted():
    assert prompts.format_triple(("Lust, Caution", "directed_by", '[ENT1]')) == '("Lust, Caution", "directed_by", "[ENT1]")'
    assert json.loads("[" + prompts.format_triple(("a", "b", "c"))[1:-1] + "]") == ["a", "b", "c"]

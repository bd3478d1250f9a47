"""Evidence chains support the answers: :func:`answer_chains` on hand-made evidence."""

from triple_tables import rows

from stem_jax.answer.chains import answer_chains, reasoning_chains

# a direct starred_actors triple, and a director plan's branch through the same film
EVIDENCE = rows("""
    Rim  | starred_actors | Nuthtun
    Rim  | starred_actors | Churveam
    Rim  | directed_by    | Stix
    Bam  | directed_by    | Stix
    Bam  | starred_actors | Gelaim
    Bam  | starred_actors | Girpil
    Chen | directed_by    | Stix
    Chen | starred_actors | Nuthtun
""")


def _answer_of(chain: str, answers: list[str]) -> int:
    ends = [i for i, a in enumerate(answers) if chain.endswith(" " + a)]
    assert ends, f"chain {chain!r} ends at no answer"
    return ends[0]


def test_every_chain_ends_at_an_answer_best_ranked_first():
    answers = ["Nuthtun", "Churveam", "Gelaim"]
    chains = answer_chains(EVIDENCE, ["Rim"], answers)
    assert chains == [
        "Rim -starred_actors-> Nuthtun",  # the direct triple, not the director plan's longer walk
        "Rim -starred_actors-> Churveam",
        "Rim -directed_by-> Stix <-directed_by- Bam -starred_actors-> Gelaim",
    ]
    ranks = [_answer_of(c, answers) for c in chains]
    assert ranks == sorted(ranks)


def test_the_old_dfs_leaves_did_not_end_at_the_answers():
    """What `ask` printed before: DFS leaves of the director branch, first chain ending at no answer."""
    old = reasoning_chains(EVIDENCE, ["Rim"])
    assert not old[0].endswith("Nuthtun") and not old[0].endswith("Churveam")


def test_shortest_walks_only_and_per_answer_cap():
    evidence = [("T", "r", f"m{i}") for i in range(5)] + [(f"m{i}", "s", "A") for i in range(5)]
    evidence += [("T", "q", "x"), ("x", "q", "y"), ("y", "q", "A")]  # a longer walk: never listed
    chains = answer_chains(evidence, ["T"], ["A"], per_answer=2)
    assert chains == ["T -r-> m0 -s-> A", "T -r-> m1 -s-> A"]
    assert len(answer_chains(evidence, ["T"], ["A"], per_answer=10)) == 5


def test_unreachable_and_root_answers_get_no_chain_and_max_chains_caps():
    evidence = [("T", "r", "A"), ("T", "r", "B"), ("U", "r", "C")]
    assert answer_chains(evidence, ["T"], ["C", "T", "B", "missing"]) == ["T -r-> B"]
    assert answer_chains(evidence, ["T"], ["A", "B"], max_chains=1) == ["T -r-> A"]
    assert answer_chains(evidence, ["nowhere"], ["A"]) == []


def test_several_roots_and_display_names():
    """A conjunctive question (two topic entities): a walk from each, written with display names."""
    evidence = [("p", "plays_in", "club"), ("p", "plays_as", "pos"), ("p2", "plays_in", "club")]
    names = {"club": "Club X", "pos": "Forward", "p": "Player P"}
    chains = answer_chains(evidence, ["club", "pos"], ["p"], display=lambda e: names.get(e, e))
    assert chains == ["Club X <-plays_in- Player P", "Forward <-plays_as- Player P"]


def test_reversed_edges_keep_the_kg_direction():
    evidence = [("Film", "directed_by", "Dir"), ("Film2", "directed_by", "Dir")]
    assert answer_chains(evidence, ["Film"], ["Film2"]) == ["Film -directed_by-> Dir <-directed_by- Film2"]

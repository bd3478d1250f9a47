"""WorldCup2014 loader on tiny hand-written files (the real data is never copied into the repo)."""

from __future__ import annotations

import pytest

from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import PathStep
from stem_jax.data.wc2014 import load_wc2014, parse_path, split_lines
from stem_jax.errors import DataError

KB = [
    ("Ann_A", "plays_in_club", "Club_X"), ("Club_X", "plays_in_club_inverse", "Ann_A"),
    ("Ann_A", "plays_for_country", "Utopia"), ("Utopia", "plays_for_country_inverse", "Ann_A"),
    ("Ann_A", "plays_position", "Forward"), ("Forward", "plays_position_inverse", "Ann_A"),
    ("Ann_A", "is_aged", "23"), ("Club_X", "is_in_country", "Utopia"), ("Utopia", "is_in_country_inverse", "Club_X"),
    ("Bob_B", "plays_in_club", "Club_X"), ("Club_X", "plays_in_club_inverse", "Bob_B"),
    ("Bob_B", "plays_position", "Forward"), ("Forward", "plays_position_inverse", "Bob_B"),
]
CTX = "Ann_A#plays_in_club#Club_X///Ann_A#is_aged#23"


def _write(folder, n_p1: int = 20):
    folder.mkdir()
    (folder / "kb.txt").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in KB))
    p1 = [f"which club does Ann_A play for ?\tClub_X\tAnn_A#plays_in_club#Club_X#<end>#Club_X\tClub_X/\t{CTX}"
          for _ in range(n_p1 - 2)]
    p1.append(f"how old is Ann_A ?\t23\tAnn_A#is_aged#23#<end>#23\t23/\t{CTX}")
    p1.append("broken line without tabs")
    (folder / "WC-P1.txt").write_text("\n".join(p1) + "\n")
    (folder / "WC-P2.txt").write_text(
        f"where is the club that Ann_A plays for ?\tUtopia\tAnn_A#plays_in_club#Club_X#is_in_country#Utopia\tUtopia/\t{CTX}\n"
        * 10)
    (folder / "WC-C.txt").write_text(
        ("which player in Club_X plays at Forward ?\tAnn_A\t"
         "Forward#plays_position_inverse#Ann_A#<end>#Ann_A*Club_X#plays_in_club_inverse#Ann_A#<end>#Ann_A\t"
         f"Ann_A/Bob_B/\t{CTX}\tForward/Club_X\n") * 10)
    return folder


def test_parse_path_one_two_hops_and_constraints():
    assert parse_path("A#r#B#<end>#B") == (("A", (PathStep("r"),), "B"),)
    assert parse_path("A#r1#M#r2#B") == (("A", (PathStep("r1"), PathStep("r2")), "B"),)
    assert parse_path("A#r#X#<end>#X*B#s#X#<end>#X") == (("A", (PathStep("r"),), "X"), ("B", (PathStep("s"),), "X"))
    assert parse_path("A#r#B") is None
    assert parse_path("A#r#B#<end>#C") is None  # a one-hop path ends where it says


def test_split_is_seeded_811_disjoint_and_complete():
    parts = split_lines(1000, seed=0)
    assert [len(parts[s]) for s in ("train", "dev", "test")] == [800, 100, 100]
    union = set().union(*(set(v.tolist()) for v in parts.values()))
    assert union == set(range(1000))
    assert all(set(parts[a].tolist()).isdisjoint(parts[b].tolist()) for a in parts for b in parts if a < b)
    again = split_lines(1000, seed=0)
    assert all((again[s] == parts[s]).all() for s in parts)
    assert not (split_lines(1000, seed=1)["test"] == parts["test"]).all()


def test_loader_reads_every_file_and_split(tmp_path):
    root = _write(tmp_path / "wc2014")
    seen: dict[str, set[str]] = {}
    for split in ("train", "dev", "test"):
        data = load_wc2014(root, split=split)
        assert data.name == "wc2014" and len(data.triples) == len(KB) and not data.excludes_topic
        seen[split] = {q.qid for q in data.questions}
    assert not (seen["train"] & seen["test"]) and not (seen["dev"] & seen["test"])
    everything = seen["train"] | seen["dev"] | seen["test"]
    assert len(everything) == 19 + 10 + 10  # the broken P1 line is a counted skip in whichever split holds it
    for split in ("train", "dev", "test"):
        data = load_wc2014(root, split=split)
        for q in data.questions:
            if q.qtype == "WC-P2":
                assert q.gold_path == (PathStep("plays_in_club"), PathStep("is_in_country")) and q.hops == 2
                assert q.topic_entities == ("Ann_A",) and q.answers == ("Utopia",) and q.constraints is None
            if q.qtype == "WC-C":
                # topics in the order the text names them: Club_X before Forward
                assert q.topic_entities == ("Club_X", "Forward") and q.answers == ("Ann_A", "Bob_B")
                assert q.constraints == (("Club_X", (PathStep("plays_in_club_inverse"),)),
                                         ("Forward", (PathStep("plays_position_inverse"),)))
                assert q.gold_path == q.constraints[0][1]


def test_bad_lines_are_counted_or_strict(tmp_path):
    root = _write(tmp_path / "wc2014", n_p1=200)
    skipped = sum(load_wc2014(root, split=s, subsets=("P1",)).skips.total for s in ("train", "dev", "test"))
    assert skipped == 1
    split_of_bad = next(s for s in ("train", "dev", "test") if load_wc2014(root, split=s, subsets=("P1",)).skips.total)
    with pytest.raises(DataError):
        load_wc2014(root, split=split_of_bad, subsets=("P1",), strict=True)
    with pytest.raises(DataError, match="no 'validation' split"):
        load_wc2014(root, split="validation")


def test_registry_names_pick_subsets(tmp_path):
    _write(tmp_path / "wc2014")
    qtypes = {name: {q.qtype for s in ("train", "dev", "test")
                     for q in load_dataset(DatasetSpec(name=name, split=s, data_dir=tmp_path)).questions}
              for name in ("wc2014", "wc2014-p1", "wc2014-p2", "wc2014-c")}
    assert qtypes == {"wc2014": {"WC-P1", "WC-P2", "WC-C"}, "wc2014-p1": {"WC-P1"}, "wc2014-p2": {"WC-P2"},
                      "wc2014-c": {"WC-C"}}

"""The `files` loader puts back entity names a triples file split at their commas, and decodes question text whose
UTF-8 was read as Latin-1."""

import json

from stem_jax.data.files import load_files, rejoin_split_names, undo_mojibake

GOOD = [
    "Dominican Republic\tlocation.country.currency_used\tDominican peso",
    "Kentucky\tlocation.location.containedby\tUnited States of America",
    "Albert\tpeople.person.nationality\tm.0abc12",
]


def rows(*lines):
    return [(n, line.split("\t")) for n, line in enumerate(lines, start=1)]


def test_a_head_split_at_its_comma_is_joined_again():
    out, repaired = rejoin_split_names(rows(*GOOD, "Comendador\tElías Piña,location.location.containedby\t"
                                                   "Dominican Republic"))
    assert out[-1][1] == ["Comendador, Elías Piña", "location.location.containedby", "Dominican Republic"]
    assert repaired == [4]


def test_a_name_whose_rest_took_the_relation_field_is_joined_again():
    out, repaired = rejoin_split_names(rows(*GOOD, "Washington\tD.C.\tlocation.location.containedby,"
                                                   "United States of America"))
    assert out[-1][1] == ["Washington, D.C.", "location.location.containedby", "United States of America"]
    assert repaired == [4]


def test_well_formed_rows_with_commas_in_names_are_kept_as_read():
    line = "Martin Luther King, Jr.\tpeople.person.nationality\tUnited States of America"
    out, repaired = rejoin_split_names(rows(*GOOD, line))
    assert out[-1][1] == line.split("\t") and repaired == []


def test_a_row_with_two_relation_pieces_or_a_mid_tail_is_not_guessed_at():
    ambiguous = "A\tB,location.location.containedby\tpeople.person.nationality,C"
    mid_tail = "Associate Director\tWhite House Office,government.office.holders\tm.05pv1bq"
    out, repaired = rejoin_split_names(rows(*GOOD, ambiguous, mid_tail))
    assert out[3][1] == ambiguous.split("\t")
    assert out[4][1] == ["Associate Director, White House Office", "government.office.holders", "m.05pv1bq"]
    assert repaired == [5]


def test_a_kg_of_plain_relation_words_repairs_only_commas_in_the_relation_field():
    plain = ["Ana\tplays_in\tClub X", "Ben\tplays_in\tClub Y"]
    out, repaired = rejoin_split_names(rows(*plain, "Club X\tFC,plays_in\tLeague", "Cai\tD.C.\tClub, Y"))
    assert out[2][1] == ["Club X, FC", "plays_in", "League"]
    assert out[3][1] == ["Cai", "D.C.", "Club, Y"]  # no comma in its relation field: read as written
    assert repaired == [3]


def test_loader_counts_the_repair_and_the_kg_has_the_whole_name(tmp_path):
    (tmp_path / "triples.tsv").write_text("\n".join([*GOOD, "Comendador\tElías Piña,location.location.containedby\t"
                                                     "Dominican Republic"]) + "\n")
    (tmp_path / "test.jsonl").write_text(json.dumps(
        {"id": "q", "question": "What money is used where Comendador, El\u00c3\u00adas Pi\u00c3\u00b1a is?",
         "answers": ["Dominican peso"]}) + "\n")
    dataset = load_files(folder=tmp_path, split="test")
    assert ("Comendador, Elías Piña", "location.location.containedby", "Dominican Republic") in dataset.triples
    assert not any("Piña," in r for _, r, _ in dataset.triples)
    (question,) = dataset.questions
    assert "Elías Piña" in question.text
    assert question.topic_entities == ("Comendador, Elías Piña",)  # the linker reads the decoded text
    assert any("split at a comma" in line for line in dataset.notes.lines())
    assert any("Latin-1" in line for line in dataset.notes.lines())


def test_undo_mojibake_leaves_clean_and_undecodable_text_alone():
    assert undo_mojibake("Otto P\u00c3\u00a9rez Molina") == "Otto Pérez Molina"
    assert undo_mojibake("Otto Pérez Molina") == "Otto Pérez Molina"
    assert undo_mojibake("Ã© and 北京") == "Ã© and 北京"  # not Latin-1 text: kept

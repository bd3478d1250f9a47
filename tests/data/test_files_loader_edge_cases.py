"""The `files` loader's edge cases: CSV quoting, relation names, JSON field types, damaged files.

Each case pins a failure that would otherwise be a silent wrong result (relations merged, a quoted newline
split into bogus triples, a "True-hop" group, a question id "None") or a traceback / unclear message
(damaged .gz, an unreadable file, ``--delimiter ''``, a folder named test.jsonl read as 0 questions, an
empty triples file's "see the skip reasons above: )").
"""

from __future__ import annotations

import builtins
import gzip
import json
import os
from pathlib import Path

import pytest

from stem_jax.cli.main import main
from stem_jax.data import types
from stem_jax.data.files import load_files, read_triples
from stem_jax.data.types import SkipReport
from stem_jax.errors import DataError

TRIPLES = "Kismet\tdirected_by\tWilliam Dieterle\nKismet\tstarred_actors\tMarlene Dietrich\n"


def _kg(folder: Path, triples: str = TRIPLES, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "triples.tsv").write_text(triples)
    for name, text in files.items():
        (folder / name.replace("_jsonl", ".jsonl").replace("_tsv", ".tsv")).write_text(text)
    return folder


# ----- CSV quoting ----------------------------------------------------------------------------


def test_a_quoted_csv_field_may_hold_a_newline_and_the_delimiter(tmp_path):
    path = tmp_path / "kg.csv"
    path.write_text('head,relation,tail\n"Kismet\n(1944)",directed_by,"Dieterle, William"\nA,r,B\n')
    data = load_files(triples=path)
    assert data.triples == [("Kismet\n(1944)", "directed_by", "Dieterle, William"), ("A", "r", "B")]
    assert data.skips.total == 0


def test_an_unclosed_csv_quote_is_one_skip_naming_its_lines(tmp_path):
    path = tmp_path / "kg.csv"
    path.write_text('A,r,B\n"open,r,C\nD,r,E\n')
    data = load_files(triples=path)
    assert data.triples == [("A", "r", "B")]
    (line,) = data.skips.lines()
    assert "malformed CSV record" in line and "kg.csv:2 lines 2-3" in line
    with pytest.raises(DataError, match=r"kg.csv:2: malformed CSV record"):
        load_files(triples=path, strict=True)


def test_csv_name_files_parse_quotes_too(tmp_path):
    folder = _kg(tmp_path / "kg")
    (folder / "entity_names.csv").write_text('id,name\nKismet,"Kismet, the film"\n')
    assert load_files(folder=folder).entity_names == {"Kismet": "Kismet, the film"}


# ----- relation names that merge two relations ------------------------------------------------


def test_a_relation_named_like_another_relations_id_is_an_error(tmp_path):
    folder = _kg(tmp_path / "kg", "a\tr1\tb\na\tr2\tc\n", relation_names_tsv="r1\tr2\n")
    with pytest.raises(DataError, match=r"relation 'r1' is named 'r2', the id of relation 'r2'.*merge"):
        load_files(folder=folder)


def test_swapped_relation_names_are_fine_and_two_ids_one_name_is_still_an_error(tmp_path):
    folder = _kg(tmp_path / "swap", "a\tr1\tb\na\tr2\tc\n", relation_names_tsv="r1\tr2\nr2\tr1\n")
    assert sorted(load_files(folder=folder).triples) == [("a", "r1", "c"), ("a", "r2", "b")]
    folder = _kg(tmp_path / "same", "a\tr1\tb\na\tr2\tc\n", relation_names_tsv="r1\tx\nr2\tx\n")
    with pytest.raises(DataError, match="have the same name 'x'"):
        load_files(folder=folder)


# ----- JSON types in question records --------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("hops", True, "hops must be a positive integer"),
    ("hops", 2.0, "hops must be a positive integer"),
    ("hops", "2", "hops must be a positive integer"),
    ("id", None, "id must be a non-empty string or an integer"),
    ("id", True, "id must be a non-empty string or an integer"),
    ("id", 1.5, "id must be a non-empty string or an integer"),
    ("id", ["q"], "id must be a non-empty string or an integer"),
    ("id", " ", "id must be a non-empty string or an integer"),
    ("qtype", 5, "qtype must be a non-empty string"),
    ("topic_entities", [True], "topic_entities / answers must be a string or a list of strings"),
    ("answers", [None], "topic_entities / answers must be a string or a list of strings"),
])
def test_json_fields_of_the_wrong_type_are_skips_naming_the_line(tmp_path, field, value, reason):
    good = {"id": "q1", "question": "who directed Kismet", "topic_entities": ["Kismet"],
            "answers": ["William Dieterle"], "gold_path": ["directed_by"]}
    bad = {**good, "id": "q2", field: value}
    folder = _kg(tmp_path / "kg", test_jsonl=json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    data = load_files(folder=folder)
    assert [q.qid for q in data.questions] == ["q1"]
    (line,) = data.skips.lines()
    assert reason in line and "test.jsonl:2" in line, line
    with pytest.raises(DataError, match=r"test.jsonl:2: " + reason.replace("/", ".")):
        load_files(folder=folder, strict=True)


def test_integer_ids_and_hops_still_load(tmp_path):
    record = {"id": 7, "question": "who directed Kismet", "topic_entities": ["Kismet"], "answers": ["William Dieterle"],
              "hops": 1}
    data = load_files(folder=_kg(tmp_path / "kg", test_jsonl=json.dumps(record) + "\n"))
    assert [(q.qid, q.hops) for q in data.questions] == [("7", 1)]


def test_jsonl_triples_with_a_boolean_field_are_malformed(tmp_path):
    path = tmp_path / "kg.jsonl"
    path.write_text('["a", "r", "b"]\n["a", "r", true]\n{"head": "a", "relation": "r", "tail": null}\n')
    data = load_files(triples=path)
    assert data.triples == [("a", "r", "b")] and data.skips.counts["malformed triple record"] == 2


# ----- tracebacks and unclear messages -----------------------------------------------------------------


def _gz(tmp_path: Path, kind: str) -> Path:
    body = "".join(f"Film {i}\tdirected_by\tPerson {i % 7}\n" for i in range(3000)).encode()
    packed = bytearray(gzip.compress(body))
    path = tmp_path / f"{kind}.tsv.gz"
    if kind == "truncated":
        packed = packed[: len(packed) // 2]
    elif kind == "not gzip":
        packed = bytearray(body)
    else:  # a bad CRC
        packed[-6] ^= 0xFF
    path.write_bytes(bytes(packed))
    return path


@pytest.mark.parametrize(("kind", "said"), [("truncated", "truncated gzip file: it ends inside line"),
                                            ("not gzip", "not a gzip file"),
                                            ("bad crc", "damaged gzip file after line 3000")])
def test_damaged_gzip_triples_are_one_error(tmp_path, capsys, kind, said):
    path = _gz(tmp_path, kind)
    with pytest.raises(DataError, match=said):
        load_files(triples=path)
    assert main(["data-stats", "--dataset", "files", "--triples", str(path), "--encoder.name=hashing"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and said in err and "Traceback" not in err


def test_an_unreadable_file_is_one_error(tmp_path, monkeypatch):
    folder = _kg(tmp_path / "kg")
    if os.geteuid() != 0:  # a real chmod 000 (root reads through it)
        (folder / "triples.tsv").chmod(0)
        with pytest.raises(DataError, match="permission denied"):
            load_files(folder=folder)
        (folder / "triples.tsv").chmod(0o644)
    real_open = builtins.open

    def denied(path, *args, **kwargs):
        if str(path).endswith("triples.tsv"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(types, "open", denied, raising=False)  # raw_lines' open
    with pytest.raises(DataError, match=r"triples.tsv: cannot read the file \(permission denied\)"):
        load_files(folder=folder)


def test_an_empty_delimiter_is_one_error(tmp_path, capsys):
    folder = _kg(tmp_path / "kg")
    with pytest.raises(DataError, match="--delimiter ''"):
        load_files(folder=folder, delimiter="")
    assert main(["data-stats", "--dataset", "files", "--data-dir", str(folder), "--delimiter", "",
                 "--encoder.name=hashing"]) == 2
    assert "--delimiter ''" in capsys.readouterr().err
    with pytest.raises(DataError, match="--delimiter ''"):  # the readers themselves check it too
        read_triples(folder / "triples.tsv", SkipReport(), delimiter="")
    csv = tmp_path / "kg.csv"
    csv.write_text("a::r::b\n")
    with pytest.raises(DataError, match="one character"):
        load_files(triples=csv, delimiter="::")
    txt = tmp_path / "kg.txt"
    txt.write_text("a::r::b\n")
    assert load_files(triples=txt, delimiter="::").triples == [("a", "r", "b")]


def test_an_empty_triples_file_says_so(tmp_path):
    path = tmp_path / "triples.tsv"
    path.write_text("")
    with pytest.raises(DataError) as err:
        load_files(triples=path)
    assert "it is empty" in str(err.value) and "above" not in str(err.value)
    path.write_text("only\ttwo\n")
    with pytest.raises(DataError, match=r"no usable triples \(skipped 1 record\(s\): malformed triple line"):
        load_files(triples=path)


def test_a_question_file_that_is_a_folder_is_an_error_not_zero_questions(tmp_path, capsys):
    folder = _kg(tmp_path / "kg")
    (folder / "test.jsonl").mkdir()
    with pytest.raises(DataError, match=r"test.jsonl: expected a file, found a folder"):
        load_files(folder=folder)
    assert main(["eval", "--dataset", "files", "--data-dir", str(folder), "--encoder.name=hashing", "--cache-dir",
                 str(tmp_path / "cache"), "--no-progress", "--out", str(tmp_path / "run")]) == 2
    assert "expected a file, found a folder" in capsys.readouterr().err
    with pytest.raises(DataError, match="a folder, not a file"):
        load_files(folder=folder, questions=folder / "test.jsonl")

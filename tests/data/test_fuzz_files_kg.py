"""Fuzzed `files` KGs (quoted CSV, gzip, names files, JSON field types): exact results or counted skips.

* CSV triples and name files written by Python's csv writer, fields holding the delimiter, quotes,
  newlines, NUL, line separators and emoji, optionally gzipped: the loader reads back exactly what
  was written (quoted newlines inside one record; the writer's CRLF line ends).
* A gzipped triples file cut at a random byte: a :class:`DataError` naming the file, or (cut in the
  trailer only) the triples; never a traceback.
* Question records whose fields take random JSON values of every type: each record loads with the
  documented types or is one counted skip; ``strict`` turns the first skip into a DataError.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stem_jax.data.files import load_files
from stem_jax.errors import DataError

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
HEADERS = {("head", "relation", "tail"), ("subject", "predicate", "object"), ("h", "r", "t"),
           ("source", "relation", "target"), ("id", "name"), ("entity", "name"), ("relation", "name")}

# anything but CR (CRLF inside a quoted field reads back as LF, like universal newlines) and surrogates
_CHARS = st.characters(blacklist_characters="\r", blacklist_categories=("Cs",))
_SPICE = st.sampled_from([",", '"', "\n", "\x00", "\u2028", "\x85", "\U0001f3ac", "\t", ";", " "])
_FIELD = st.lists(st.one_of(st.text(_CHARS, min_size=1, max_size=6), _SPICE), min_size=1, max_size=5).map(
    "".join).filter(lambda s: s.strip() != "")


def _csv_bytes(rows: list[tuple[str, ...]], delimiter: str = ",") -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, delimiter=delimiter).writerows(rows)
    return buffer.getvalue().encode()


def _tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzzfiles")


@FAST
@given(rows=st.lists(st.tuples(_FIELD, _FIELD, _FIELD), min_size=1, max_size=12), packed=st.booleans(),
       delimiter=st.sampled_from([",", ";", "|"]))
def test_fuzzed_csv_triples_read_back_exactly(tmp_path_factory, rows, packed, delimiter):
    rows = [r for r in rows if tuple(f.strip().lower() for f in r) not in HEADERS] or [("a", "r", "b")]
    data = _csv_bytes(rows, delimiter)
    path = _tmp(tmp_path_factory) / ("kg.csv.gz" if packed else "kg.csv")
    path.write_bytes(gzip.compress(data) if packed else data)
    loaded = load_files(triples=path, delimiter=None if delimiter == "," else delimiter)
    expected = list(dict.fromkeys(tuple(f.strip() for f in r) for r in rows))
    assert loaded.triples == expected
    assert loaded.skips.counts.get("duplicate triple", 0) == len(rows) - len(expected)
    assert loaded.skips.total == len(rows) - len(expected)


@FAST
@given(names=st.dictionaries(st.sampled_from(["a", "b", "c"]), _FIELD, min_size=1))
def test_fuzzed_csv_entity_names_read_back_exactly(tmp_path_factory, names):
    folder = _tmp(tmp_path_factory)
    (folder / "triples.tsv").write_text("a\tr\tb\nb\tr\tc\n")
    (folder / "entity_names.csv").write_bytes(_csv_bytes(sorted(names.items())))
    assert load_files(folder=folder).entity_names == {k: v.strip() for k, v in names.items()}


@FAST
@given(cut=st.floats(0.0, 1.0, exclude_max=True), flip=st.booleans())
def test_fuzzed_damaged_gzip_is_a_data_error(tmp_path_factory, cut, flip):
    body = "".join(f"Film {i}\tdirected_by\tPerson {i % 7}\n" for i in range(400)).encode()
    packed = bytearray(gzip.compress(body))
    at = int(cut * len(packed))
    if flip:
        packed[at] ^= 0xFF
    else:
        packed = packed[:at]
    path = _tmp(tmp_path_factory) / "kg.tsv.gz"
    path.write_bytes(bytes(packed))
    try:
        loaded = load_files(triples=path)
    except DataError as err:
        assert str(path) in str(err) and "\n  how to fix: " in str(err)
    else:  # a flipped bit the stream format does not check (e.g. in the header's mtime or OS byte)
        assert flip and len(loaded.triples) == 400


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 5) | st.floats(allow_nan=True) | st.text(max_size=6),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
                     max_leaves=4)
FIELDS = ("id", "question", "topic_entities", "answers", "gold_path", "hops", "qtype")


@st.composite
def question_record(draw) -> dict:
    record = {"question": "who directed Kismet", "topic_entities": ["Kismet"], "answers": ["William Dieterle"],
              "gold_path": ["directed_by"]}
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)):
        if draw(st.booleans()):
            record[field] = draw(_JSON)
        else:
            record.pop(field, None)
    return record


@FAST
@given(records=st.lists(question_record(), min_size=1, max_size=8))
def test_fuzzed_question_field_types_load_or_skip(tmp_path_factory, records):
    folder = _tmp(tmp_path_factory)
    (folder / "triples.tsv").write_text("Kismet\tdirected_by\tWilliam Dieterle\nKismet\thas_genre\tDrama\n")
    lines = [json.dumps(r, allow_nan=True) for r in records]
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n")
    loaded = load_files(folder=folder)
    assert len(loaded.questions) + loaded.skips.total == len(records)
    for q in loaded.questions:
        assert isinstance(q.qid, str) and q.qid.strip() and q.qid != "None"
        assert q.hops is None or (type(q.hops) is int and q.hops >= 1)
        assert q.qtype is None or (isinstance(q.qtype, str) and q.qtype.strip())
        assert q.topic_entities == ("Kismet",) and all(isinstance(a, str) for a in q.answers)
    assert len({q.qid for q in loaded.questions}) == len(loaded.questions)
    if loaded.skips.total:
        try:
            load_files(folder=folder, strict=True)
        except DataError as err:
            assert "test.jsonl:" in str(err)
        else:
            raise AssertionError("strict loading accepted a file with skipped records")

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stem_jax.data.demo_kg import load_demo
from stem_jax.data.fb15k import load_fb15k237
from stem_jax.data.metaqa import load_metaqa, read_questions
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.rog import load_rog
from stem_jax.data.types import PathStep, SkipReport
from stem_jax.errors import DataError

KB = """Kismet|directed_by|William Dieterle
Kismet|starred_actors|Edward Arnold
Dieterle Film|directed_by|William Dieterle
Dieterle Film|in_language|German
broken line without bars
"""


@pytest.fixture
def metaqa_root(tmp_path):
    root = tmp_path / "metaqa"
    (root / "1-hop" / "vanilla").mkdir(parents=True)
    (root / "kb.txt").write_text(KB)
    (root / "1-hop" / "vanilla" / "qa_test.txt").write_text(
        "who directed [Kismet]\tWilliam Dieterle\n"
        "what did [William Dieterle] direct\tKismet|Dieterle Film|Kismet\n"
        "who directed [Nowhere Film]\tSomebody\n"
        "no tab in this line\n"
        "no brackets here\tX\n"
    )
    (root / "1-hop" / "qa_test_qtype.txt").write_text(
        "movie_to_director\ndirector_to_movie\nmovie_to_director\nmovie_to_director\nmovie_to_director\n"
    )
    return root


def test_metaqa_loads_questions_and_counts_skips(metaqa_root):
    data = load_metaqa(metaqa_root, hops=(1,))
    assert len(data.triples) == 4
    assert [q.text for q in data.questions] == ["who directed Kismet", "what did William Dieterle direct"]
    first, second = data.questions
    assert first.topic_entities == ("Kismet",) and first.answers == ("William Dieterle",)
    assert second.answers == ("Kismet", "Dieterle Film")  # duplicates dropped, order kept
    assert first.qtype == "movie_to_director" and first.hops == 1
    assert first.qid == "1-hop/test/1" and first.source.endswith("qa_test.txt:1")
    counts = data.skips.counts
    assert counts["malformed KB line (expected head|relation|tail)"] == 1
    assert counts["unknown topic entity (not in the KB)"] == 1
    assert counts["no [topic entity] in question"] == 1
    assert sum(counts.values()) == 4
    assert any("Nowhere Film" in line and "qa_test.txt:3" in line for line in data.skips.lines())


def test_metaqa_strict_names_file_and_line(metaqa_root):
    with pytest.raises(DataError) as err:
        load_metaqa(metaqa_root, hops=(1,), strict=True)
    assert "kb.txt:5" in str(err.value) and "how to fix" in str(err.value)


def test_metaqa_qtype_length_mismatch_is_an_error(metaqa_root):
    (metaqa_root / "1-hop" / "qa_test_qtype.txt").write_text("movie_to_director\n")
    with pytest.raises(DataError, match="1 qtype lines for 5 questions"):
        load_metaqa(metaqa_root, hops=(1,))


def test_metaqa_missing_folder_says_how_to_fix(tmp_path):
    with pytest.raises(DataError, match="STEM_DATA_DIR"):
        load_metaqa(tmp_path / "nope")


def test_user_question_file_without_qtypes(metaqa_root, tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("which language is [Dieterle Film] in\tGerman\n")
    data = load_dataset(DatasetSpec(name="metaqa", data_dir=metaqa_root.parent, questions=mine))
    assert len(data.questions) == 1
    q = data.questions[0]
    assert q.qtype is None and q.hops is None and q.answers == ("German",)


def test_read_questions_missing_file(tmp_path):
    with pytest.raises(DataError, match="question file not found"):
        read_questions(tmp_path / "x.txt", entities=set(), skips=SkipReport())


ROG_RECORDS = [
    {"id": "WebQTest-1", "question": "what language do they speak in jamaica", "answer": ["Jamaican English"],
     "q_entity": ["Jamaica"], "a_entity": ["Jamaican English"],
     "graph": [["Jamaica", "location.country.languages_spoken", "Jamaican English"], ["Jamaica", "x.y", "Kingston"]]},
    {"id": "WebQTest-2", "question": "empty graph", "answer": ["a"], "q_entity": ["b"], "a_entity": ["a"], "graph": []},
    {"id": "WebQTest-3", "question": "topic missing", "answer": ["a"], "q_entity": ["zzz"], "a_entity": ["a"],
     "graph": [["a", "r", "b"]]},
]


def test_rog_jsonl_and_parquet_agree(tmp_path):
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in ROG_RECORDS) + "\n{not json\n")
    folder = tmp_path / "webqsp"
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROG_RECORDS), folder / "data" / "test-00000-of-00001.parquet")
    from_jsonl = load_rog(jsonl)
    from_parquet = load_rog(folder, split="test")
    for data in (from_jsonl, from_parquet):
        assert [q.qid for q in data.questions] == ["WebQTest-1"]
        q = data.questions[0]
        assert q.topic_entities == ("Jamaica",) and q.answers == ("Jamaican English",)
        assert len(q.graph) == 2 and len(data.triples) == 2
        assert data.skips.counts["empty graph"] == 1
        assert data.skips.counts["topic entity not in its graph"] == 1
    assert from_jsonl.skips.counts["invalid JSON (Expecting property name enclosed in double quotes at column 2)"] == 1


def test_rog_strict_and_missing_split(tmp_path):
    jsonl = tmp_path / "test.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in ROG_RECORDS))
    with pytest.raises(DataError, match="test.jsonl:2: empty graph"):
        load_rog(jsonl, strict=True)
    with pytest.raises(DataError, match="no dev split"):
        load_rog(tmp_path, split="dev")


def test_fb15k_questions_group_tails(tmp_path):
    root = tmp_path / "fb"
    root.mkdir()
    (root / "train.txt").write_text("/m/a\t/film/film/genre\t/m/g1\n/m/b\t/people/person/nationality\t/m/c\n")
    (root / "valid.txt").write_text("/m/b\t/film/film/genre\t/m/g1\n")
    (root / "test.txt").write_text("/m/a\t/film/film/genre\t/m/g2\n/m/a\t/film/film/genre\t/m/g3\n")
    (root / "entity2text.txt").write_text("/m/a\tAlpha\n/m/b\tBeta\n/m/g1\tDrama")
    (root / "relation2text.txt").write_text("/film/film/genre\tfilm film genre")
    data = load_fb15k237(root)
    assert len(data.questions) == 1
    q = data.questions[0]
    assert q.text == "what is the film film genre of Alpha?"
    assert set(q.answers) == {"/m/g1", "/m/g2", "/m/g3"}  # every tail of (a, genre) in the KG
    assert q.gold_path == (PathStep("/film/film/genre", True),)
    assert data.entity_names["/m/a"] == "Alpha" and len(data.triples) == 5


def test_demo_is_deterministic_and_answerable():
    a, b = load_demo(seed=3), load_demo(seed=3)
    assert a.triples == b.triples and a.questions == b.questions
    assert 3000 <= len(a.triples) <= 10000
    assert {q.hops for q in a.questions} == {1, 2, 3}
    assert load_demo(seed=4).triples != a.triples
    train_topics = {(q.qtype, q.topic_entities) for q in load_demo(split="train", seed=3).questions}
    assert not train_topics & {(q.qtype, q.topic_entities) for q in a.questions}


def test_registry_limit_and_unknown_dataset():
    data = load_dataset(DatasetSpec(name="demo", limit=5, hops=(1, 3)))
    assert len(data.questions) == 10 and {q.hops for q in data.questions} == {1, 3}
    with pytest.raises(DataError, match="unknown dataset"):
        load_dataset(DatasetSpec(name="nope"))


# ----- undecodable bytes are counted skips with file:line (errors with --strict) -----

BAD_BYTES = b"\xff\xfe\x80"


def test_metaqa_undecodable_question_qtype_and_kb_lines_are_counted_skips(metaqa_root):
    kb = metaqa_root / "kb.txt"
    kb.write_bytes(b"\xef\xbb\xbf" + KB.encode() + b"Kismet|in_language|" + BAD_BYTES + b"\n")  # BOM is not a name
    qa = metaqa_root / "1-hop" / "vanilla" / "qa_test.txt"
    qa.write_bytes(qa.read_bytes() + b"who wrote [Kismet" + BAD_BYTES + b"]\tX\nwho directed [Kismet]\tWilliam Dieterle\n")
    qtype = metaqa_root / "1-hop" / "qa_test_qtype.txt"
    qtype.write_bytes(qtype.read_bytes() + b"movie_to_director\n" + BAD_BYTES + b"\n")
    data = load_metaqa(metaqa_root, hops=(1,))
    assert len(data.questions) == 2 and ("Kismet", "directed_by", "William Dieterle") in data.triples
    assert data.skips.counts["undecodable bytes (not UTF-8)"] == 3
    where = data.skips.examples["undecodable bytes (not UTF-8)"]
    assert where.endswith("kb.txt:6")
    lines = "\n".join(data.skips.lines())
    assert "undecodable" in lines
    kb.write_bytes(b"Kismet|directed_by|William Dieterle\nKismet|in_language|" + BAD_BYTES + b"\n")
    with pytest.raises(DataError) as err:
        load_metaqa(metaqa_root, hops=(1,), strict=True)
    assert "kb.txt:2: undecodable bytes (not UTF-8) at byte 20 (b'\\xff\\xfe\\x80')" in str(err.value)
    assert "\n" not in str(err.value).split("how to fix")[0].strip()  # one line, then the fix


def test_metaqa_line_numbers_ignore_unicode_line_separators(metaqa_root, tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_text("who directed [Kismet] \u2028 \x0c please\tWilliam Dieterle\nwho directed [Nowhere]\tX\n")
    data = load_dataset(DatasetSpec(name="metaqa", data_dir=metaqa_root.parent, questions=mine))
    assert [q.qid for q in data.questions] == ["mine/1"]
    assert data.skips.examples["unknown topic entity (not in the KB)"].startswith(f"{mine}:2")


def test_metaqa_no_usable_questions_is_an_error(metaqa_root, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(DataError, match="no usable questions in .*empty.txt"):
        load_dataset(DatasetSpec(name="metaqa", data_dir=metaqa_root.parent, questions=empty))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(BAD_BYTES * 3 + b"\n")
    with pytest.raises(DataError, match="undecodable"):
        load_dataset(DatasetSpec(name="metaqa", data_dir=metaqa_root.parent, questions=junk))


def test_rog_undecodable_and_non_object_records_are_counted(tmp_path):
    jsonl = tmp_path / "test.jsonl"
    body = "\n".join(json.dumps(r) for r in ROG_RECORDS[:1]).encode()
    weird = [b"[1, 2]", b'{"id": 1, "question": "q", "answer": {"a": 1}, "q_entity": ["Jamaica"], "graph": [["Jamaica", "r", "x"]]}',
             b'{"id": 1, "question": "q", "answer": ["a"], "q_entity": 7, "graph": [["Jamaica", "r", "x"]]}',
             b"[" * 100000]
    jsonl.write_bytes(body + b"\n" + BAD_BYTES + b"\n" + b"\n".join(weird) + b"\n")
    data = load_rog(jsonl)
    assert [q.qid for q in data.questions] == ["WebQTest-1"]
    counts = data.skips.counts
    assert counts["undecodable bytes (not UTF-8)"] == 1
    assert counts["record is a JSON list, not an object"] == 1
    assert counts["answer is not a list of names"] == 1 and counts["q_entity is not a list of names"] == 1
    assert data.skips.total == 5
    with pytest.raises(DataError, match="test.jsonl:2: undecodable"):
        load_rog(jsonl, strict=True)


def test_fb15k_undecodable_triples_and_names_are_counted(tmp_path):
    root = tmp_path / "fb"
    root.mkdir()
    (root / "train.txt").write_bytes(b"/m/a\t/r\t/m/b\n/m/a\t/r\t" + BAD_BYTES + b"\n")
    (root / "valid.txt").write_text("")
    (root / "test.txt").write_text("/m/a\t/r\t/m/c\n")
    (root / "entity2text.txt").write_bytes(b"/m/a\tAlpha\n/m/b\t" + BAD_BYTES + b"\nno tab here\n")
    (root / "relation2text.txt").write_text("/r\tr")
    data = load_fb15k237(root)
    assert len(data.questions) == 1 and data.entity_names == {"/m/a": "Alpha"}
    assert data.skips.counts["undecodable bytes (not UTF-8)"] == 2
    assert data.skips.counts["malformed name line (expected id<TAB>name)"] == 1
    with pytest.raises(DataError, match="train.txt:2: undecodable"):
        load_fb15k237(root, strict=True)

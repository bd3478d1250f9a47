"""`--dataset files`: your own KG from TSV/CSV/JSONL triples and JSONL or plain-text questions."""

import dataclasses
import gzip
import json

import numpy as np
import pytest
from triple_tables import rows

from stem_jax.cli.main import main
from stem_jax.data.files import load_files, parse_gold_path, write_files
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import PathStep
from stem_jax.errors import DataError
from stem_jax.kg.embeddings import kg_texts
from stem_jax.kg.index import build_index, relation_text

TRIPLES = rows("""
    Kismet             | directed_by    | William Dieterle
    Kismet             | starred_actors | Marlene Dietrich
    Kismet             | written_by     | Edward Knoblock
    Dieterle Film      | directed_by    | William Dieterle
    Dieterle Film      | starred_actors | Edward Arnold
    Golden Earrings    | starred_actors | Marlene Dietrich
    Golden Earrings    | directed_by    | Mitchell Leisen
    Hold Back the Dawn | directed_by    | Mitchell Leisen
    Hold Back the Dawn | written_by     | Billy Wilder, Jr.
""")
QUESTIONS = [
    {"id": "q1", "question": "who directed Kismet", "topic_entities": ["Kismet"],
     "answers": ["William Dieterle"], "gold_path": ["directed_by"]},
    {"id": "q2", "question": "which films did [William Dieterle] direct", "answers": ["Kismet", "Dieterle Film"],
     "gold_path": [{"relation": "directed_by", "forward": False}]},
    {"id": "q3", "question": "who directed the films that starred marlene dietrich",
     "answers": ["William Dieterle", "Mitchell Leisen"], "gold_path": ["^starred_actors", "directed_by"]},
]


def write_kg(folder, fmt):
    """The same KG in each supported triples format."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "tsv":
        (folder / "triples.tsv").write_text("head\trelation\ttail\n" + "".join("\t".join(t) + "\n" for t in TRIPLES))
    elif fmt == "csv":
        rows = "".join(",".join(f'"{f}"' if "," in f else f for f in t) + "\n" for t in TRIPLES)
        (folder / "triples.csv").write_text("subject,predicate,object\n" + rows)
    elif fmt == "jsonl":
        lines = [json.dumps({"head": h, "relation": r, "tail": t}) for h, r, t in TRIPLES[:4]]
        lines += [json.dumps(list(t)) for t in TRIPLES[4:]]
        (folder / "triples.jsonl").write_text("\n".join(lines) + "\n")
    elif fmt == "pipe":  # MetaQA's kb.txt layout, delimiter sniffed from the first line
        (folder / "triples.txt").write_text("".join("|".join(t) + "\n" for t in TRIPLES))
    elif fmt == "gz":
        with gzip.open(folder / "triples.tsv.gz", "wt", encoding="utf-8") as handle:
            handle.write("".join("\t".join(t) + "\n" for t in TRIPLES))
    return folder


def write_questions(folder, split="test"):
    (folder / f"{split}.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))


@pytest.mark.parametrize("fmt", ["tsv", "csv", "jsonl", "pipe", "gz"])
def test_every_triples_format_loads_the_same_kg(tmp_path, fmt):
    folder = write_kg(tmp_path / fmt, fmt)
    write_questions(folder)
    data = load_files(folder=folder)
    assert data.triples == TRIPLES and data.skips.total == 0
    assert data.name == f"files-{fmt}"
    assert [q.qid for q in data.questions] == ["q1", "q2", "q3"]
    q1, q2, q3 = data.questions
    assert q1.gold_path == (PathStep("directed_by", True),) and q1.hops == 1
    assert q2.topic_entities == ("William Dieterle",) and q2.text == "which films did William Dieterle direct"
    assert q3.topic_entities == ("Marlene Dietrich",)  # linked case-insensitively from the text
    assert q3.gold_path == (PathStep("starred_actors", False), PathStep("directed_by", True)) and q3.hops == 2


def test_delimiter_override(tmp_path):
    path = tmp_path / "kg.dat"
    path.write_text("".join(";".join(t) + "\n" for t in TRIPLES))
    assert load_files(triples=path, delimiter=";").triples == TRIPLES
    with pytest.raises(DataError, match="no usable triples"):  # no tab, | or comma: every line is a skip
        load_files(triples=path)


def test_skips_are_counted_with_file_and_line_and_strict_stops(tmp_path):
    folder = write_kg(tmp_path / "kg", "tsv")
    with (folder / "triples.tsv").open("ab") as handle:
        handle.write(b"only\ttwo\n")
        handle.write(b"Kismet\tdirected_by\tWilliam Dieterle\n")  # duplicate
        handle.write(b"Bad \xff bytes\tdirected_by\tX\n")
    lines = [json.dumps(QUESTIONS[0]), "{not json", json.dumps({"id": "q1", "question": "who directed Kismet"}),
             json.dumps({"question": "who wrote Kismet", "topic_entities": ["Nobody"]}),
             json.dumps({"question": "who wrote Kismet", "gold_path": ["wrote"]}),
             json.dumps({"question": "nothing to link here"})]
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n")
    data = load_files(folder=folder)
    # a gold path naming an unknown relation costs only the oracle its plan: the question stays, without it
    assert [q.qid for q in data.questions] == ["q1", "test/5"] and data.questions[1].gold_path is None
    assert sum(data.notes.counts.values()) == 1 and "test.jsonl:5" in "\n".join(data.notes.lines("kept"))
    counts = data.skips.counts
    assert counts["duplicate triple"] == 1 and counts["undecodable bytes (not UTF-8)"] == 1
    assert sum(1 for reason in counts if reason.startswith("malformed triple line")) == 1
    assert counts["invalid JSON"] == 1 and counts["duplicate question id"] == 1
    assert counts["unknown topic entity (not an entity id or a unique name)"] == 1
    assert counts["no topic entity found in the question (entity linker)"] == 1
    text = "\n".join(data.skips.lines())
    assert f"{folder / 'triples.tsv'}:11" in text and f"{folder / 'test.jsonl'}:2" in text
    with pytest.raises(DataError) as err:
        load_files(folder=folder, strict=True)
    assert err.value.path == str(folder / "triples.tsv") and err.value.line == 11


def test_entity_and_relation_names(tmp_path):
    folder = tmp_path / "ids"
    folder.mkdir()
    (folder / "triples.tsv").write_text("/m/1\tr1\t/m/2\n/m/3\tr1\t/m/2\n/m/1\tfilm.film.genre\t/m/4\n")
    (folder / "entity_names.tsv").write_text("id\tname\n/m/1\tKismet\n/m/2\tWilliam Dieterle\n/m/3\tKismet\n"
                                             "/m/4\tDrama\n/m/9\tNot In The KG\n")
    (folder / "relation_names.tsv").write_text("r1\tdirected by\n")
    (folder / "test.jsonl").write_text(
        json.dumps({"id": "a", "question": "what did William Dieterle direct", "answers": ["/m/1", "/m/3"],
                    "gold_path": ["^r1"]}) + "\n"
        + json.dumps({"id": "b", "question": "x", "topic_entities": ["Kismet"]}) + "\n"  # ambiguous name
        + json.dumps({"id": "c", "question": "x", "topic_entities": ["Drama"]}) + "\n")
    data = load_files(folder=folder)
    assert data.entity_names["/m/2"] == "William Dieterle" and "/m/9" not in data.entity_names
    assert data.skips.counts["entity name for an id not in the KG"] == 1
    assert ("/m/1", "directed by", "/m/2") in data.triples and ("/m/1", "film.film.genre", "/m/4") in data.triples
    a, c = data.questions
    assert a.topic_entities == ("/m/2",) and a.gold_path == (PathStep("directed by", False),)
    assert c.topic_entities == ("/m/4",)
    assert data.skips.counts["unknown topic entity (not an entity id or a unique name)"] == 1
    texts = kg_texts(build_index(data.triples), data.entity_names)
    assert texts["relations"] == ["directed by", "film genre"]
    (folder / "relation_names.tsv").write_text("r1\tgenre\nfilm.film.genre\tgenre\n")
    with pytest.raises(DataError, match="same name"):
        load_files(folder=folder)


def test_gold_path_forms():
    assert parse_gold_path(["a", "^b", {"relation": "c", "forward": False}, {"relation": "d"}]) == (
        PathStep("a", True), PathStep("b", False), PathStep("c", False), PathStep("d", True))
    assert parse_gold_path([]) is None and parse_gold_path("a") is None and parse_gold_path([{"forward": 1}]) is None


def test_relation_text_metaqa_unchanged_and_freebase_derived():
    metaqa = ["directed_by", "written_by", "starred_actors", "release_year", "in_language", "has_tags", "has_genre",
              "has_imdb_votes", "has_imdb_rating"]
    # Byte-identical to the earlier derivation, so MetaQA's relation embedding cache stays valid.
    assert [relation_text(r) for r in metaqa] == [r.replace("_", " ") for r in metaqa]
    assert relation_text("film.film.directed_by") == relation_text("/film/film/directed_by") == "film directed by"
    assert relation_text("film.film.film_format") == "film format"
    assert relation_text("/people/person/spouse_s./people/marriage/type_of_union") == "marriage type of union"
    assert relation_text("http://dbpedia.org/ontology/director") == relation_text("dbo:director") == "director"
    assert relation_text("directedBy") == "directed by" and relation_text("directed by") == "directed by"
    assert relation_text("r1", {"r1": "directed by"}) == "directed by"


def test_write_files_round_trip(tmp_path):
    folder = write_kg(tmp_path / "src", "tsv")
    write_questions(folder)
    data = load_files(folder=folder)
    write_files(tmp_path / "copy", data.triples, {"test": data.questions})
    again = load_files(folder=tmp_path / "copy")
    assert again.triples == data.triples
    assert [dataclasses.replace(q, source="") for q in again.questions] == [
        dataclasses.replace(q, source="") for q in data.questions]
    with pytest.raises(DataError, match="tab"):
        write_files(tmp_path / "bad", [("a\tb", "r", "c")], {})


def test_registry_needs_a_folder_or_triples():
    with pytest.raises(DataError, match="--data-dir"):
        load_dataset(DatasetSpec(name="files"))


# ---------------------------------------------------------------------------------------------
# End to end through the CLI (in process, so the tracer compiles once for all formats)
# ---------------------------------------------------------------------------------------------


def _cli(command, folder, cache, *extra):
    return main([command, "--dataset", "files", "--data-dir", str(folder), "--cache-dir", str(cache),
                 "--encoder.name=hashing", "--no-progress", *extra])


def test_cli_index_and_eval_every_format(tmp_path):
    cache = tmp_path / "cache"
    for fmt in ("tsv", "csv", "jsonl", "pipe"):
        folder = write_kg(tmp_path / fmt, fmt)
        write_questions(folder)
        assert _cli("index", folder, cache) == 0
        # One KG in four formats is one fingerprint, so one embedding cache (keyed by KG and encoder).
        assert [p.name for p in cache.glob("kg-*")] == [next(cache.glob("kg-*")).name]
        out = tmp_path / f"run-{fmt}"
        assert _cli("eval", folder, cache, "--out", str(out)) == 0
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["overall"]["n"] == 3
        assert metrics["overall"]["mean"]["hit"] == 1.0, fmt
        predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert sorted(p["id"] for p in predictions) == ["q1", "q2", "q3"]
    # A rerun resumes: nothing is recomputed and the metrics are the same.
    before = (out / "predictions.jsonl").read_text()
    assert _cli("eval", folder, cache, "--out", str(out)) == 0
    assert (out / "predictions.jsonl").read_text() == before
    assert json.loads((out / "metrics.json").read_text())["overall"]["mean"]["hit"] == 1.0


def test_cli_plain_text_questions_with_a_trained_planner(tmp_path):
    """Plain-text questions: the linker finds the topics, the pattern planner (trained on train.jsonl) plans."""
    cache = tmp_path / "cache"
    folder = write_kg(tmp_path / "kg", "tsv")
    write_questions(folder, "train")
    (folder / "test.txt").write_text("# my questions\nwho directed Kismet\tWilliam Dieterle\n"
                                     "who directed Golden Earrings\tMitchell Leisen\nwhat is the meaning of it\n")
    data = load_files(folder=folder)
    assert [q.topic_entities for q in data.questions] == [("Kismet",), ("Golden Earrings",)]
    assert data.skips.counts["no topic entity found in the question (entity linker)"] == 1
    assert _cli("train-planner", folder, cache, "--hops", "1,2") == 0
    out = tmp_path / "run"
    assert _cli("eval", folder, cache, "--planner", "pattern", "--out", str(out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["n"] == 2 and metrics["overall"]["mean"]["hit"] == 1.0


# ---------------------------------------------------------------------------------------------
# MetaQA through the generic loader
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_metaqa_exported_gives_the_same_index_and_metrics(shared_data, tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "export_metaqa_generic", Path(__file__).parents[2] / "experiments" / "export_metaqa_generic.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    folder = tmp_path / "metaqa-generic"
    export.export(shared_data, folder, hops=(1,), splits=("test",), limit=20)
    metaqa = load_dataset(DatasetSpec(name="metaqa", data_dir=shared_data, hops=(1,), limit=20))
    files = load_files(folder=folder)
    a, b = build_index(metaqa.triples), build_index(files.triples)
    assert a.entities == b.entities and a.relations == b.relations
    assert np.array_equal(a.triples, b.triples) and np.array_equal(a.csr_triples, b.csr_triples)
    assert [q.qid for q in files.questions] == [q.qid for q in metaqa.questions]
    assert [q.topic_entities for q in files.questions] == [q.topic_entities for q in metaqa.questions]
    cache = tmp_path / "cache"
    common = ["--cache-dir", str(cache), "--encoder.name=hashing", "--no-progress"]
    assert main(["eval", "--dataset", "metaqa", "--data-dir", str(shared_data), "--hops", "1", "--limit", "20",
                 "--out", str(tmp_path / "m"), *common]) == 0
    assert main(["eval", "--dataset", "files", "--data-dir", str(folder), "--out", str(tmp_path / "f"), *common]) == 0
    first = json.loads((tmp_path / "m" / "metrics.json").read_text())
    second = json.loads((tmp_path / "f" / "metrics.json").read_text())
    assert first["overall"] == second["overall"]
    assert first["groups"] == second["groups"]


def test_cli_explicit_file_flags(tmp_path, capsys):
    """--triples / --questions / --delimiter instead of a folder; the flags are refused for other datasets."""
    kg = tmp_path / "my kg.dat"
    kg.write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    questions = tmp_path / "mine.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    assert main(["data-stats", "--dataset", "files", "--triples", str(kg), "--delimiter", "tab",
                 "--questions", str(questions), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "files-my-kg/test: 3 questions" in out and "10 entities, 3 relations, 9 triples" in out
    assert main(["data-stats", "--dataset", "demo", "--triples", str(kg)]) == 2
    assert "--triples is only read with --dataset files" in capsys.readouterr().err

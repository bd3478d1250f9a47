"""A run folder's fingerprint covers the entities' names: a renamed entity is not resumed from stale records."""

import json

import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.engine import Engine
from stem_jax.errors import StemError

CONFIG = StemConfig(encoder=EncoderConfig(name="hashing"))
TRIPLES = [("m1", "directed_by", "m2"), ("m1", "written_by", "m3"), ("m4", "directed_by", "m5")]
NAMES = {"m1": "Film A", "m2": "Director A", "m3": "Writer A", "m4": "Film B", "m5": "Director B"}
QUESTIONS = [{"id": "q1", "question": "who directed Film A", "topic_entities": ["m1"], "answers": ["m2"],
              "gold_path": ["directed_by"]}]


def _kg(folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in TRIPLES))
    (folder / "entity_names.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in names.items()))
    (folder / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return folder


def _engine(folder, cache):
    return Engine.open("files", config=CONFIG, planner="oracle", data_dir=folder, cache_dir=cache)


def test_a_renamed_entity_refuses_the_old_run_folder(tmp_path):
    folder, cache, out = tmp_path / "kg", tmp_path / "cache", tmp_path / "run"
    _engine(_kg(folder, NAMES), cache).evaluate(out, show_progress=False)
    _kg(folder, {**NAMES, "m2": "Director Renamed"})
    renamed = _engine(folder, cache)
    with pytest.raises(StemError, match=r"kg: .*\n(.|\n)*how to fix"):
        renamed.evaluate(out, show_progress=False)
    metrics = renamed.evaluate(tmp_path / "fresh", show_progress=False)  # a fresh folder answers with the new name
    record = json.loads((tmp_path / "fresh" / "predictions.jsonl").read_text().splitlines()[0])
    assert record["prediction"] == ["Director Renamed"] and metrics


def test_the_same_names_resume(tmp_path):
    folder, cache, out = _kg(tmp_path / "kg", NAMES), tmp_path / "cache", tmp_path / "run"
    _engine(folder, cache).evaluate(out, show_progress=False)
    _engine(folder, cache).evaluate(out, show_progress=False)  # same fingerprint: resumes, nothing refused

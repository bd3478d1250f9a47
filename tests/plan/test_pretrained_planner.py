"""The pretrained path planner shipped in the package plans a KG nobody wrote questions for."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from triple_tables import rows

from stem_jax.cli.main import main
from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.encoder import get_encoder
from stem_jax.errors import StemError
from stem_jax.kg.index import build_index
from stem_jax.plan import pretrained
from stem_jax.plan.factory import PlannerSpec, build_planner
from stem_jax.plan.path_ranker import RANKER_FILE, PathRankerConfig, train_path_ranker

pytestmark = pytest.mark.skipif(not pretrained.available(), reason="the pretrained planner is not built")

ORG_CHART = rows("""
    Alan Turing      | reports_to | Grace Hopper
    Ada Lovelace     | reports_to | Grace Hopper
    Grace Hopper     | reports_to | John von Neumann
    Alan Turing      | works_in   | Research
    Ada Lovelace     | works_in   | Engineering
    Grace Hopper     | works_in   | Engineering
    John von Neumann | works_in   | Board
    Research         | located_in | Manchester
    Engineering      | located_in | London
    Board            | located_in | Princeton
""")


def _minilm():
    try:
        from stem_jax.encoder import minilm_model_dir

        minilm_model_dir()
    except Exception as err:  # noqa: BLE001 - any missing piece of the shipped weights skips
        pytest.skip(f"MiniLM weights unavailable: {err}")
    return get_encoder(EncoderConfig())


def _write_kg(folder, triples):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "triples.tsv").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in triples))
    return folder


def _printed_answers(out: str) -> list[str]:
    return re.findall(r"^\s+\d+\. (.+?)  \(", out, re.M)


def _ask(kg, cache, question, capsys):
    """``stem-jax index`` then ``stem-jax ask``: (printed answers, stderr)."""
    common = ["--dataset", "files", "--data-dir", str(kg), "--cache-dir", str(cache), "--no-progress"]
    assert main(["index", *common]) == 0
    capsys.readouterr()
    assert main(["ask", question, *common]) == 0
    captured = capsys.readouterr()
    return _printed_answers(captured.out), captured.err


def test_shipped_model_is_small_versioned_and_checked_by_its_checksum(tmp_path):
    folder = pretrained.model_folder()
    assert folder.name == pretrained.VERSION
    size = sum(f.stat().st_size for f in folder.iterdir())
    assert size < 3_000_000
    meta = json.loads((folder / RANKER_FILE).read_text())
    assert meta["relation_texts"] == []  # nothing of one KG: relations are embedded from the KG in use
    assert set(meta["report"]["families"]) == {"freebase", "metaqa", "wc2014", "demo"}
    broken = tmp_path / "model"
    shutil.copytree(folder, broken)
    arrays = broken / meta["arrays"]
    data = bytearray(arrays.read_bytes())
    data[len(data) // 2] ^= 0xFF
    arrays.write_bytes(bytes(data))
    with pytest.raises(StemError, match="damaged"):
        pretrained.load_pretrained(index=build_index(ORG_CHART), names=None, encoder=None, beam=2, min_prob=0.0,
                                   folder=broken)


def test_ask_right_after_index_on_a_triples_only_org_chart(tmp_path, capsys):
    _minilm()
    kg = _write_kg(tmp_path / "kg", ORG_CHART)
    answers, err = _ask(kg, tmp_path / "cache", "who does Alan Turing report to", capsys)
    assert "pretrained path planner" in err
    assert answers[0] == "Grace Hopper"
    from stem_jax.engine import Engine

    engine = Engine.open("files", data_dir=kg, cache_dir=tmp_path / "cache")
    assert engine.ask("which department does Ada Lovelace work in").answers[0][0] == "Engineering"
    assert engine.planner_info["mode"] == "pretrained"
    assert engine.planner_info["pretrained"]["version"] == pretrained.VERSION


@pytest.mark.slow  # indexes the demo KG's entities with MiniLM: minutes on a loaded CPU
def test_ask_on_the_demo_kg_exported_without_its_questions(tmp_path, capsys):
    _minilm()
    from stem_jax.data.demo_kg import load_demo

    kg = _write_kg(tmp_path / "demo-kg", load_demo(split="test").triples)
    answers, err = _ask(kg, tmp_path / "cache", "who directed The Teamtairhor", capsys)
    assert "pretrained path planner" in err
    assert answers[0] == "Faixta Membou"


def test_opaque_relation_ids_are_reported_once_with_how_to_name_them(capsys):
    encoder = _minilm()
    triples = [("Q1", "P57", "Q2"), ("Q2", "P27", "Q3"), ("Q1", "works_in", "Q4")]
    dataset = Dataset(name="files-opaque", questions=[], triples=triples)
    for _ in range(2):
        _, info = build_planner(PlannerSpec("pattern"), StemConfig(), dataset, build_index(triples),
                                cache_root=__import__("pathlib").Path("/nonexistent"), encoder=encoder)
    err = capsys.readouterr().err
    assert err.count("have no readable name") == 1 and "relation_names.tsv" in err and "P57" in err
    assert info["relations_without_names"] == 2


def test_a_different_encoder_gets_a_clear_error_instead_of_a_wrong_plan(tmp_path):
    triples = ORG_CHART
    dataset = Dataset(name="files-kg", questions=[], triples=triples)
    with pytest.raises(StemError, match="encoder.name=minilm"):
        build_planner(PlannerSpec("pattern"), StemConfig(), dataset, build_index(triples), cache_root=tmp_path,
                      encoder=get_encoder(EncoderConfig(name="hashing")))


def test_warm_start_begins_from_the_given_parameters_and_checks_their_shapes():
    index = build_index(ORG_CHART)
    encoder = get_encoder(EncoderConfig(name="hashing"))
    q = Question("q", "who does Alan Turing report to", ("Alan Turing",), ("Grace Hopper",),
                 gold_path=(PathStep("reports_to"),))
    config = PathRankerConfig(hidden=8, projection=4, epochs=1, learning_rate=1e-9, weight_decay=0.0)
    first = train_path_ranker([q], [], index, encoder_name=encoder.name, embed=encoder.encode, config=config,
                              log=lambda _: None)
    shifted = {k: v + 1.0 for k, v in first.params.items()}
    again = train_path_ranker([q], [], index, encoder_name=encoder.name, embed=encoder.encode, config=config,
                              log=lambda _: None, init=shifted)
    for key, value in shifted.items():
        np.testing.assert_allclose(again.params[key], value, atol=1e-5)
    with pytest.raises(StemError, match="other shapes"):
        train_path_ranker([q], [], index, encoder_name=encoder.name, embed=encoder.encode, log=lambda _: None,
                          config=PathRankerConfig(hidden=16, projection=4, epochs=1), init=shifted)


def test_train_planner_with_ten_answered_questions_adapts_the_pretrained_planner(tmp_path, capsys):
    _minilm()
    kg = _write_kg(tmp_path / "kg", ORG_CHART)
    people = ["Alan Turing", "Ada Lovelace", "Grace Hopper"]
    boss = {h: t for h, r, t in ORG_CHART if r == "reports_to"}
    unit = {h: t for h, r, t in ORG_CHART if r == "works_in"}
    city = {h: t for h, r, t in ORG_CHART if r == "located_in"}
    records = []
    for i, person in enumerate(people * 4):
        if i % 2:
            records.append({"id": f"q{i}", "question": f"who is the manager of {person}", "answers": [boss[person]],
                            "topic_entities": [person]})
        else:
            records.append({"id": f"q{i}", "question": f"in which city does {person} work",
                            "answers": [city[unit[person]]], "topic_entities": [person]})
    (kg / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:10]))
    common = ["--dataset", "files", "--data-dir", str(kg), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main(["train-planner", *common]) == 0
    assert "adapted the pretrained path planner to" in capsys.readouterr().out
    assert main(["ask", "in which city does Ada Lovelace work", *common]) == 0
    assert _printed_answers(capsys.readouterr().out)[0] == "London"
    from stem_jax.engine import Engine

    engine = Engine.open("files", data_dir=kg, cache_dir=tmp_path / "cache")
    engine.ask("who is the manager of Ada Lovelace")
    assert engine.planner_info["mode"] == "few-shot"
    # one held-out question is too few to refit the softmax temperature: the shipped model's is kept
    shipped = json.loads((pretrained.model_folder() / RANKER_FILE).read_text())["temperature"]
    assert engine.planner_info["pretrained"]["temperature"] == shipped
    # a few questions adapt the path ranker; the shipped constraint-branch model comes along unchanged
    assert engine.planner_info["branches"]["threshold"] == json.loads(
        (pretrained.model_folder() / "branches" / "branch-model.json").read_text())["threshold"]

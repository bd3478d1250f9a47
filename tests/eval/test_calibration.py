"""θ calibration: the choice rule and stored-file matching."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from stem_jax.config import EngineConfig
from stem_jax.errors import StemError
from stem_jax.methods.stem.calibration import (
    CALIBRATION_FILE,
    applies,
    choose,
    load_calibration,
    shipped_calibrations,
)


def test_best_f1_wins_and_ties_go_to_the_papers_theta():
    rows = [{"theta": t, "mean_f1": f, "mean_hit": 0.9} for t, f in ((0.4, 0.80), (0.6, 0.85), (0.8, 0.85), (1.0, 0.7))]
    assert choose(rows)["theta"] == 0.6
    rows[2]["mean_f1"] = 0.86
    assert choose(rows)["theta"] == 0.8


def test_stored_calibration_applies_only_to_matching_engine_settings(tmp_path: Path):
    folder = tmp_path / "all-MiniLM-L6-v2-x"
    folder.mkdir()
    embeddings = SimpleNamespace(triples=SimpleNamespace(path=folder / "triples.zarr"))
    assert load_calibration(embeddings) is None
    (folder / CALIBRATION_FILE).write_text(json.dumps({"theta": 0.8, "engine": {"relation_bonus": True,
                                                                                 "strategy": "breadth"}}))
    calibration = load_calibration(embeddings)
    assert applies(calibration, EngineConfig(relation_bonus=True, strategy="breadth"))
    assert not applies(calibration, EngineConfig(relation_bonus=False, strategy="breadth"))
    for damaged in ("{torn", "[0.8]", '{"theta": "high"}', '{"theta": NaN}', '{"theta": 1.5}', '{"engine": {}}'):
        (folder / CALIBRATION_FILE).write_text(damaged)  # an error naming the file, never "not calibrated"
        with pytest.raises(StemError, match="calibration"):
            load_calibration(embeddings)
    (folder / CALIBRATION_FILE).write_bytes(b"\xff\xfe")
    with pytest.raises(StemError, match="how to fix"):
        load_calibration(embeddings)


@pytest.mark.parametrize("key", sorted(shipped_calibrations()))
def test_shipped_calibration_is_found_by_kg_and_encoder_folder(tmp_path: Path, key: tuple[str, str]):
    """A fresh cache of a shipped KG (MetaQA, WorldCup2014) with MiniLM gets the project's measured θ; a
    file written by the calibration command takes precedence; other KGs get none."""
    (kg, encoder), shipped = key, shipped_calibrations()[key]
    folder = tmp_path / kg / encoder
    folder.mkdir(parents=True)
    embeddings = SimpleNamespace(triples=SimpleNamespace(path=folder / "triples.zarr"))
    assert load_calibration(embeddings)["theta"] == shipped["theta"]
    (folder / CALIBRATION_FILE).write_text(json.dumps({"theta": 0.7, "engine": shipped["engine"]}))
    assert load_calibration(embeddings)["theta"] == 0.7
    other = tmp_path / "kg-000000000000" / encoder
    other.mkdir(parents=True)
    assert load_calibration(SimpleNamespace(triples=SimpleNamespace(path=other / "triples.zarr"))) is None


def test_shipped_calibrations_match_their_committed_sweeps():
    """Each shipped entry says what its committed calibration file chose (no number retyped wrongly)."""
    root = Path(__file__).resolve().parents[2]
    for shipped in shipped_calibrations().values():
        recorded = json.loads((root / shipped["source"]).read_text())
        chosen = recorded.get("chosen", recorded)
        assert chosen["theta"] == shipped["theta"], shipped["source"]
        if "conventions" in chosen:
            assert chosen["conventions"] == shipped["conventions"], shipped["source"]


def test_calibrate_command_stores_theta_that_eval_then_uses(tmp_path: Path, capsys):
    """`stem-jax calibrate` (was `python -m stem_jax.eval.calibration`) refuses test, stores the chosen θ, and a
    later eval of the same engine settings traces at it."""
    import json

    from stem_jax.cli.main import main

    common = ["--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path / "cache"), "--no-progress",
              "--planner", "oracle", "--hops", "1"]
    assert main(["calibrate", *common, "--split", "test"]) == 2
    assert "never on test" in capsys.readouterr().err
    assert main(["calibrate", *common, "--limit", "12", "--grid", "0.2", "0.9", "--json", str(tmp_path / "s.json")]) == 0
    stored = list((tmp_path / "cache").rglob("calibration.json"))
    assert len(stored) == 1
    from stem_jax.methods.stem.calibration import CONVENTION_GRID

    calibration = json.loads(stored[0].read_text())
    theta = calibration["theta"]
    # θ x conventions: 2 x (2 directions x 3 used-triple rules x topic exclusion on/off)
    assert theta in (0.2, 0.9) and len(json.loads((tmp_path / "s.json").read_text())["sweep"]) == 2 * len(CONVENTION_GRID)
    assert set(calibration["conventions"]) == {"direction", "used_triples", "exclude_topic"}
    assert main(["eval", *common, "--split", "test", "--limit", "3", "--out", str(tmp_path / "run")]) == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert {r["theta"] for r in records} == {theta}
    stored[0].write_text('{"theta": 0.9')  # torn: eval stops with one line naming the file
    capsys.readouterr()
    assert main(["eval", *common, "--split", "test", "--limit", "3", "--out", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err
    assert str(stored[0]) in err and "damaged calibration" in err and "Traceback" not in err
    effective = json.loads((tmp_path / "run" / "metrics.json").read_text())
    text = json.dumps(effective)
    assert '"calibrated": true' in text and '"conventions_source"' in text


def test_conventions_apply_per_field_and_say_where_they_came_from(tmp_path: Path):
    """Stored conventions apply where the flag is unset; without a calibration every value is
    the config's and the run says so (calibrated: false, theta_source: config)."""
    import json

    from stem_jax.config import EngineConfig, StemConfig, TracerConfig, apply_overrides, as_dict
    from stem_jax.methods.stem.settings import effective_settings

    class Embeddings:
        class triples:  # noqa: N801
            path = tmp_path / "kg-x" / "enc" / "triples"

    missing = effective_settings(StemConfig(), Embeddings).as_dict()
    assert missing["calibrated"] is False and missing["theta_source"] == "config"
    assert set(missing["conventions_source"].values()) == {"config"}
    folder = tmp_path / "kg-x" / "enc"
    folder.mkdir(parents=True)
    (folder / "calibration.json").write_text(json.dumps({
        "theta": 0.7, "engine": {"relation_bonus": True, "strategy": "breadth"},
        "conventions": {"direction": "directed", "used_triples": "step", "exclude_topic": False}}))
    settings = effective_settings(StemConfig(), Embeddings)
    assert (settings.theta, settings.engine.direction, settings.engine.used_triples, settings.engine.exclude_topic) == (
        0.7, "directed", "step", False)
    assert settings.as_dict()["calibrated"] is True
    explicit = StemConfig(engine=EngineConfig(used_triples="branch"), tracer=TracerConfig(theta=0.5))
    mixed = effective_settings(explicit, Embeddings)
    assert (mixed.theta, mixed.theta_source, mixed.engine.used_triples, mixed.engine.direction) == (
        0.5, "config", "branch", "directed")
    assert mixed.as_dict()["conventions_source"] == {"direction": "calibration", "used_triples": "config",
                                                      "exclude_topic": "calibration"}
    paper = effective_settings(StemConfig(engine=EngineConfig(preset="paper")), Embeddings)
    assert (paper.engine.direction, paper.engine.used_triples, paper.calibrated) == ("undirected", "run", False)
    # a flag given with the default's value is still given: it wins over the calibration
    flags = apply_overrides(StemConfig(), {"tracer.theta": "0.6", "engine.exclude_topic": "true"})
    assert flags == StemConfig() and flags.given == {"tracer.theta", "engine.exclude_topic"}
    chosen = effective_settings(flags, Embeddings)
    assert (chosen.theta, chosen.theta_source, chosen.engine.exclude_topic, chosen.engine.direction) == (
        0.6, "config", True, "directed")
    assert "given" not in as_dict(flags)


def test_calibration_weighs_hop_groups_by_their_question_counts():
    from stem_jax.methods.stem.calibration import _with_means

    row = _with_means({"hops": {"1-hop": {"f1": 1.0, "hit": 1.0, "n": 150}, "2-hop": {"f1": 0.0, "hit": 0.0, "n": 3},
                                "3-hop": {"f1": 0.5, "hit": 0.5, "n": 0}}})
    assert row["mean_f1"] == pytest.approx(150 / 153) and row["mean_hit"] == pytest.approx(150 / 153)


def test_questions_of_unknown_hop_count_are_a_group_named_apart_from_all():
    from stem_jax.eval.scoring import UNKNOWN_HOPS, score_records

    records = [{"id": str(i), "hops": hops, "prediction": ["a"], "ground_truth": ["a"], "overflow": 0}
               for i, hops in enumerate((1, None, None))]
    groups = score_records(records)["groups"]
    assert set(groups) == {"1-hop", UNKNOWN_HOPS} and UNKNOWN_HOPS != "all"
    assert groups[UNKNOWN_HOPS]["n"] == 2

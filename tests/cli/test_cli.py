import json

import pytest

from stem_jax.cli.main import build_parser, main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("demo", "index", "data-stats", "config"):
        assert command in out


def test_every_config_field_is_a_flag():
    parser = build_parser()
    args = parser.parse_args(["config", "--tracer.theta=0.7", "--guidance.k_prime=2"])
    assert getattr(args, "cfg:tracer.theta") == "0.7"


def test_config_command_prints_overrides(capsys):
    assert main(["config", "--tracer.lam=1.2"]) == 0
    out = capsys.readouterr().out
    assert "| --tracer.lam | 1.2 |" in out and "| --tracer.tau | 0.5 |" in out


def test_bad_override_is_a_clear_error(capsys):
    assert main(["config", "--gnn.layers=two"]) == 2
    assert "expected a value of type int" in capsys.readouterr().err


def test_missing_data_dir_is_a_clear_error(capsys, monkeypatch):
    monkeypatch.delenv("STEM_DATA_DIR", raising=False)
    assert main(["data-stats", "--dataset", "metaqa"]) == 2
    err = capsys.readouterr().err
    assert "STEM_DATA_DIR" in err and "Traceback" not in err


def test_demo_end_to_end_with_hashing_encoder(tmp_path, capsys):
    # the default engine first, the paper-literal engine (--engine.preset=paper) second
    argv = ["demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
            "--no-progress", "--limit", "20", "--engine.batch_precision=64", "--engine.batch_breadth=16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Gold-path upper bound" in out and "| 3-hop | 20 |" in out
    report = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert report["gold_path_upper_bound"]["groups"]["2-hop"]["mean"]["exact_set"] == 1.0
    assert report["anchoring"]["questions"] == 60
    assert list(report["results"]) == ["default", "paper-literal"]
    default = report["results"]["default"]["groups"]
    assert default["1-hop"]["n"] == 20 and default["1-hop"]["mean"]["hit"] > 0.9  # exact relations make 1-hop easy
    for hops in ("1-hop", "2-hop", "3-hop"):  # the default configuration is never worse than the paper-literal one
        paper = report["results"]["paper-literal"]["groups"][hops]["mean"]
        assert default[hops]["mean"]["hit_at_1"] >= paper["hit_at_1"]
    # the second run reads every embedding from the cache
    assert main(argv) == 0
    assert "| entities |" in capsys.readouterr().out.replace("cached", "| entities |")


def test_data_stats_writes_json(tmp_path, capsys):
    assert main(["data-stats", "--limit", "10", "--no-progress", "--out", str(tmp_path)]) == 0
    payload = json.loads((tmp_path / "data-stats-demo-test.json").read_text())
    assert payload["subgraphs"]["1-hop"]["answers_all_inside"] == 1.0

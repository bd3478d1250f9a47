"""experiments/kg_tables.py's table helpers: per-hop groups plus "all", percent cells, calibration notes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("kg_tables", ROOT / "experiments" / "kg_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_groups_add_all_only_for_several_hops_and_cells_are_percent() -> None:
    kg = _module()
    one = {"groups": {"1-hop": {"n": 3, "mean": {"hit": 1.0}}}, "overall": {"n": 3, "mean": {"hit": 1.0}}}
    assert [g for g, _ in kg._groups(one)] == ["1-hop"]
    two = {"groups": {"2-hop": {"n": 1, "mean": {}}, "1-hop": {"n": 2, "mean": {}}},
           "overall": {"n": 3, "mean": {}}}
    assert [(g, s["n"]) for g, s in kg._groups(two)] == [("1-hop", 2), ("2-hop", 1), ("all", 3)]
    assert kg._pct(0.98765) == "98.77" and kg._pct(1.0) == "100.00" and kg._pct(None) == ""


def test_calibration_notes_say_where_theta_came_from() -> None:
    kg = _module()
    conv = {"direction": "undirected", "used_triples": "run", "exclude_topic": True}
    notes = kg.calibration_notes({
        "A": {"calibration": {"theta": 0.8, "split": "dev", "questions": 450, "conventions": conv,
                              "source": "experiments/results/x.json", "shipped": True}},
        "B": {"calibration": {"theta": 0.9, "split": "dev", "questions": 10, "conventions": conv, "shipped": False}},
        "C": {}})
    assert "- A: θ 0.8 and conventions (undirected, run, True) chosen on 450 dev questions, shipped" in notes
    assert "- B: θ 0.9" in notes and "`stem-jax calibrate`" in notes
    assert "- C: no stored calibration applied" in notes


def test_every_dataset_has_subsets_and_prepare_name() -> None:
    kg = _module()
    assert set(kg.SUBSETS) == set(kg.PREPARE_NAME) == {"metaqa", "wc2014", "demo"}
    assert set(kg.DEFAULT_VARIANTS.get("metaqa", ())) <= set(kg.VARIANTS)

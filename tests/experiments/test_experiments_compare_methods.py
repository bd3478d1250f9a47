"""experiments/compare_methods.py's question sets: growing stratified subsets, so an interrupted full-split row
reports the largest stratified subset it finished, and the 300-per-hop run is the first stage of the full one."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from stem_jax.data.types import Question

ROOT = Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("compare_methods", ROOT / "experiments" / "compare_methods.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _questions() -> list[Question]:
    out = []
    for hops, n in ((1, 5), (2, 7), (3, 4)):
        out += [Question(f"{hops}-hop/test/{i}", "q", ("t",), ("a",), hops=hops) for i in range(n)]
    return out


def _lowest(questions: list[Question], hops: int, n: int) -> set[str]:
    group = [q for q in questions if q.hops == hops]
    return {q.qid for q in sorted(group, key=lambda q: hashlib.sha256(q.qid.encode()).hexdigest())[:n]}


def test_stratified_subsets_grow_and_keep_the_lowest_hashes_per_hop() -> None:
    cm = _module()
    questions = _questions()
    two = cm.stratified(questions, 2, "metaqa")
    assert {q.qid for q in two} == _lowest(questions, 1, 2) | _lowest(questions, 2, 2) | _lowest(questions, 3, 2)
    assert [q.qid for q in two] == [q.qid for q in questions if q.qid in {t.qid for t in two}]  # split order
    assert {q.qid for q in two} <= {q.qid for q in cm.stratified(questions, 3, "metaqa")}
    assert cm.stratified(questions, 0, "metaqa") == questions


def test_finished_per_group_is_the_largest_complete_stratified_subset() -> None:
    cm = _module()
    questions = _questions()
    assert cm.finished_per_group(questions, set(), "metaqa") == 0
    done = {q.qid for q in cm.stratified(questions, 3, "metaqa")}
    assert cm.finished_per_group(questions, done, "metaqa") == 3
    done |= _lowest(questions, 2, 5)  # one group further on: the smallest group decides
    assert cm.finished_per_group(questions, done, "metaqa") == 3
    done.discard(sorted(_lowest(questions, 1, 3))[0])  # a hole in the prefix of one group
    assert cm.finished_per_group(questions, done, "metaqa") < 3
    assert cm.finished_per_group(questions, {q.qid for q in questions}, "metaqa") == cm.ALL


def test_wc2014_groups_are_its_question_sets() -> None:
    cm = _module()
    questions = [Question("WC-P1/1", "q", ("t",), ("a",), hops=1, qtype="WC-P1"),
                 Question("WC-C/1", "q", ("t",), ("a",), hops=1, qtype="WC-C")]
    assert [cm.group_of("wc2014", q) for q in questions] == ["WC-P1", "WC-C"]
    assert [cm.group_of("metaqa", q) for q in questions] == ["1-hop", "1-hop"]


def test_results_name_no_machine_paths(monkeypatch, tmp_path) -> None:
    cm = _module()
    monkeypatch.setenv("STEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    payload = {"a": f"{tmp_path}/cache/metaqa/calibration.json", "b": f"{tmp_path}/runs/x"}
    assert cm.relative_paths(payload) == {"a": "$STEM_CACHE_DIR/metaqa/calibration.json", "b": "runs/x"}

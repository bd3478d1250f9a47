"""The library API: `stem_jax.Engine` opened once, `retrieve`/`ask`/`evaluate`, `stem-jax ask` and `bench stages`."""

import json
import re
from pathlib import Path

import pytest

from stem_jax import Engine, StemConfig
from stem_jax.cli.main import main
from stem_jax.config import apply_overrides
from stem_jax.errors import StemError
from stem_jax.eval.scoring import read_finished

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    config = apply_overrides(StemConfig(), FAST)
    return Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path_factory.mktemp("cache"), limit=6)


def test_retrieve_equals_evaluate(engine, tmp_path):
    """One engine answers a batch and scores a split; both give the same ranked answers per question."""
    questions = engine.dataset.questions
    answers = engine.retrieve(questions)
    summary = engine.evaluate(tmp_path / "run", show_progress=False)
    records = read_finished(tmp_path / "run" / "predictions.jsonl")
    assert summary["overall"]["n"] == len(questions) == 18
    for question, answer in zip(questions, answers, strict=True):
        assert [name for name, _ in answer.answers] == records[question.qid]["prediction"]
        assert set(answer.stage_ms) >= {"anchor", "trace", "answer", "total"}
    assert summary["overall"]["mean"]["hit"] > 0.5  # the oracle planner on the demo KG finds most answers


def test_api_and_cli_leave_the_same_run_folder_files(engine, tmp_path):
    """Engine.evaluate writes what `stem-jax eval` writes: predictions, fingerprint, metrics.json and .md."""
    engine.evaluate(tmp_path / "api", show_progress=False)
    cache = engine.cache_root
    rc = main(["eval", "--dataset", "demo", "--planner", "oracle", "--limit", "6", "--cache-dir", str(cache),
               "--out", str(tmp_path / "cli"), "--no-progress", *(f"--{k}={v}" for k, v in FAST.items())])
    assert rc == 0
    files = {side: sorted(p.name for p in (tmp_path / side).iterdir() if not p.name.startswith("."))
             for side in ("api", "cli")}
    assert files["api"] == files["cli"]
    assert {"predictions.jsonl", "metrics.json", "metrics.md", "fingerprint.json"} <= set(files["api"])
    api, cli = (json.loads((tmp_path / side / "metrics.json").read_text()) for side in ("api", "cli"))
    about = {"meta", "dataset", "split", "method", "planner", "planner_info", "config", "dataset_skips",
             "wall_seconds", "overall", "groups", "effective"}
    assert about <= api.keys() & cli.keys()
    assert api["overall"] == cli["overall"] and api["config"] == cli["config"]
    api, cli = (read_finished(tmp_path / side / "predictions.jsonl") for side in ("api", "cli"))
    assert {q: r["prediction"] for q, r in api.items()} == {q: r["prediction"] for q, r in cli.items()}


def test_question_parsing_brackets_and_linker(engine):
    topic = engine.dataset.questions[0].topic_entities[0]
    question, link = engine.question(f"which actors appear in [{topic}]")
    assert question.topic_entities == (topic,) and link["match"] == ["exact"]
    assert "[" not in question.text
    question, link = engine.question(f"which actors appear in [{topic.lower()}]")
    assert question.topic_entities == (topic,) and link["match"] == ["case-insensitive"]
    question, link = engine.question(f"which actors appear in {topic}")  # no brackets: the entity linker
    assert question.topic_entities == (topic,) and link["entities"] == [topic]
    with pytest.raises(StemError, match="brackets"):
        engine.question("zzzz qqqq xxxx")
    with pytest.raises(StemError, match="not in the KG"):
        engine.question("which actors appear in [No Such Film Anywhere]")


def test_oracle_cannot_plan_a_free_question_clearly(engine):
    topic = engine.dataset.questions[0].topic_entities[0]
    answer = engine.ask(f"who are the actors of [{topic}]")  # not a question of the split: no gold path
    assert answer.answers == [] and answer.record["runs"] == 0 and "--planner pattern" in answer.reason


@pytest.mark.slow  # ~50 s: train-planner, ask and bench stages through the CLI
def test_ask_and_bench_stages_cli(tmp_path, capsys):
    common = ["--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path / "cache"), "--no-progress",
              "--engine.batch_precision=32", "--engine.batch_breadth=8"]
    planner = tmp_path / "planner"
    assert main(["train-planner", *common, "--limit", "80", "--epochs", "5", "--no-answer-scorer",
                 "--out", str(planner)]) == 0
    capsys.readouterr()
    assert main(["ask", "what is the birthplace of [nothing here]", *common, "--planner-path", str(planner)]) == 2
    assert "not in the KG" in capsys.readouterr().err
    from stem_jax.data.registry import DatasetSpec, load_dataset

    question = next(q for q in load_dataset(DatasetSpec("demo")).questions if q.hops == 1)
    text = question.text.replace(question.topic_entities[0], f"[{question.topic_entities[0]}]")
    assert main(["ask", text, *common, "--planner-path", str(planner), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert f"topic: {question.topic_entities[0]}" in out and "ms: " in out and re.search(r"total \d", out)

    bench_out = tmp_path / "bench"
    assert main(["bench", "stages", *common, "--hops", "1,2", "--limit", "10", "--planner-path", str(planner),
                 "--batch-sizes", "1,4", "--repeats", "2", "--warmup", "0", "--out", str(bench_out)]) == 0
    report = json.loads(next(bench_out.glob("bench-stages-*.json")).read_text())
    assert set(report["batch_sizes"]) == {"1", "4"}
    row = report["batch_sizes"]["4"]
    assert row["warm_calls"] == 2 and row["questions_per_second"] > 0
    assert row["warm_ms"]["total"]["p50"] >= row["warm_ms"]["tracing"]["p50"] > 0
    assert 0 <= row["encoder_timed"]["share_of_total"] <= 1  # the hashing encoder keeps no token counts
    assert "Text encoder" in next(bench_out.glob("bench-stages-*.md")).read_text()
    assert next(bench_out.glob("bench-stages-*.png")).stat().st_size > 1000


def test_cli_modules_do_not_reach_into_each_other():
    """The CLI builds the pipeline through the library (stem_jax.engine), not through other CLI modules."""
    cli = Path(__file__).parents[2] / "stem_jax" / "cli"
    for path in cli.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"from stem_jax\.cli\.\w+ import .*\b_\w+", text), path

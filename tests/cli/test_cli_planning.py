"""`stem-jax train-planner`, `stem-jax plan` and `stem-jax eval --planner pattern / --plans` on the demo KG."""

import json

import pytest

from stem_jax.cli.main import main
from stem_jax.plan.store import PlanStore


# slow: ~45 s: train-planner (with its answer scorer), plan and eval through the CLI;
# tests/plan/test_eval_from_plan_store.py stays quick
@pytest.mark.slow
def test_train_plan_eval_round_trip(tmp_path, capsys):
    common = ["--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path / "cache"), "--no-progress",
              "--engine.batch_precision=32", "--engine.batch_breadth=8"]  # small batches compile faster
    planner = tmp_path / "planner"
    assert main(["train-planner", *common, "--limit", "80", "--epochs", "5", "--out", str(planner)]) == 0
    out = capsys.readouterr().out
    assert "template top-1" in out and (planner / "planner.json").is_file()

    store = tmp_path / "plans"
    plan_args = ["plan", *common, "--limit", "8", "--planner", "pattern", "--planner-path", str(planner),
                 "--out", str(store)]
    assert main(plan_args) == 0
    assert "24 questions" in capsys.readouterr().out
    opened = PlanStore.open(store)
    assert opened.n == 24 and opened.beam == 4
    assert main(plan_args) == 0  # rerun: nothing left to plan
    capsys.readouterr()

    assert main(["eval", *common, "--limit", "8", "--plans", str(store), "--out", str(tmp_path / "run")]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["overall"]["n"] == 24 and metrics["planner_info"]["plans"] == str(store)

    assert main(["eval", *common, "--limit", "4", "--planner", "pattern", "--planner-path", str(planner),
                 "--planner.beam=1", "--out", str(tmp_path / "run1")]) == 0
    metrics = json.loads((tmp_path / "run1" / "metrics.json").read_text())
    assert metrics["planner_info"]["beam"] == 1 and metrics["planner_info"]["mean_beams"] == 1.0
    assert metrics["planner_info"]["plan_questions_per_second"] > 0


def test_missing_planner_and_vllm_model_are_clear_errors(tmp_path, capsys):
    common = ["--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path), "--no-progress",
              "--limit", "2"]
    assert main(["plan", *common, "--planner", "pattern", "--planner-path", str(tmp_path / "none")]) == 2
    assert "train-planner" in capsys.readouterr().err
    assert main(["plan", *common, "--planner", "vllm"]) == 2
    assert "--llm-model" in capsys.readouterr().err


def test_vllm_planner_against_an_unreachable_server_is_a_clear_error(tmp_path, capsys):
    """Builds the whole vLLM planner (few-shot pool, relation grounding) and fails at the first request."""
    argv = ["plan", "--dataset", "demo", "--encoder.name=hashing", "--cache-dir", str(tmp_path), "--no-progress",
            "--limit", "2", "--planner", "vllm", "--vllm-model", "m", "--vllm-url", "http://127.0.0.1:9/v1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "request to the LLM server failed" in err and "vllm serve" in err and "llama_cpp.server" in err

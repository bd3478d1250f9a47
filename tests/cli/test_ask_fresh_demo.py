"""`ask` answers on a fresh demo cache in one command,
the API defaults to the same planner, the oracle says why it cannot plan, chains end at the answers,
unquoted questions are caught, and the demo's tables write percentages with one decimal."""

import json
import re

import pytest

from stem_jax import Engine, StemConfig
from stem_jax.cli.main import main
from stem_jax.config import apply_overrides
from stem_jax.data.types import Question
from stem_jax.errors import StemError

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}
FLAGS = [f"--{k}={v}" for k, v in FAST.items()]
QUESTION = "which actors appear in The Rimloumjaith"  # the README's example, a demo test question


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def first_use(cache):
    """Engine.open("demo") with the API's defaults on a fresh cache: trains the pattern planner once."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), cache_dir=cache, limit=4)
        answer = engine.ask(QUESTION)
    return engine, answer, err.getvalue()


def _gold(engine: Engine, text: str) -> set[str]:
    (question,) = [q for q in engine.dataset.questions if q.text == text]
    return {engine.display(a) for a in question.answers}


def test_api_defaults_to_the_pattern_planner_and_trains_it_on_first_use(first_use, cache):
    engine, answer, err = first_use
    assert engine.planner_spec.name == "pattern"
    assert {name for name, _ in answer.answers} == _gold(engine, QUESTION)
    assert re.search(r"trained the demo pattern planner in \d+\.\ds; saved ", err), err
    assert (cache / "demo" / "planners" / "pattern-hashing" / "planner.json").is_file()
    report = json.loads((cache / "demo" / "planners" / "pattern-hashing" / "planner.json").read_text())["report"]
    assert report["split"] == "train" and report["trained_on_first_use"]
    assert [p.name for p in (cache / "demo" / "planners").iterdir()] == ["pattern-hashing"]


def test_second_open_reuses_the_trained_planner(first_use, cache, capsys):
    engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), cache_dir=cache, limit=4)
    assert engine.ask(QUESTION).best in _gold(engine, QUESTION)
    assert "training" not in capsys.readouterr().err


def test_chains_end_at_the_answers_best_ranked_first(first_use):
    engine, answer, _ = first_use
    names = [name for name, _ in answer.answers]
    assert answer.chains, "a 1-hop answer has its direct triple as a chain"
    ranks = []
    for chain in answer.chains:
        ends = [i for i, name in enumerate(names) if chain.endswith(" " + name)]
        assert ends, f"chain {chain!r} ends at no answer"
        ranks.append(ends[0])
        assert len(re.findall(r" -\S+-> | <-\S+- ", chain)) <= 3
    assert ranks == sorted(ranks)
    assert answer.chains[0] == f"The Rimloumjaith -starred_actors-> {names[0]}"


def test_cli_ask_answers_in_one_command_and_prints_supporting_chains(first_use, cache, capsys):
    assert main(["ask", QUESTION, "--dataset", "demo", "--cache-dir", str(cache), "--no-progress", *FLAGS]) == 0
    out = capsys.readouterr().out
    printed = re.findall(r"^\s+\d+\. (.+?)  \(", out, re.M)
    assert set(printed) == _gold(first_use[0], QUESTION)
    chains = out.split("evidence chains:\n")[1].split("\nms:")[0].splitlines()
    assert chains and all(any(c.endswith(" " + name) for name in printed) for c in chains)


def test_other_datasets_keep_the_train_planner_error(tmp_path):
    kg = tmp_path / "kg"
    kg.mkdir()
    (kg / "triples.tsv").write_text("Kismet\tdirected_by\tWilliam Dieterle\n")
    (kg / "test.jsonl").write_text(json.dumps({"id": "q1", "question": "who directed Kismet", "topic_entities":
                                               ["Kismet"], "answers": ["William Dieterle"]}) + "\n")
    engine = Engine.open("files", config=apply_overrides(StemConfig(), FAST), data_dir=kg, cache_dir=tmp_path / "c")
    with pytest.raises(StemError, match="train-planner"):
        engine.ask("who directed [Kismet]")
    assert not (tmp_path / "c" / engine.dataset.name / "planners").exists()


@pytest.fixture(scope="module")
def oracle(cache):
    return Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=cache, limit=4)


def test_oracle_answers_a_split_question_typed_as_text(oracle):
    answer = oracle.ask("  Which actors appear in the Rimloumjaith? ")
    assert {name for name, _ in answer.answers} == _gold(oracle, QUESTION)
    assert answer.question.qid == "demo/test/1-hop/0" and answer.reason is None  # the split's, with its gold path


def test_oracle_says_why_it_cannot_plan_free_text(oracle):
    answer = oracle.ask("who are the actors of The Rimloumjaith")
    assert answer.answers == [] and answer.record["runs"] == 0
    assert re.search(r"gold relation path, and it is not a question of demo/test \(12 questions.*--planner pattern",
                     answer.reason), answer.reason
    assert oracle.ask(QUESTION).reason is None


def test_oracle_gives_the_reason_for_a_split_question_without_gold_path(oracle):
    split = oracle.dataset.questions[0]
    question = Question(split.qid, "who starred in The Rimloumjaith", split.topic_entities, ())
    answer = oracle.ask(question)
    assert answer.answers == [] and "it has none (no gold path" in answer.reason


def test_cli_oracle_free_text_says_why_and_fails(cache, capsys):
    argv = ["ask", "who are the actors of The Rimloumjaith", "--planner", "oracle", "--dataset", "demo",
            "--limit", "4", "--cache-dir", str(cache), "--no-progress", *FLAGS]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "no answer: the oracle planner plans from the dataset's gold relation path" in out
    assert "--planner pattern" in out and "no answer found" not in out


@pytest.mark.parametrize("argv", [
    ["ask", "which", "actors", "appear", "in", "The", "Rimloumjaith", "--dataset", "demo"],
    ["ask", "which actors appear in", "Rimloumjaith", "--dataset", "demo"],
])
def test_unquoted_question_suggests_quotes(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "quote the question" in err and "no KG entity" not in err


def test_ask_top_is_validated(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["ask", QUESTION, "--top", "-1"])
    assert exit_.value.code == 2
    assert "--top" in capsys.readouterr().err


def test_demo_tables_write_percentages_with_one_decimal():
    from stem_jax.cli.commands import _subgraph_table, _upper_bound_table
    from stem_jax.cli.report import summary_table

    groups = {"1-hop": {"n": 3, "mean": {"hit": 1.0, "f1": 0.98779, "exact_set": 2 / 3}}}
    bound = _upper_bound_table({"groups": groups})
    assert "| 1-hop | 3 | 100.0 | 98.8 | 66.7 |" in bound and "any gold reached %" in bound
    summary = {"groups": groups, "overall": {"n": 3, "mean": {"hit": 1.0, "f1": 0.98779}}}
    table = summary_table(summary, decimals=1)
    assert "| 1-hop | 3 | 100.0 | - | 98.8 |" in table and "98.780" not in table
    sizes = {"1-hop": {"questions": 3, "nodes": {"p50": 85.5, "p90": 12.0, "max": 21},
                       "triples": {"mean": 8.2667, "p90": 11.0, "max": 20}, "answers_all_inside": 1.0,
                       "answers_any_inside": 0.5}}
    assert "| 1-hop | 3 | 85.5 | 12 | 21 | 8.3 | 11 | 20 | 100.0 | 50.0 |" in _subgraph_table(sizes)


def test_an_interrupted_train_planner_folder_is_trained_again(tmp_path, capsys):
    """A planner folder holding only train-planner's .lock (killed mid-training) is not a planner."""
    folder = tmp_path / "demo" / "planners" / "pattern-hashing"
    folder.mkdir(parents=True)
    (folder / ".lock").write_text("12345\n")
    engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), cache_dir=tmp_path, limit=4)
    assert engine.ask(QUESTION).best in _gold(engine, QUESTION)
    assert "trained the demo pattern planner" in capsys.readouterr().err
    assert (folder / "planner.json").is_file()

"""CI runs exactly the test command README.md gives a newcomer, so a green CI means that command passes."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _test_command(text: str) -> str:
    (line,) = [line.strip() for line in text.splitlines() if line.strip().startswith(".venv/bin/ruff check . &&")]
    return line


def test_ci_runs_the_readme_test_command() -> None:
    readme = _test_command((REPO / "README.md").read_text(encoding="utf-8"))
    ci = _test_command((REPO / ".ci" / "run").read_text(encoding="utf-8"))
    assert ci == readme
    assert "-m pytest" in readme and "not slow" not in readme  # CI runs every test, the slow ones included

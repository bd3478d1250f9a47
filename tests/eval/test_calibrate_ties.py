"""`calibrate` says when settings tie or dev is too small, and breaks ties toward the data's own gold-path bound."""

from types import SimpleNamespace

from stem_jax.cli.calibrate import SHOWN_ROWS, _break_ties
from stem_jax.data.types import PathStep, Question
from stem_jax.kg.index import build_index
from stem_jax.methods.stem.calibration import choose

# a relation whose entities are heads and tails: an undirected walk of "sequel_of" from F2 also reaches F3
TRIPLES = [("F2", "sequel_of", "F1"), ("F3", "sequel_of", "F2"), ("F1", "directed_by", "D1")]
QUESTION = Question("q1", "what is F2 a sequel of", ("F2",), ("F1",), hops=1,
                    gold_path=(PathStep("sequel_of", True),))


def _row(theta, direction, f1=1.0):
    return {"theta": theta, "mean_f1": f1, "mean_hit": 1.0, "hops": {"1-hop": {"f1": f1}},
            "conventions": {"direction": direction, "used_triples": "run", "exclude_topic": True}}


def test_a_tie_goes_to_the_conventions_the_gold_paths_prefer():
    engine = SimpleNamespace(index=build_index(TRIPLES), dataset=SimpleNamespace(entity_names=None))
    rows = [_row(t, d) for t in (0.5, 0.6) for d in ("undirected", "directed")] + [_row(0.7, "directed", 0.5)]
    assert choose(rows)["conventions"]["direction"] == "undirected"  # dev alone: the engine's default wins
    prefer, report = _break_ties(rows, engine, [QUESTION])
    best = choose(rows, prefer=prefer)
    assert best["conventions"]["direction"] == "directed" and report["broken_by"] == "gold-path bound"
    text = "\n".join(report["lines"])
    assert "4 of 5 settings tie at mean F1 100.00" in text and "only 1 dev questions" in text
    assert "direction=directed, used_triples=run, exclude_topic=True: 100.0" in text


def test_no_tie_says_nothing_and_prefers_nothing():
    engine = SimpleNamespace(index=build_index(TRIPLES), dataset=SimpleNamespace(entity_names=None))
    rows = [_row(0.6, "undirected", 0.9), _row(0.6, "directed", 1.0)]
    prefer, report = _break_ties(rows, engine, [QUESTION] * 30)
    assert prefer is None and report["lines"] == [] and choose(rows)["conventions"]["direction"] == "directed"
    assert SHOWN_ROWS <= 10

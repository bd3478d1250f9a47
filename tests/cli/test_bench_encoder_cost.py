"""`bench stages` prices the text encoder: its share of the warm time, ms per token, and when it dominates."""

from __future__ import annotations

import pytest

from stem_jax.bench.stages import encoder_cost, encoder_table, encoder_verdicts


def _warm(question: float, schema: float, rest: float) -> dict[str, float]:
    return {"question_encoding": question, "schema_encoding": schema, "tracing": rest,
            "total": question + schema + rest}


def test_share_and_per_token_cost_sum_over_warm_calls():
    warm = [_warm(0.002, 0.006, 0.002), _warm(0.001, 0.007, 0.002)]
    cost = encoder_cost(warm, {"tokens_encoded": 64, "padded_tokens": 128, "forward_calls": 4})
    assert cost["seconds"] == pytest.approx(0.016)
    assert cost["share_of_total"] == pytest.approx(0.8)
    assert cost["ms_per_token"] == pytest.approx(16 / 64)
    assert cost["ms_per_padded_token"] == pytest.approx(16 / 128)
    assert cost["dominates"]


def test_an_encoder_that_encoded_nothing_has_no_per_token_cost_and_does_not_dominate():
    cost = encoder_cost([_warm(0.0, 0.0, 0.01)], {"tokens_encoded": 0, "padded_tokens": 0, "forward_calls": 0})
    assert cost["ms_per_token"] is None and cost["share_of_total"] == 0 and not cost["dominates"]
    assert encoder_cost([], {"tokens_encoded": 0, "padded_tokens": 0, "forward_calls": 0})["share_of_total"] == 0


def test_verdicts_name_only_the_batch_sizes_the_encoder_dominates():
    work = {"tokens_encoded": 10, "padded_tokens": 16, "forward_calls": 1}
    results = {"batch_sizes": {
        "1": {"encoder_timed": encoder_cost([_warm(0.004, 0.004, 0.002)], work)},
        "64": {"encoder_timed": encoder_cost([_warm(0.001, 0.001, 0.008)], work)},
        "8": {},  # a result file from before the encoder was priced
    }}
    verdicts = encoder_verdicts(results)
    assert len(verdicts) == 1 and verdicts[0].startswith("batch 1:") and "80%" in verdicts[0]
    headers, rows = encoder_table(results)
    assert [r[0] for r in rows] == ["1", "64"] and rows[0][-1] == "yes" and rows[1][-1] == "no"
    assert rows[1][headers.index("share of warm time")] == "20%"

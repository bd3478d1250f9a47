"""`bench stages` times the overlapped path too: each batch planned and encoded ahead of the previous one's tracing."""

from stem_jax import Engine, StemConfig
from stem_jax.bench.stages import bench_stages, stage_table
from stem_jax.config import apply_overrides

FAST = {"encoder.name": "hashing", "engine.batch_precision": "32", "engine.batch_breadth": "8"}


def test_bench_stages_reports_an_overlapped_row(tmp_path):
    engine = Engine.open("demo", config=apply_overrides(StemConfig(), FAST), planner="oracle", cache_dir=tmp_path,
                         limit=12)
    results = bench_stages(engine, engine.dataset.questions, batch_sizes=(3,), repeats=2, warmup=0, precompile=False)
    row = results["batch_sizes"]["3"]["overlapped"]
    assert row["calls"] == 2 and row["questions"] == 6 and row["questions_per_second"] > 0
    assert any(r[1] == "questions/s overlapped" for r in stage_table(results)[1])
    skipped = bench_stages(engine, engine.dataset.questions, batch_sizes=(3,), repeats=2, warmup=0,
                           precompile=False, overlapped=False)
    assert skipped["batch_sizes"]["3"]["overlapped"] is None

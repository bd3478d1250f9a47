"""`bench stages` for fresh questions with the encoder's online matmuls in float32 and in bfloat16, call by call.

    STEM_DATA_DIR=../shared/data python experiments/encoder_speed.py [--calls 200,24] [--batch-sizes 1,64]

One engine (MetaQA 2-hop test, pattern planner, encoder memo off: every question and schema text is encoded)
timed by ``bench stages``' own :class:`~stem_jax.bench.stages.StageTimer`, the two dtypes alternating call by
call (float32 = the float32 forward, bit for bit): on a shared machine the load moves within seconds, and
alternating calls gives both sides the same load, which runs minutes apart do not. Every call takes questions
no call took before (the engine keeps the schema texts it has encoded, so a repeated question would cost no
schema encoding). Both dtypes' encoder shapes and the tracer are compiled first (``Engine.warm_up``), then two
untimed calls each. Reports per dtype and batch size p50/p95 latency per call, questions/s, process CPU ms,
per-stage p50s and the text encoder's share of the time, with the load average before and after.
Writes ``experiments/results/encoder-speed.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import fresh_metaqa_2hop, load_averages, warm_each_setting  # noqa: E402

from stem_jax.bench.stages import ENCODER_STAGES, STAGES, StageTimer  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

DTYPES = ("float32", "bfloat16")
WARM = 2  # untimed calls per dtype and batch size after compiling


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument("--calls", default="200,24", help="timed calls per batch size and dtype")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    engine, calls = fresh_metaqa_2hop(args.batch_sizes, args.calls)
    sizes = tuple(calls)
    encoder = engine.encoder
    questions = engine.dataset.questions
    need = sum(size * 2 * (calls[size] + WARM + 1) for size in sizes)
    if need > len(questions):
        raise SystemExit(f"{len(questions)} questions cannot give every call its own: {need} needed, use fewer calls")
    timer = StageTimer(engine)
    cursor = 0

    def take(n: int) -> list:
        nonlocal cursor
        cursor += n
        return questions[cursor - n : cursor]

    summary, rows, loads = {}, [], {}
    for size in sizes:
        warm_each_setting(encoder, "dot_dtype", DTYPES, size, lambda n: timer.run(take(n)), engine.warm_up, WARM)
        loads[size] = {"before": load_averages()}
        warm: dict[str, list[dict[str, float]]] = {d: [] for d in DTYPES}
        for i in range(2 * calls[size]):
            dtype = DTYPES[i % 2]
            encoder.dot_dtype = dtype
            warm[dtype].append(timer.run(take(size)))
        loads[size]["after"] = load_averages()
        for dtype in DTYPES:
            got = warm[dtype]
            p50 = {s: float(np.percentile([w[s] for w in got], 50)) * 1000 for s in (*STAGES, "total", "process_cpu")}
            total = sum(w["total"] for w in got)
            share = sum(w[s] for w in got for s in ENCODER_STAGES) / total
            summary[f"{dtype}/{size}"] = {
                "calls": len(got), "p50_ms": round(p50["total"], 2),
                "p95_ms": round(float(np.percentile([w["total"] for w in got], 95)) * 1000, 2),
                "questions_per_second": round(size * len(got) / total, 1), "encoder_share": round(share, 3),
                "stage_p50_ms": {k: round(v, 3) for k, v in p50.items()}, "load": loads[size]}
            row = summary[f"{dtype}/{size}"]
            rows.append([size, dtype, row["p50_ms"], row["p95_ms"], round(p50["process_cpu"], 2),
                         row["questions_per_second"], round(p50["question_encoding"], 2),
                         round(p50["schema_encoding"], 2), round(p50["total"] - p50["question_encoding"]
                                                                 - p50["schema_encoding"], 2),
                         f"{100 * share:.0f}%", f"{loads[size]['before']} -> {loads[size]['after']}"])
        print(markdown_table(["batch", "dot dtype", "p50 ms"], [r[:3] for r in rows]), flush=True)
    headers = ["batch", "dot dtype", "p50 ms", "p95 ms", "CPU ms p50", "questions/s", "question enc. p50 ms",
               "schema enc. p50 ms", "p50 total minus encoding", "encoder share", "load average before -> after"]
    table = markdown_table(headers, rows)
    print(table)
    meta = run_metadata()
    command = "python experiments/encoder_speed.py " + " ".join(sys.argv[1:])
    payload = {"meta": meta, "command": command.strip(), "batch_sizes": list(sizes), "calls": calls,
               "summary": summary}
    write_report(args.out, "encoder-speed", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\n"
                 "`bench stages`' timer, MetaQA 2-hop test, pattern planner, fresh questions (encoder memo off, no "
                 "question seen twice), the encoder's online matmuls in float32 (today's forward) and bfloat16 "
                 "alternating call by call in one process. Latency is per call of the whole batch; 'encoder share' "
                 "is question + schema-text encoding over the total time; CPU ms is the process's CPU time per call "
                 "(all threads). Load averages are the 1/5/15-minute ones of the machine.\n\n"
                 f"{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Question encoding with MiniLM against the distilled question student: the encode call alone, and `bench stages`.

    STEM_DATA_DIR=../shared/data python experiments/encoder_question_speed.py [--encode-calls 300] \
        [--batch-sizes 1,64] [--calls 200,24]

One engine (MetaQA 2-hop test, pattern planner, encoder memo off: every question encoded afresh, as
``bench stages --no-encoder-memo``) whose template classifier reads ``encoder.encode_questions``, with
``encoder.question_encoder`` switched between "minilm" (today's online forward: bfloat16 matmuls) and "student"
call by call, so both sides see the same machine load. First the encode call alone: one masked MetaQA question a
call (``--encode-calls`` per encoder, the wordings of every hop in turn), wall and process CPU time. Then
``bench stages``' own :class:`~stem_jax.bench.stages.StageTimer` per batch size, fresh questions every call (as
``encoder_speed.py``). Writes ``experiments/results/encoder-question-speed.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from paper_common import fresh_metaqa_2hop, load_averages, warm_each_setting  # noqa: E402

from stem_jax.bench.stages import STAGES, StageTimer  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

ENCODERS = ("minilm", "student")
WARM = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encode-calls", type=int, default=300)
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument("--calls", default="200,24", help="timed bench calls per batch size and encoder")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.plan.question_text import mask_topics, topic_names

    engine, calls = fresh_metaqa_2hop(args.batch_sizes, args.calls)
    encoder = engine.encoder
    loaded = load_dataset(DatasetSpec(name="metaqa", split="test", hops=(1, 2, 3)))
    wordings = sorted({mask_topics(q.text, topic_names(q, None))[0] for q in loaded.questions})
    tokens = [len(t) for t in encoder.tokenizer.tokenize(wordings)]
    for name in ENCODERS:
        encoder.question_encoder = name
        encoder.warm_up()
    encode: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in ENCODERS}
    load_encode = {"before": load_averages()}
    for i in range(2 * (args.encode_calls + 20)):
        name = ENCODERS[i % 2]
        encoder.question_encoder = name
        text = wordings[(i // 2) % len(wordings)]
        wall, cpu = time.perf_counter(), time.process_time()
        encoder.encode_questions([text])
        if i >= 40:  # the first 20 calls each are warm-up
            encode[name]["wall"].append(time.perf_counter() - wall)
            encode[name]["cpu"].append(time.process_time() - cpu)
    load_encode["after"] = load_averages()
    encode_rows, encode_summary = [], {}
    for name in ENCODERS:
        wall, cpu = np.asarray(encode[name]["wall"]) * 1e3, np.asarray(encode[name]["cpu"]) * 1e3
        encode_summary[name] = {"calls": len(wall), "wall_p50_ms": round(float(np.median(wall)), 3),
                                "wall_p10_ms": round(float(np.percentile(wall, 10)), 3),
                                "wall_p90_ms": round(float(np.percentile(wall, 90)), 3),
                                "cpu_p50_ms": round(float(np.median(cpu)), 3)}
        s = encode_summary[name]
        encode_rows.append([name, s["calls"], s["wall_p10_ms"], s["wall_p50_ms"], s["wall_p90_ms"], s["cpu_p50_ms"]])
    encode_table = markdown_table(["question encoder", "calls", "wall p10 ms", "wall p50 ms", "wall p90 ms",
                                   "CPU p50 ms"], encode_rows)
    print(encode_table, flush=True)

    questions = engine.dataset.questions
    timer = StageTimer(engine)
    cursor = 0

    def take(n: int) -> list:
        nonlocal cursor
        cursor = cursor + n if cursor + n <= len(questions) else n  # wrap round when the split runs out
        return questions[cursor - n : cursor]

    summary, rows = {}, []
    for size in calls:
        warm_each_setting(encoder, "question_encoder", ENCODERS, size, lambda n: timer.run(take(n)), engine.warm_up,
                          WARM)
        load = {"before": load_averages()}
        warm: dict[str, list[dict[str, float]]] = {n: [] for n in ENCODERS}
        for i in range(2 * calls[size]):
            name = ENCODERS[i % 2]
            encoder.question_encoder = name
            warm[name].append(timer.run(take(size)))
        load["after"] = load_averages()
        for name in ENCODERS:
            got = warm[name]
            p50 = {s: float(np.percentile([w[s] for w in got], 50)) * 1000 for s in (*STAGES, "total", "process_cpu")}
            total = sum(w["total"] for w in got)
            summary[f"{name}/{size}"] = row = {
                "calls": len(got), "p50_ms": round(p50["total"], 2),
                "p95_ms": round(float(np.percentile([w["total"] for w in got], 95)) * 1000, 2),
                "questions_per_second": round(size * len(got) / total, 1),
                "stage_p50_ms": {k: round(v, 3) for k, v in p50.items()}, "load": load}
            rows.append([size, name, row["p50_ms"], row["p95_ms"], round(p50["process_cpu"], 2),
                         row["questions_per_second"], round(p50["question_encoding"], 2),
                         round(p50["schema_encoding"], 2), round(p50["tracing"], 2),
                         f"{load['before']} -> {load['after']}"])
        print(markdown_table(["batch", "question encoder", "p50 ms"], [r[:3] for r in rows]), flush=True)
    table = markdown_table(["batch", "question encoder", "p50 ms", "p95 ms", "CPU ms p50", "questions/s",
                            "question enc. p50 ms", "schema enc. p50 ms", "tracing p50 ms",
                            "load average before -> after"], rows)
    meta = run_metadata()
    command = "python experiments/encoder_question_speed.py " + " ".join(sys.argv[1:])
    payload = {"meta": meta, "command": command.strip(), "encode_call": encode_summary, "encode_load": load_encode,
               "wordings": len(wordings), "wording_tokens_mean": round(float(np.mean(tokens)), 2),
               "batch_sizes": list(calls), "calls": calls, "bench": summary}
    write_report(args.out, "encoder-question-speed", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\n"
                 f"The encode call alone: one masked MetaQA test question a call ({len(wordings)} wordings, "
                 f"{np.mean(tokens):.1f} tokens on average with [CLS] and [SEP]), the two encoders alternating; "
                 f"load average {load_encode['before']} -> {load_encode['after']}.\n\n{encode_table}\n\n"
                 "`bench stages`' timer, MetaQA 2-hop test, pattern planner, fresh questions (encoder memo off), "
                 "the two question encoders alternating call by call in one process; CPU ms is the process's CPU "
                 "time per call (all threads).\n\n"
                 f"{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

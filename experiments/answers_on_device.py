"""`bench stages` with answers ranked on the host (numpy) and on the device (one jitted call), call by call.

    STEM_DATA_DIR=../shared/data python experiments/answers_on_device.py [--calls 300,30] [--batch-sizes 1,64]

One engine (MetaQA 2-hop test, pattern planner, encoder memo off: as ``stem-jax bench stages --dataset metaqa
--hops 2 --planner pattern --batch-sizes 1,64 --no-encoder-memo``) timed by ``bench stages``' own
:class:`~stem_jax.bench.stages.StageTimer`, ``engine.answers_on`` host and device alternating call by call (on this
shared machine the load moves within seconds; alternating gives both sides the same load). Every call takes
questions no call took before. Besides the stage times, the ranking step alone is timed inside the answers stage
(``ChunkAnswers.ranked`` on the host, :func:`stem_jax.methods.stem.rank.rank_on_device` on the device), and every device ranking is
checked against the host ranking of the same runs (outside the timed region): a difference stops the script.
Each call also ranks its whole batch in one call on both sides (as ``stem-jax eval`` ranks a chunk), timed apart.
Reports per side and batch size p50 of the answers stage, of the ranking step and of the total, p95 total,
questions/s and the load average before and after. Writes ``experiments/results/answers-on-device[-LABEL].{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import jax
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import fresh_metaqa_2hop, load_averages  # noqa: E402

from stem_jax.answer.rank import ChunkAnswers  # noqa: E402
from stem_jax.bench.stages import STAGES, StageTimer  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.methods.stem import rank as rank_stage  # noqa: E402
from stem_jax.methods.stem.anchor import anchor  # noqa: E402
from stem_jax.methods.stem.trace import trace  # noqa: E402
from stem_jax.methods.stem.types import split_by_question  # noqa: E402

SIDES = ("host", "device")
WARM = 2  # untimed calls per side and batch size after compiling


class RankingClock:
    """Wraps the two ranking functions: seconds spent in them per call, and a host check of every device ranking."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.checked = 0
        host, device = ChunkAnswers.ranked, rank_stage.rank_on_device
        self.host, self.device = host, device
        clock = self

        def timed_host(chunk, *args, **kwargs):
            began = time.perf_counter()
            out = host(chunk, *args, **kwargs)
            clock.seconds += time.perf_counter() - began
            return out

        def timed_device(rules, chunk, gaps, exclude):
            began = time.perf_counter()
            out = device(rules, chunk, gaps, exclude)
            clock.seconds += time.perf_counter() - began
            want = host(chunk, rules.rule, rules.answer_cut, gaps, exclude, never=rules.mediators)
            if out != want:
                raise SystemExit(f"device ranking differs from the host's: {out} != {want}")
            clock.checked += 1
            return out

        # the rank stage calls rank_on_device by its module name, so the stage's own calls are timed
        ChunkAnswers.ranked = timed_host
        rank_stage.rank_on_device = timed_device


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument("--calls", default="300,30", help="timed calls per batch size and side")
    parser.add_argument("--label", default="", help="results go to answers-on-device[-LABEL].*")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    engine, calls = fresh_metaqa_2hop(args.batch_sizes, args.calls)
    sizes = tuple(calls)
    questions = engine.dataset.questions
    need = sum(size * 2 * (calls[size] + WARM + 1) for size in sizes)
    if need > len(questions):
        raise SystemExit(f"{len(questions)} questions cannot give every call its own: {need} needed, use fewer calls")
    timer = StageTimer(engine)
    method = timer.method
    res = method.resources
    if res.answer_scorer is not None:
        raise SystemExit("this KG has a learned answer scorer: answers are ranked on the host whatever answers_on says")
    clock = RankingClock()
    captured: dict[str, list] = {}
    score_grid = method.score_grid

    def capture_runs(questions, hypers, **kw):  # the runs StageTimer plans, ranked again below
        captured["runs"] = kw.get("runs")
        return score_grid(questions, hypers, **kw)

    method.score_grid = capture_runs
    cursor = 0

    def take(n: int) -> list:
        nonlocal cursor
        cursor += n
        return questions[cursor - n : cursor]

    def run(side: str, batch: list) -> dict[str, float]:
        res.engine = dataclasses.replace(res.engine, answers_on=side)
        clock.seconds = 0.0
        times = timer.run(batch)
        times["ranking"] = clock.seconds
        # the whole batch ranked in one call, as `stem-jax eval` ranks a chunk (the rank stage): both sides on the
        # same runs (traced again, untimed), the other side second every other call
        runs = captured["runs"]
        flat = trace(res, anchor(res, [r for mine in runs for r in mine], [method.hyper])).outputs[0]
        rules = res.rank_rules()
        chunk, exclude, _ = rank_stage.fold(res.index, rules, batch, runs, split_by_question(flat, runs))
        gaps = [rank_stage.ranking_gap(rules, mine, method.hyper) for mine in runs]
        on_device = dataclasses.replace(rules, mediator_mask=res.mediator_mask())
        got = {}
        for other in (SIDES if side == "host" else SIDES[::-1]):
            began = time.perf_counter()
            if other == "host":
                got[other] = clock.host(chunk, rules.rule, rules.answer_cut, gaps, exclude, never=rules.mediators)
            else:
                got[other] = clock.device(on_device, chunk, gaps, exclude)
            times[f"chunk_{other}"] = time.perf_counter() - began
        if got["host"] != got["device"]:
            raise SystemExit("the batch's device ranking differs from its host ranking")
        clock.checked += 1
        return times

    summary, rows, loads = {}, [], {}
    for size in sizes:
        engine.warm_up(size)
        for side in SIDES:
            for _ in range(WARM + 1):
                run(side, take(size))
        loads[size] = {"before": load_averages()}
        warm: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
        for i in range(2 * calls[size]):
            side = SIDES[i % 2]
            warm[side].append(run(side, take(size)))
        loads[size]["after"] = load_averages()
        for side in SIDES:
            got = warm[side]
            p50 = {s: float(np.percentile([w[s] for w in got], 50)) * 1000
                   for s in (*STAGES, "ranking", "chunk_host", "chunk_device", "total", "process_cpu")}
            total = sum(w["total"] for w in got)
            summary[f"{side}/{size}"] = {
                "calls": len(got), "p50_ms": round(p50["total"], 3),
                "p95_ms": round(float(np.percentile([w["total"] for w in got], 95)) * 1000, 3),
                "answers_p50_ms": round(p50["answers"], 3), "ranking_p50_ms": round(p50["ranking"], 3),
                "batch_ranking_p50_ms": {s: round(p50[f"chunk_{s}"], 3) for s in SIDES},
                "questions_per_second": round(size * len(got) / total, 1),
                "stage_p50_ms": {k: round(v, 3) for k, v in p50.items()}, "load": loads[size]}
            row = summary[f"{side}/{size}"]
            rows.append([size, side, row["answers_p50_ms"], row["ranking_p50_ms"],
                         row["batch_ranking_p50_ms"][side], row["p50_ms"], row["p95_ms"],
                         round(p50["process_cpu"], 2), row["questions_per_second"],
                         f"{loads[size]['before']} -> {loads[size]['after']}"])
        print(markdown_table(["batch", "answers on", "answers p50 ms"], [r[:3] for r in rows]), flush=True)
    headers = ["batch", "answers on", "answers stage p50 ms", "ranking p50 ms", "batch ranked in one call p50 ms",
               "total p50 ms", "total p95 ms",
               "CPU ms p50", "questions/s", "load average before -> after"]
    table = markdown_table(headers, rows)
    print(table)
    meta = run_metadata()
    command = "python experiments/answers_on_device.py " + " ".join(sys.argv[1:])
    payload = {"meta": meta, "command": command.strip(), "backend": jax.default_backend(), "batch_sizes": list(sizes),
               "calls": calls, "device_rankings_checked": clock.checked, "summary": summary}
    name = "answers-on-device" + (f"-{args.label}" if args.label else "")
    write_report(args.out, name, payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}\n\nJAX backend: {payload['backend']}\n\n"
                 "`bench stages`' timer, MetaQA 2-hop test, pattern planner, fresh questions (encoder memo off, no "
                 "question seen twice), `engine.answers_on` host and device alternating call by call in one process. "
                 "Latency is per call of the whole batch; the answers stage ranks the batch in one pass and builds every "
                 "question's record (as `bench stages` does), the ranking column is the "
                 "part of it spent ranking (`ChunkAnswers.ranked` or the jitted `kernels/answers.py` call with its "
                 "padding and transfer); 'batch ranked in one call' ranks the call's whole batch at once, as `stem-jax "
                 "eval` ranks a chunk (the rank stage), on the side named (both sides time it on the same "
                 f"runs every call). Every one of the {clock.checked} device rankings (per question and per batch) was "
                 "checked equal to the host's ranking of the same runs. CPU ms is the process's CPU time per call (all threads). Load "
                 "averages are the 1/5/15-minute ones.\n\n"
                 f"{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""MetaQA test, oracle plans: STEM retrieval over the whole split at several tracer batch sizes, alternating.

Command (repo root; MetaQA index ready):

    STEM_DATA_DIR=../shared/data python experiments/trace_batch_sizes.py \
        --configs 64/256,128/512,256/1024 --reps 5 [--label L]

Each config is ``breadth/precision``: runs per compiled Breadth / Precision batch (``engine.batch_breadth`` /
``engine.batch_precision``). One process, one STEM holder: the configs differ only in the batch capacities the
holder pads to, so they share the KG on device, the plans and the schema-text table. Every config first runs
the split once untimed (compiles its shapes) and its ranked answers (entities and scores) are compared with the
first config's; then the timed rounds run the configs in turn (same window, same load), each timing the whole
split in the eval's chunks (`StemMethod.retrieve`), wall and process CPU seconds, and counting the compiled
tracer calls (including capacity-ladder retries).

Writes experiments/results/trace-batch-sizes[-L].{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

RESULTS = ROOT / "experiments" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="64/256,128/512,256/1024", help="breadth/precision,...")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    configs = [tuple(int(x) for x in c.split("/")) for c in args.configs.split(",")]

    from stem_jax.engine import Engine

    engine = Engine.open("metaqa", planner="oracle")
    method = engine.method("stem")
    questions = list(engine.dataset.questions)
    res = method.resources
    calls = [0]
    by_level: dict[tuple[int, int], dict[str, int]] = {}  # config -> "precision|breadth F=..." -> calls
    level_calls: dict[str, int] = {}
    trace = res.sharding.trace

    def counted(*a, **k):
        calls[0] += 1
        key = "precision" if k["precision"] else f"breadth F={k['shapes'].frontier}"
        level_calls[key] = level_calls.get(key, 0) + 1
        return trace(*a, **k)

    res.sharding.trace = counted
    method.prepare(questions)
    chunk = method.context.config.engine.chunk_questions

    def split() -> list:
        out = []
        for start in range(0, len(questions), chunk):
            out.extend(tuple((e, float(s)) for e, s in r.answers) for r in method.retrieve(questions[start : start + chunk]))
        return out

    def use(config: tuple[int, int]) -> None:
        res.batch = {True: res.sharding.round_up(config[1]), False: res.sharding.round_up(config[0])}

    first, identical = None, {}
    for config in configs:  # untimed: every config's tracer shapes, and its answers against the first's
        use(config)
        answers = split()
        first = answers if first is None else first
        identical[config] = sum(a == b for a, b in zip(answers, first, strict=True))
    gc.freeze()  # as `stem-jax eval` settles the heap after planning
    timed: dict[tuple[int, int], list[tuple[float, float, float, int]]] = {c: [] for c in configs}
    for r in range(args.reps):
        for config in configs[r % len(configs):] + configs[: r % len(configs)]:
            use(config)
            calls[0] = 0
            level_calls.clear()
            load = os.getloadavg()[0]
            began, began_cpu = time.perf_counter(), time.process_time()
            split()
            timed[config].append((time.perf_counter() - began, time.process_time() - began_cpu, load, calls[0]))
            by_level[config] = dict(level_calls)
            print(f"round {r} {config}: {timed[config][-1][0]:.2f} s, CPU {timed[config][-1][1]:.2f} s, "
                  f"load {load:.1f}, {calls[0]} tracer calls", flush=True)

    rows, table = [], []
    for config in configs:
        t = np.asarray(timed[config])
        row = {"batch_breadth": config[0], "batch_precision": config[1], "tracer_calls": int(t[0, 3]),
               "median_seconds": float(np.median(t[:, 0])), "median_cpu_seconds": float(np.median(t[:, 1])),
               "min_seconds": float(t[:, 0].min()), "min_cpu_seconds": float(t[:, 1].min()),
               "identical_answers": identical[config], "calls_by_level": by_level[config], "rounds": t[:, :3].round(3).tolist()}
        rows.append(row)
        levels = ", ".join(f"{k}: {v}" for k, v in by_level[config].items())
        table.append([f"{config[0]} / {config[1]}", f"{row['tracer_calls']} ({levels})", round(row["median_seconds"], 2),
                      round(row["min_seconds"], 2), round(row["median_cpu_seconds"], 2),
                      round(row["min_cpu_seconds"], 2), f"{identical[config]}/{len(questions)}",
                      ", ".join(f"{w:.2f}s@{lo:.1f}" for w, _, lo in t[:, :3])])
    meta = run_metadata()
    md = (f"STEM retrieval over MetaQA test ({len(questions)} questions, oracle plans, 2,048-question chunks) at "
          f"several tracer batch sizes, alternating in one process; machine {meta['machine']} "
          f"({meta['cpu_count']} cores, shared), commit {meta['commit']}.\n\nCommand: `python "
          f"experiments/trace_batch_sizes.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
          + markdown_table(["breadth / precision batch", "tracer calls per split (by ladder level)", "median s", "min s",
                            "median CPU s", "min CPU s", "answers identical to the first row", "rounds (wall@load)"],
                           table) + "\n")
    name = f"trace-batch-sizes-{args.label}" if args.label else "trace-batch-sizes"
    write_report(RESULTS, name, {"meta": meta, "argv": sys.argv[1:] if argv is None else argv,
                                 "questions": len(questions), "configs": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

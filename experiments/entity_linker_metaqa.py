"""Entity linker on MetaQA test without brackets: how often the best link is the bracketed topic, and how fast.

Command (from the repo root):

    STEM_DATA_DIR=../shared/data nice python experiments/entity_linker_metaqa.py

Options: --split test (default), --limit N (first N questions per hop, for a quick look).
A few minutes on a CPU (two passes over 39k questions). Writes
experiments/results/entity-linker-metaqa-<split>.{json,md}.

Two variants of every question, the topic's brackets removed in both: as written (MetaQA keeps the
KB's spelling, so most links are exact) and lower-cased (the linker must fall back to case-insensitive
and fuzzy matches, and the 3,057 case twins of the KB, e.g. "Michelle Trachtenberg" vs "michelle
trachtenberg", become ambiguous). "found" means the first link is the bracketed entity; "in links" means it
is among the links of the best span (same-named entities, better-connected first). Latency is per question,
one question at a time, after the linker's one-off build (reported separately): wall-clock and the thread's
CPU time (the machine is shared, so wall-clock p95 includes waiting for a core).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from stem_jax.data.linker import EntityLinker, _rapidfuzz
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.eval.report import markdown_table, run_metadata, write_report
from stem_jax.kg.index import build_index

VARIANTS = {"as written": lambda text: text, "lower-cased": str.lower}


def measure(linker: EntityLinker, questions, transform) -> dict:
    found = inside = 0
    kinds: Counter = Counter()
    times, cpu = [], []
    for q in questions:
        text = transform(q.text)
        start, start_cpu = time.perf_counter(), time.thread_time()
        links = linker.link(text)
        times.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
        kinds[links[0].kind if links else "none"] += 1
        if links and links[0].entity == q.topic_entities[0]:
            found += 1
        best_span = [link.entity for link in links if (link.start, link.end) == (links[0].start, links[0].end)]
        inside += int(q.topic_entities[0] in best_span)
    ms, cpu_ms = np.asarray(times) * 1e3, np.asarray(cpu) * 1e3
    n = len(questions)
    return {"questions": n, "found": found / n, "in_best_span": inside / n, "kinds": dict(kinds),
            "ms_median": float(np.median(ms)), "ms_p95": float(np.percentile(ms, 95)), "ms_max": float(ms.max()),
            "cpu_ms_median": float(np.median(cpu_ms)), "cpu_ms_p95": float(np.percentile(cpu_ms, 95))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = parser.parse_args(argv)
    began = time.perf_counter()
    data = load_dataset(DatasetSpec(name="metaqa", split=args.split, hops=(1, 2, 3), limit=args.limit))
    index = build_index(data.triples)
    start = time.perf_counter()
    linker = EntityLinker.from_index(index, data.entity_names)
    build_seconds = time.perf_counter() - start
    results: dict[str, dict[str, dict]] = {}
    rows = []
    for variant, transform in VARIANTS.items():
        results[variant] = {}
        for hops, questions in sorted(data.splits_by_hops().items()):
            r = measure(linker, questions, transform)
            results[variant][f"{hops}-hop"] = r
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["kinds"].items(), key=lambda kv: -kv[1]))
            rows.append([variant, f"{hops}-hop", r["questions"], round(100 * r["found"], 2),
                         round(100 * r["in_best_span"], 2), kinds, round(r["ms_median"], 2), round(r["ms_p95"], 2),
                         round(r["cpu_ms_median"], 2), round(r["cpu_ms_p95"], 2)])
            print(rows[-1], flush=True)
    table = markdown_table(["question text", "hops", "questions", "found %", "in best span %", "first-link kinds",
                            "ms p50", "ms p95", "CPU ms p50", "CPU ms p95"], rows)
    meta = run_metadata()
    meta["load_average"] = os.getloadavg()
    payload = {"meta": meta, "command": "python experiments/entity_linker_metaqa.py " + " ".join(argv or sys.argv[1:]),
               "split": args.split, "limit": args.limit, "entities": index.num_entities,
               "similarity": "rapidfuzz" if _rapidfuzz is not None else "difflib",
               "linker_build_seconds": build_seconds, "wall_seconds": time.perf_counter() - began,
               "results": results}
    text = (f"Command: `{payload['command']}`\n\nMetaQA {args.split}, brackets removed; {index.num_entities} entities; "
            f"linker built once in {build_seconds:.1f}s; similarity by {payload['similarity']}; "
            f"load average during the run {meta['load_average'][0]:.1f} on {meta.get('cpu_count')} cores "
            "(shared machine: latencies are upper bounds).\n\n" + table)
    paths = write_report(args.out, f"entity-linker-metaqa-{args.split}", payload, text)
    print(table)
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scale curves: index build time, peak memory and per-question trace latency against KG size,
hub degree and frontier width, on synthetic power-law KGs (0.1M, 1M, 10M triples) and FB15k-237.

Command (from the repo root):

    STEM_DATA_DIR=../shared/data nice python experiments/scale_curves.py --sizes 100000,1000000,10000000

Each KG runs in its own child process (so peak RSS is that KG's alone) with a time limit
(``--limit`` seconds). Synthetic KG with m triples: m/5 entities, 64 relations, head and tail drawn
from a Zipf-like law p(rank) ~ rank^-0.9 (a few hubs with tens of thousands of triples, a long
tail of degree-1 entities), duplicates removed by ``build_index`` (string triples ``e<id>``, the
path every loader takes). Trace inputs: random unit-norm **float16 triple embeddings of width
``--dim`` (64; MiniLM's 384 would be 7.7 GB at 10M triples and changes nothing but the dot
products' cost)**, a 2-step chain schema (parent 0 -> 1 -> 2), anchors at four degree levels
(median, p99, p99.9 and the largest hub), breadth strategy (the heavier one) at frontier F in
{16, 64, 256} and precision at F=64, batch 1 (latency, p50 of ``--reps`` warm calls) and batch 32
(amortised per question), no guidance. Compile time is reported apart (first call).
Writes experiments/results/scale-curves.{json,md,png} (``--label L``: scale-curves-L.*).

``--configs`` picks the (strategy:F) rows, e.g. ``breadth:64,precision:64`` for a quick 10M run.
``--old-tracer PATH`` also times the tracer module at PATH (e.g. a file written by ``git show
COMMIT:stem_jax/trace/tracer.py``) on the same KG and batches, alternating old and new call by
call, and records whether both return identical arrays: a before/after under the same load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
RELATIONS = 64
ZIPF = 0.9


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_triples(m: int, seed: int = 0):
    """(head, relation, tail) strings of a power-law KG with ``m`` triples before de-duplication."""
    rng = np.random.default_rng(seed)
    n = max(m // 5, 10)
    weights = np.arange(1, n + 1, dtype=np.float64) ** -ZIPF
    cdf = np.cumsum(weights / weights.sum())
    perm = rng.permutation(n)  # hubs get arbitrary ids
    for lo in range(0, m, 1 << 20):
        size = min(1 << 20, m - lo)
        heads = perm[np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)]
        tails = perm[np.minimum(np.searchsorted(cdf, rng.random(size)), n - 1)]
        rels = rng.integers(0, RELATIONS, size)
        for h, r, t in zip(heads.tolist(), rels.tolist(), tails.tolist(), strict=True):
            yield f"e{h}", f"r{r}", f"e{t}"


def parse_configs(text: str) -> list[tuple[int, bool]]:
    """``breadth:64,precision:64`` -> [(64, False), (64, True)]."""
    configs = []
    for item in text.split(","):
        strategy, frontier = item.split(":")
        if strategy not in ("breadth", "precision"):
            raise SystemExit(f"--configs: unknown strategy {strategy!r} (breadth or precision)")
        configs.append((int(frontier), strategy == "precision"))
    return configs


def load_tracer(path: str):
    """A tracer module from a file (an older commit's), importable beside the current one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale_curves_old_tracer", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def run_one(kind: str, size: int, dim: int, reps: int, configs: list[tuple[int, bool]] | None = None,
            old_tracer: str | None = None) -> dict:
    """Measure one KG (runs in the child process)."""
    import jax
    import jax.numpy as jnp

    from stem_jax.kg.index import build_index
    from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch

    old = load_tracer(old_tracer) if old_tracer else None

    out: dict = {"kind": kind, "requested_triples": size, "dim": dim}
    rss0 = rss_mb()
    if kind == "fb15k-237":
        from stem_jax.data.registry import DatasetSpec, load_dataset

        triples = load_dataset(DatasetSpec(name="fb15k-237", split="test")).triples
    else:
        triples = synthetic_triples(size)
    began = time.perf_counter()
    index = build_index(triples)
    out["index_seconds"] = time.perf_counter() - began
    del triples
    out["rss_after_index_mb"] = rss_mb()
    out["rss_before_mb"] = rss0
    degree = index.degree
    out.update(entities=index.num_entities, triples=index.num_triples, relations=index.num_relations,
               max_degree=int(degree.max()), mean_degree=float(degree.mean()),
               p99_degree=float(np.percentile(degree, 99)))
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((index.num_triples, dim)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    began = time.perf_counter()
    kg = KGArrays.from_index(index, emb.astype(np.float16))
    jax.block_until_ready(kg)
    out["device_kg_seconds"] = time.perf_counter() - began
    del emb

    order = np.argsort(degree, kind="stable")
    levels = {"median": order[len(order) // 2], "p99": order[int(len(order) * 0.99)],
              "p99.9": order[min(int(len(order) * 0.999), len(order) - 1)], "max": order[-1]}
    hyper = Hyper(tau=jnp.float32(0.5), theta=jnp.float32(0.0))  # θ=0: random cosines pass half the time

    def batch_of(anchor_ids: np.ndarray, b: int) -> TraceBatch:
        steps = np.asarray([[0, 1, 0], [1, 2, 1]], np.int32)
        q = rng.standard_normal((b, 2, dim)).astype(np.float32)
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        anchors = np.resize(np.asarray(anchor_ids, np.int32), b)
        return TraceBatch(steps=jnp.asarray(np.broadcast_to(steps, (b, 2, 3))), step_mask=jnp.ones((b, 2), bool),
                          step_emb=jnp.asarray(q), anchor=jnp.asarray(anchors), anchor_score=jnp.ones(b, jnp.float32),
                          guidance=jnp.full((b, 64), -1, jnp.int32))

    traces = []
    configs = configs or [(16, False), (64, False), (256, False), (64, True)]
    for frontier, precision in configs:
        shapes = TracerShapes(frontier=frontier)
        for level, anchor in levels.items():
            row = {"frontier": frontier, "strategy": "precision" if precision else "breadth", "anchor_level": level,
                   "anchor_degree": int(degree[anchor])}
            for b in (1, 32):
                batch = batch_of(np.full(b, anchor), b)
                key = "b1" if b == 1 else "b32"
                tracers = [("", trace_batch, shapes)]
                if old is not None:
                    tracers.append(("old_", old.trace_batch, old.TracerShapes(**dataclasses.asdict(shapes))))
                times: dict[str, list[float]] = {name: [] for name, _, _ in tracers}
                outputs = {}
                for rep in range(1 + (reps if b == 1 else max(2, reps // 3))):  # call 0 compiles
                    for name, trace, trace_shapes in tracers:  # old and new alternate call by call
                        t0 = time.perf_counter()
                        res = trace(kg, batch, hyper, shapes=trace_shapes, precision=precision)
                        jax.block_until_ready(res)
                        elapsed = time.perf_counter() - t0
                        if rep == 0:
                            row[f"{name}{key}_first_call_ms"] = 1e3 * elapsed
                        else:
                            times[name].append(elapsed)
                        outputs[name] = res
                for name, _, _ in tracers:
                    row[f"{name}{key}_p50_ms"] = 1e3 * float(np.median(times[name]))
                    row[f"{name}{key}_per_question_ms"] = 1e3 * float(np.median(times[name])) / b
                if old is not None:
                    row[f"{key}_identical_to_old"] = all(
                        np.array_equal(np.asarray(a), np.asarray(c)) for a, c in zip(outputs[""], outputs["old_"],
                                                                                       strict=True))
                res = outputs[""]
                row[f"{key}_load_average"] = os.getloadavg()[0]
                if b == 1:
                    # frontier width actually reached: bindings at step 1 and 2
                    nodes = np.asarray(res.nodes[0])
                    row["bound_step1"] = int((nodes[1] >= 0).sum())
                    row["bound_step2"] = int((nodes[2] >= 0).sum())
                    row["overflow"] = int(np.asarray(res.overflow)[0])
                    # incident triples the run scores: the anchor's at step 1, its step-1 bindings' at step 2
                    row["edges_scored"] = int(degree[anchor]) + int(degree[nodes[1][nodes[1] >= 0]].sum())
            traces.append(row)
            print(json.dumps(row), flush=True)
    out["traces"] = traces
    out["peak_rss_mb"] = rss_mb()
    return out


def child_main(args: argparse.Namespace) -> int:
    result = run_one(args.child_kind, args.child_size, args.dim, args.reps, parse_configs(args.configs),
                     args.old_tracer)
    Path(args.child_out).write_text(json.dumps(result))
    return 0


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "traces" in r]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    synth = sorted([r for r in ok if r["kind"] == "synthetic"], key=lambda r: r["triples"])
    ax = axes[0]
    ax.loglog([r["triples"] for r in synth], [r["index_seconds"] for r in synth], "o-", label="build_index s")
    ax.loglog([r["triples"] for r in synth], [r["peak_rss_mb"] / 1024 for r in synth], "s-", label="peak RSS GiB")
    for r in ok:
        if r["kind"] == "fb15k-237":
            ax.loglog([r["triples"]], [r["index_seconds"]], "k*", ms=12, label="FB15k-237 build s")
    ax.set_xlabel("triples")
    ax.set_title("index build and memory")
    ax.legend()
    ax = axes[1]
    for r in ok:
        rows = [t for t in r["traces"] if t["frontier"] == 64 and t["strategy"] == "breadth"]
        label = f"{r['kind']} {r['triples'] / 1e6:.2g}M"
        ax.loglog([max(t["anchor_degree"], 1) for t in rows], [t["b1_p50_ms"] for t in rows], "o-", label=label)
    ax.set_xlabel("anchor degree")
    ax.set_ylabel("ms per question (batch 1, warm)")
    ax.set_title("trace latency vs hub degree (breadth, F=64)")
    ax.legend(fontsize=8)
    ax = axes[2]
    for r in ok:
        rows = [t for t in r["traces"] if t["strategy"] == "breadth" and t["anchor_level"] == "max"]
        ax.loglog([t["frontier"] for t in rows], [t["b1_p50_ms"] for t in rows], "o-",
                  label=f"{r['kind']} {r['triples'] / 1e6:.2g}M, max hub")
    ax.set_xlabel("frontier width F")
    ax.set_title("trace latency vs frontier width")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--fb15k", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--limit", type=int, default=1500, help="seconds per KG (child process)")
    parser.add_argument("--configs", default="breadth:16,breadth:64,breadth:256,precision:64",
                        help="strategy:frontier rows to trace")
    parser.add_argument("--old-tracer", dest="old_tracer", default=None,
                        help="also time this tracer module file (before/after, alternating calls)")
    parser.add_argument("--label", default="", help="results go to scale-curves-LABEL.*")
    parser.add_argument("--child-kind", dest="child_kind", help=argparse.SUPPRESS)
    parser.add_argument("--child-size", dest="child_size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", dest="child_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_kind:
        return child_main(args)

    from stem_jax.cli.report import markdown_table, run_metadata, write_report

    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    jobs = [("synthetic", s) for s in sizes if s <= 1_000_000] + ([("fb15k-237", 0)] if args.fb15k else [])
    jobs += [("synthetic", s) for s in sizes if s > 1_000_000]  # the largest last: a timeout loses only it
    results = []
    for kind, size in jobs:
        out = Path(tempfile.gettempdir()) / f"scale-{os.getpid()}-{kind}-{size}.json"
        cmd = [sys.executable, __file__, "--child-kind", kind, "--child-size", str(size), "--child-out", str(out),
               "--dim", str(args.dim), "--reps", str(args.reps), "--configs", args.configs]
        if args.old_tracer:
            cmd += ["--old-tracer", str(Path(args.old_tracer).resolve())]
        began = time.perf_counter()
        load = os.getloadavg()[0]
        try:
            proc = subprocess.run(cmd, timeout=args.limit, capture_output=True, text=True)
            if proc.returncode != 0 or not out.exists():
                results.append({"kind": kind, "requested_triples": size, "error": proc.stderr[-2000:]})
            else:
                results.append(json.loads(out.read_text()))
        except subprocess.TimeoutExpired:
            results.append({"kind": kind, "requested_triples": size, "error": f"over the {args.limit}s limit"})
        results[-1]["wall_seconds"] = time.perf_counter() - began
        results[-1]["load_average_before"] = load
        print(kind, size, {k: v for k, v in results[-1].items() if k != "traces"}, flush=True)
        out.unlink(missing_ok=True)

    compared = any("old_b1_p50_ms" in t for r in results for t in r.get("traces", []))
    size_rows, trace_rows = [], []
    for r in results:
        if "error" in r:
            size_rows.append([r["kind"], r["requested_triples"], "-", "-", "-", "-", "-", "-", r["error"][-120:]])
            continue
        size_rows.append([r["kind"], r["triples"], r["entities"], r["max_degree"], round(r["p99_degree"], 1),
                          round(r["index_seconds"], 1), round(r["device_kg_seconds"], 1),
                          round(r["peak_rss_mb"] / 1024, 2), f"load {r['load_average_before']:.1f}"])
        for t in r["traces"]:
            row = [r["kind"], r["triples"], t["strategy"], t["frontier"], t["anchor_level"], t["anchor_degree"],
                   t["bound_step1"], t["bound_step2"], t.get("edges_scored", "-"), round(t["b1_p50_ms"], 2),
                   round(t["b32_per_question_ms"], 2)]
            if compared:
                row += [round(t["old_b1_p50_ms"], 2), round(t["old_b32_per_question_ms"], 2),
                        "yes" if t["b1_identical_to_old"] and t["b32_identical_to_old"] else "NO"]
            row += [round(t["b1_first_call_ms"] / 1e3, 1), f"{t.get('b32_load_average', float('nan')):.1f}"]
            trace_rows.append(row)
    meta = run_metadata()
    trace_header = ["KG", "triples", "strategy", "F", "anchor", "anchor degree", "bound 1", "bound 2",
                    "edges/run", "b1 ms", "b32 ms/q"]
    if compared:
        trace_header += ["old b1 ms", "old b32 ms/q", "identical"]
    trace_header += ["compile s", "load"]
    md = (f"Scale curves (CPU {meta['machine']}, {meta['cpu_count']} cores shared with other jobs; commit "
          f"{meta['commit']}, jax {meta['jax']}; load average before each KG in the last column). Synthetic KGs: "
          f"power law p(rank) ~ rank^-{ZIPF}, m/5 entities, {RELATIONS} relations; triple embeddings random "
          f"unit-norm float16 of width {args.dim}.\n\nCommand: `python experiments/scale_curves.py "
          f"{' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
          + markdown_table(["KG", "triples", "entities", "max degree", "p99 degree", "build_index s",
                            "device KG s", "peak RSS GiB", "note"], size_rows)
          + "\n\nPer-question trace latency (2-step chain; b1 = batch of one, warm p50; b32 = batch of 32 "
            "divided by 32; bound = bindings kept at step 1 / 2; edges/run = incident triples a run scores "
            "(anchor degree + degrees of its step-1 bindings); compile = first batch-1 call"
          + ("; old = the --old-tracer module timed on the same batches, calls alternating with the new one, "
             "identical = both return the same arrays" if compared else "")
          + "; load = load average after the row):\n\n"
          + markdown_table(trace_header, trace_rows))
    payload = {"meta": meta, "argv": sys.argv[1:] if argv is None else argv, "results": results,
               "zipf": ZIPF, "relations": RELATIONS, "dim": args.dim}
    name = f"scale-curves-{args.label}" if args.label else "scale-curves"
    paths = write_report(RESULTS, name, payload, md)
    plot(results, RESULTS / f"{name}.png")
    print(md)
    print(f"wrote {paths[0]}, {RESULTS / f'{name}.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Scale curves: index build time, peak memory and per-question trace latency against KG size,
hub degree and frontier width, on synthetic power-law KGs (0.1M, 1M, 10M triples) and FB15k-237.

Command (from the repo root):

    STEM_DATA_DIR=/work/shared/data nice python experiments/scale_curves.py --sizes 100000,1000000,10000000

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
Writes experiments/results/scale-curves.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
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


def run_one(kind: str, size: int, dim: int, reps: int) -> dict:
    """Measure one KG (runs in the child process)."""
    import jax
    import jax.numpy as jnp

    from stem_jax.kg.index import build_index
    from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch

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
    configs = [(16, False), (64, False), (256, False), (64, True)]
    for frontier, precision in configs:
        shapes = TracerShapes(frontier=frontier)
        for level, anchor in levels.items():
            row = {"frontier": frontier, "strategy": "precision" if precision else "breadth", "anchor_level": level,
                   "anchor_degree": int(degree[anchor])}
            for b in (1, 32):
                batch = batch_of(np.full(b, anchor), b)
                t0 = time.perf_counter()
                res = trace_batch(kg, batch, hyper, shapes=shapes, precision=precision)
                jax.block_until_ready(res)
                first = time.perf_counter() - t0
                times = []
                for _ in range(reps if b == 1 else max(2, reps // 3)):
                    t0 = time.perf_counter()
                    res = trace_batch(kg, batch, hyper, shapes=shapes, precision=precision)
                    jax.block_until_ready(res)
                    times.append(time.perf_counter() - t0)
                key = "b1" if b == 1 else "b32"
                row[f"{key}_first_call_ms"] = 1e3 * first
                row[f"{key}_p50_ms"] = 1e3 * float(np.median(times))
                row[f"{key}_per_question_ms"] = 1e3 * float(np.median(times)) / b
                if b == 1:
                    # frontier width actually reached: bindings at step 1 and 2
                    nodes = np.asarray(res.nodes[0])
                    row["bound_step1"] = int((nodes[1] >= 0).sum())
                    row["bound_step2"] = int((nodes[2] >= 0).sum())
                    row["overflow"] = int(np.asarray(res.overflow)[0])
            traces.append(row)
            print(json.dumps(row), flush=True)
    out["traces"] = traces
    out["peak_rss_mb"] = rss_mb()
    return out


def child_main(args: argparse.Namespace) -> int:
    result = run_one(args.child_kind, args.child_size, args.dim, args.reps)
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
        out = Path(f"/tmp/scale-{os.getpid()}-{kind}-{size}.json")
        cmd = [sys.executable, __file__, "--child-kind", kind, "--child-size", str(size), "--child-out", str(out),
               "--dim", str(args.dim), "--reps", str(args.reps)]
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

    size_rows, trace_rows = [], []
    for r in results:
        if "error" in r:
            size_rows.append([r["kind"], r["requested_triples"], "-", "-", "-", "-", "-", "-", r["error"][-120:]])
            continue
        size_rows.append([r["kind"], r["triples"], r["entities"], r["max_degree"], round(r["p99_degree"], 1),
                          round(r["index_seconds"], 1), round(r["device_kg_seconds"], 1),
                          round(r["peak_rss_mb"] / 1024, 2), f"load {r['load_average_before']:.1f}"])
        for t in r["traces"]:
            trace_rows.append([r["kind"], r["triples"], t["strategy"], t["frontier"], t["anchor_level"],
                               t["anchor_degree"], t["bound_step1"], t["bound_step2"], round(t["b1_p50_ms"], 2),
                               round(t["b32_per_question_ms"], 2), round(t["b1_first_call_ms"] / 1e3, 1)])
    md = ("Scale curves (CPU, shared 2 cores; load average before each KG in the last column). Synthetic KGs: "
          f"power law p(rank) ~ rank^-{ZIPF}, m/5 entities, {RELATIONS} relations; triple embeddings random "
          f"unit-norm float16 of width {args.dim}.\n\nCommand: `python experiments/scale_curves.py "
          f"{' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
          + markdown_table(["KG", "triples", "entities", "max degree", "p99 degree", "build_index s",
                            "device KG s", "peak RSS GiB", "note"], size_rows)
          + "\n\nPer-question trace latency (2-step chain; b1 = batch of one, warm p50; b32 = batch of 32 "
            "divided by 32; bound = bindings kept at step 1 / 2; compile = first batch-1 call):\n\n"
          + markdown_table(["KG", "triples", "strategy", "F", "anchor", "anchor degree", "bound 1", "bound 2",
                            "b1 ms", "b32 ms/q", "compile s"], trace_rows))
    payload = {"meta": run_metadata(), "argv": sys.argv[1:] if argv is None else argv, "results": results,
               "zipf": ZIPF, "relations": RELATIONS, "dim": args.dim}
    paths = write_report(RESULTS, "scale-curves", payload, md)
    plot(results, RESULTS / "scale-curves.png")
    print(md)
    print(f"wrote {paths[0]}, {RESULTS / 'scale-curves.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

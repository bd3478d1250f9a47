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

What the size table's times and memory are (so that the engine's own cost is not mixed with the
benchmark's): the synthetic string triples come from a generator that ``build_index`` consumes, so
the child first times one pass over a fresh generator alone (``gen strings s``, nothing kept), then
times ``build_index`` over another fresh one (``build_index+gen s``); ``build_index s`` is the
difference, the index's own time. The embeddings are drawn in chunks of 2^20 rows (float32 per chunk,
normalised, written into one preallocated float16 table), so the host holds only the float16 table
(``emb f16 GiB`` = m*d*2 bytes). RSS columns: ``index RSS GiB`` = resident set after ``build_index``
minus the one before it (the index kept), ``index peak GiB`` = the high-water mark during the build
minus the same start, ``device KG GiB`` = the bytes of the ``KGArrays`` (the table and the int32
arrays; ``KGArrays.from_index`` aliases the 64-byte-aligned host table on CPU, so these bytes are
mostly not a second copy), ``peak RSS GiB`` = the child's whole-run high-water mark (imports, index,
table, device arrays and the traces' buffers). Results before a7dc7c0 (``scale-curves-idle-22.md``)
were made while ``from_index`` still copied the table.

Before each synthetic KG past the first, the parent predicts its peak RSS from the largest finished
one (linear in triples) and skips it, with a note, when that exceeds 90% of MemAvailable: the machine
is shared, and the kernel's OOM killer may pick another process (each child also raises its own
``oom_score_adj`` to 1000, so that it is the one picked).

``--configs`` picks the (strategy:F) rows, e.g. ``breadth:64,precision:64`` for a quick 10M run.
``--old-tracer PATH`` also times the tracer module at PATH (e.g. a file written by ``git show
COMMIT:stem_jax/trace/tracer.py``) on the same KG and batches, alternating old and new call by
call, and records whether both return identical arrays: a before/after under the same load.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
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
    """The process's peak resident set so far (ru_maxrss), MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_mb(path: str, key: str) -> float | None:
    """A "key: N kB" line of a /proc file, in MiB; None where the file or the line is missing."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_now_mb() -> float:
    """The process's resident set now (VmRSS), MiB; the peak where /proc is missing."""
    now = proc_mb("/proc/self/status", "VmRSS:")
    return rss_mb() if now is None else now


def mem_available_mb() -> float | None:
    return proc_mb("/proc/meminfo", "MemAvailable:")


def random_unit_f16(rows: int, dim: int, seed: int = 1, chunk: int = 1 << 20) -> np.ndarray:
    """float16 [rows, dim]: standard normal rows scaled to unit norm, drawn ``chunk`` rows at a time.

    Each chunk is drawn and normalised in float32 and written into the preallocated float16 table, so
    the host holds the table plus one chunk (``chunk * dim * 4`` bytes), never a float32 or float64
    copy of the whole table. Deterministic for a given (rows, dim, seed, chunk).
    """
    rng = np.random.default_rng(seed)
    size = rows * dim * 2
    raw = np.empty(size + 64, np.uint8)  # 64-byte aligned, so that KGArrays.from_index may alias it on CPU
    start = -raw.ctypes.data % 64
    table = raw[start:start + size].view(np.float16).reshape(rows, dim)
    for lo in range(0, rows, chunk):
        block = rng.standard_normal((min(chunk, rows - lo), dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        table[lo:lo + len(block)] = block
    return table


def source_digest(*relative: str) -> dict[str, str]:
    """sha1 (12 hex) of engine files as the child imported them (others may edit the tree meanwhile)."""
    root = Path(__file__).resolve().parent.parent
    out = {}
    for name in relative:
        try:
            out[name] = hashlib.sha1((root / name).read_bytes()).hexdigest()[:12]
        except OSError:
            out[name] = "missing"
    return out


def scrub_paths(text: str) -> str:
    """Error text without this machine's absolute folders (result files are committed)."""
    root = Path(__file__).resolve().parent.parent
    for folder, name in ((str(root), "."), (sys.prefix, "$PREFIX"), (sys.base_prefix, "$BASE_PREFIX"),
                         (tempfile.gettempdir(), "$TMPDIR"), (str(Path.home()), "~")):
        if len(folder) > 1:
            text = text.replace(folder, name)
    return text


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
    try:  # if memory runs out, the kernel kills this child first, not a neighbour's process
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass
    import jax
    import jax.numpy as jnp

    from stem_jax.kg.index import build_index
    from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch

    old = load_tracer(old_tracer) if old_tracer else None

    out: dict = {"kind": kind, "requested_triples": size, "dim": dim,
                 "sources": source_digest("stem_jax/kg/index.py", "stem_jax/trace/tracer.py")}
    if kind == "fb15k-237":
        from stem_jax.data.registry import DatasetSpec, load_dataset

        triples = load_dataset(DatasetSpec(name="fb15k-237", split="test")).triples
        out["generate_seconds"] = 0.0  # loaded before the clock starts: build_index alone is timed
    else:
        began = time.perf_counter()
        collections.deque(synthetic_triples(size), maxlen=0)  # the strings alone, nothing kept
        out["generate_seconds"] = time.perf_counter() - began
        triples = synthetic_triples(size)
    rss0 = rss_now_mb()
    out["rss_before_mb"] = rss0
    began = time.perf_counter()
    index = build_index(triples)
    out["index_with_generation_seconds"] = time.perf_counter() - began
    out["index_seconds"] = out["index_with_generation_seconds"] - out["generate_seconds"]  # build_index's own
    del triples
    out["rss_after_index_mb"] = rss_now_mb()
    out["index_rss_mb"] = out["rss_after_index_mb"] - rss0
    out["index_peak_mb"] = rss_mb() - rss0
    out["peak_rss_after_index_mb"] = rss_mb()
    out["index_arrays_mb"] = sum(np.asarray(a).nbytes for a in (index.triples, index.csr_offsets,
                                                                   index.csr_triples)) / 2**20
    degree = index.degree
    out.update(entities=index.num_entities, triples=index.num_triples, relations=index.num_relations,
               max_degree=int(degree.max()), mean_degree=float(degree.mean()),
               p99_degree=float(np.percentile(degree, 99)))
    began = time.perf_counter()
    emb = random_unit_f16(index.num_triples, dim, seed=1)
    out["embedding_seconds"] = time.perf_counter() - began
    out["embedding_mb"] = emb.nbytes / 2**20
    out["rss_after_embedding_mb"] = rss_now_mb()
    began = time.perf_counter()
    kg = KGArrays.from_index(index, emb)
    jax.block_until_ready(kg)
    out["device_kg_seconds"] = time.perf_counter() - began
    out["device_kg_mb"] = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(kg)) / 2**20
    out["rss_after_device_kg_mb"] = rss_now_mb()
    out["peak_rss_after_device_kg_mb"] = rss_mb()
    del emb
    rng = np.random.default_rng(1)

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
                # incident triples each run scores: the anchor's at step 1, its step-1 bindings' at step 2
                step1 = np.asarray(res.nodes[:, 1])
                edges = degree[np.asarray(batch.anchor)] + np.where(step1 >= 0, degree[np.maximum(step1, 0)],
                                                                    0).sum(axis=1)
                row[f"{key}_edges_mean"] = float(edges.mean())
                row[f"{key}_ms_per_1k_edges"] = (row[f"{key}_per_question_ms"] / (edges.mean() / 1e3)
                                                 if edges.mean() > 0 else None)
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
    out["rss_end_mb"] = rss_now_mb()
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
    if all("index_rss_mb" in r for r in synth):
        ax.loglog([r["triples"] for r in synth], [max(r["index_rss_mb"], 1) / 1024 for r in synth], "^-",
                  label="index RSS GiB")
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

    from stem_jax.eval.report import markdown_table, run_metadata, write_report

    sizes = sorted(int(s) for s in args.sizes.split(",") if s)
    jobs = [("synthetic", s) for s in sizes if s <= 1_000_000] + ([("fb15k-237", 0)] if args.fb15k else [])
    jobs += [("synthetic", s) for s in sizes if s > 1_000_000]  # the largest last: a timeout loses only it
    results = []
    tree = subprocess.run(["git", "status", "--porcelain", "--", "stem_jax"], capture_output=True, text=True,
                          check=False, cwd=Path(__file__).resolve().parent.parent).stdout.split("\n")
    for kind, size in jobs:
        out = Path(tempfile.gettempdir()) / f"scale-{os.getpid()}-{kind}-{size}.json"
        done = [r for r in results if r["kind"] == "synthetic" and "peak_rss_mb" in r]
        available = mem_available_mb()
        if kind == "synthetic" and done and available is not None:
            ref = max(done, key=lambda r: r["requested_triples"])
            predicted = ref["peak_rss_mb"] * size / ref["requested_triples"]
            if predicted > 0.9 * available:
                results.append({"kind": kind, "requested_triples": size, "wall_seconds": 0.0,
                                "load_average_before": os.getloadavg()[0],
                                "error": f"skipped: predicted peak RSS {predicted / 1024:.1f} GiB (linear from "
                                         f"{ref['requested_triples']:,}) > 90% of MemAvailable "
                                         f"{available / 1024:.1f} GiB"})
                print(kind, size, results[-1], flush=True)
                continue
        cmd = [sys.executable, __file__, "--child-kind", kind, "--child-size", str(size), "--child-out", str(out),
               "--dim", str(args.dim), "--reps", str(args.reps), "--configs", args.configs]
        if args.old_tracer:
            cmd += ["--old-tracer", str(Path(args.old_tracer).resolve())]
        began = time.perf_counter()
        load = os.getloadavg()[0]
        try:
            proc = subprocess.run(cmd, timeout=args.limit, capture_output=True, text=True)
            if proc.returncode != 0 or not out.exists():
                killed = " (killed: SIGKILL, e.g. the OOM killer)" if proc.returncode == -9 else ""
                results.append({"kind": kind, "requested_triples": size,
                                "error": scrub_paths(f"exit {proc.returncode}{killed}: {proc.stderr[-2000:]}")})
            else:
                results.append(json.loads(out.read_text()))
        except subprocess.TimeoutExpired:
            results.append({"kind": kind, "requested_triples": size, "error": f"over the {args.limit}s limit"})
        results[-1]["wall_seconds"] = time.perf_counter() - began
        results[-1]["load_average_before"] = load
        results[-1]["load_average_after"] = os.getloadavg()[0]
        results[-1]["mem_available_before_mb"] = available
        print(kind, size, {k: v for k, v in results[-1].items() if k != "traces"}, flush=True)
        out.unlink(missing_ok=True)

    compared = any("old_b1_p50_ms" in t for r in results for t in r.get("traces", []))
    size_rows, trace_rows = [], []
    size_header = ["KG", "triples", "entities", "max degree", "p99 degree", "gen strings s", "build_index+gen s",
                   "build_index s", "device KG s", "start RSS GiB", "index RSS GiB", "index peak GiB",
                   "index arrays GiB", "emb f16 GiB", "device KG GiB", "peak RSS GiB", "wall s", "load before/after"]

    def gib(mb: float) -> float:
        return round(mb / 1024, 2)

    def per_k(value: float | None) -> str | float:
        return "-" if value is None else round(value, 3)

    for r in results:
        loads = f"{r['load_average_before']:.1f} / {r.get('load_average_after', float('nan')):.1f}"
        if "error" in r:
            size_rows.append([r["kind"], f"{r['requested_triples']:,} requested"] + ["-"] * 14
                             + [round(r["wall_seconds"]), loads + "; " + r["error"][-160:].replace("\n", " ")])
            continue
        size_rows.append([r["kind"], r["triples"], r["entities"], r["max_degree"], round(r["p99_degree"], 1),
                          round(r.get("generate_seconds", 0.0), 2),
                          round(r.get("index_with_generation_seconds", r["index_seconds"]), 2),
                          round(r["index_seconds"], 2), round(r["device_kg_seconds"], 2), gib(r["rss_before_mb"]),
                          gib(r.get("index_rss_mb", float("nan"))), gib(r.get("index_peak_mb", float("nan"))),
                          gib(r.get("index_arrays_mb", float("nan"))), gib(r.get("embedding_mb", float("nan"))),
                          gib(r.get("device_kg_mb", float("nan"))), gib(r["peak_rss_mb"]), round(r["wall_seconds"]),
                          loads])
        for t in r["traces"]:
            row = [r["kind"], r["triples"], t["strategy"], t["frontier"], t["anchor_level"], t["anchor_degree"],
                   t["bound_step1"], t["bound_step2"], t.get("edges_scored", "-"), round(t["b1_p50_ms"], 2),
                   per_k(t.get("b1_ms_per_1k_edges")), round(t.get("b32_edges_mean", float("nan"))),
                   round(t["b32_per_question_ms"], 2), per_k(t.get("b32_ms_per_1k_edges"))]
            if compared:
                row += [round(t["old_b1_p50_ms"], 2), round(t["old_b32_per_question_ms"], 2),
                        "yes" if t["b1_identical_to_old"] and t["b32_identical_to_old"] else "NO"]
            row += [round(t["b1_first_call_ms"] / 1e3, 1), f"{t.get('b32_load_average', float('nan')):.1f}"]
            trace_rows.append(row)
    meta = run_metadata()
    trace_header = ["KG", "triples", "strategy", "F", "anchor", "anchor degree", "bound 1", "bound 2",
                    "b1 edges/run", "b1 ms", "b1 ms/1k edges", "b32 edges/run (mean)", "b32 ms/q", "b32 ms/q per 1k edges"]
    if compared:
        trace_header += ["old b1 ms", "old b32 ms/q", "identical"]
    trace_header += ["compile s", "load"]
    dirty = [line for line in tree if line.strip()]
    sources = sorted({json.dumps(r["sources"], sort_keys=True) for r in results if "sources" in r})
    md = (f"Scale curves (CPU {meta['machine']}, {meta['cpu_count']} cores shared with other jobs; commit "
          f"{meta['commit']}"
          + (f" with uncommitted changes under stem_jax/ ({', '.join(line.strip() for line in dirty)})" if dirty
             else ", stem_jax/ clean")
          + f", jax {meta['jax']}; engine sources as each child read them: {'; '.join(sources) or '-'}). "
          f"Synthetic KGs: power law p(rank) ~ rank^-{ZIPF}, m/5 entities, {RELATIONS} relations; triple "
          f"embeddings random unit-norm float16 of width {args.dim}, drawn 2^20 rows at a time, put on the "
          "device by KGArrays.from_index (the engine's path).\n\nCommand: "
          f"`python experiments/scale_curves.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n\n"
          "Size table: gen strings = one pass over the synthetic string-triple generator alone; build_index+gen "
          "= build_index over a fresh generator (what earlier rows called build_index s); build_index = the "
          "difference (the index's own time; FB15k-237 is loaded first, so its gen is 0). start RSS = resident "
          "set before build_index (imports); index RSS = resident after build_index minus start; index peak = "
          "high-water mark during build_index minus start; index arrays = triples + CSR int arrays; emb f16 = "
          "the float16 embedding table (m x d x 2 bytes, the only copy the host builds); device KG = the "
          "KGArrays' bytes (the table and the int32 arrays; on CPU the table aliases the host buffer where "
          "from_index can); peak RSS = the child's "
          "whole-run high-water mark; wall = the child's wall time; load = 1-minute load average before / "
          "after the child.\n\n"
          + markdown_table(size_header, size_rows)
          + "\n\nPer-question trace latency (2-step chain; b1 = batch of one, warm p50; b32 = batch of 32 "
            "divided by 32; bound = bindings kept at step 1 / 2 (b1 run); edges/run = incident triples a run "
            "scores (anchor degree + degrees of its step-1 bindings), for the b1 run and the mean over the 32 "
            "b32 runs (same anchor, different step embeddings); ms/1k edges = ms per question / (edges/run / "
            "1000); compile = first batch-1 call"
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

"""Synthetic KGs up to 100M triples with compact rows, traced on one device and with the KG sharded over an
8-device mesh (or over processes): index time, peak RSS, breadth/precision latency at batch 1 and 32,
and whether the sharded tracer's arrays equal the one-device tracer's.

Command (repo root; one KG per child process, each under an address-space cap and ``nice``):

    python experiments/kg_shard_scale.py --sizes 10000000,30000000,100000000 --label 100m

The synthetic KG is :mod:`scale_curves`' (power law p(rank) ~ rank^-0.9, m/5 entities, 64 relations, string
triples through ``build_index``, the path every loader takes). Triple rows are random unit vectors of width
``--dim`` (64, as in the scale curves) stored in the compact ``int8`` row format (64 int8 codes and a
float32 scale: 68 B a row against float16's 128 B; for random rows no projection keeps information, so
``int8`` is d=64's compact form): each row is one of 2^20 quantised random unit vectors, picked at random,
so the host never holds a float table. After the index is built only its int arrays are kept (the entity strings are dropped: tracing reads
ids).

Per KG: the one-device tracer (``KGArrays`` aliasing the host rows) traces a 2-step chain from anchors at
four degree levels (median, p99, p99.9, the largest hub), Breadth and Precision at F = 64, batch 1 (p50 of
``--reps`` warm calls) and batch 32; then its ``KGArrays`` is dropped, the KG is cut over every device
(:func:`stem_jax.shard.shard_kg`, forced host devices: ``--devices``) and the same batches are traced by
:func:`stem_jax.shard.trace_batch_sharded`; ``identical`` says whether every output array is equal.

Memory safety (the machine is shared): before a KG above 10M triples the parent needs ``--min-free-gib``
of MemAvailable, else the KG is skipped with a note; every child runs under ``prlimit --as`` of
``--cap-gib`` (16) and raises its own ``oom_score_adj``.

``--processes 2`` runs each KG as a ``jax.distributed`` job of 2 processes with ``--devices`` / 2 forced
devices each (a mesh over both); every process also traces on one local device first and compares (so the
processes reach the mesh's first collective together: gloo gives a peer 30 s to connect).

Writes experiments/results/kg-shard-scale[-LABEL].{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import scale_curves  # noqa: E402  (the synthetic KG and the memory probes the scale curves use)

RESULTS = HERE / "results"
LEVELS = ("median", "p99", "p99.9", "max")


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array whose data starts 64-byte aligned, so that ``device_put(may_alias=True)`` may use
    it (and each shard of it that starts at a multiple of 64 rows) in place on the CPU instead of copying."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + size].view(dtype).reshape(shape)


def random_int8_rows(rows: int, dim: int, seed: int = 1, pool: int = 1 << 20, chunk: int = 1 << 22):
    """CompactRows ``int8`` of ``rows`` random unit vectors: codes int8 [rows, dim] and float32 scales (both
    64-byte aligned). A pool of ``pool`` random unit vectors is drawn and quantised once, and every row is a
    pool row picked at random (drawing and quantising 100M rows one by one took minutes of the run for
    nothing the tracer reads differently; a repeated row only makes equal scores, which are ties the
    tracers must break alike)."""
    from stem_jax.encoder.compact import CompactRows, quantise_int8

    rng = np.random.default_rng(seed)
    block = rng.standard_normal((min(pool, rows), dim), dtype=np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    pool_codes, pool_scale = quantise_int8(block)
    del block
    codes = aligned_empty((rows, dim), np.int8)
    scale = aligned_empty((rows,), np.float32)
    for lo in range(0, rows, chunk):
        pick = rng.integers(0, len(pool_codes), min(chunk, rows - lo))
        codes[lo:lo + len(pick)] = pool_codes[pick]
        scale[lo:lo + len(pick)] = pool_scale[pick]
    return CompactRows("int8", codes, scale, None, None)


def batches_for(degree: np.ndarray, dim: int, levels: tuple[str, ...] = LEVELS) -> list[dict]:
    """The traced batches: per level and batch size, host arrays (the same for every tracer)."""
    from stem_jax.trace.tracer import TraceBatch

    order = np.argsort(degree, kind="stable")
    anchors = {"median": order[len(order) // 2], "p99": order[int(len(order) * 0.99)],
               "p99.9": order[min(int(len(order) * 0.999), len(order) - 1)], "max": order[-1]}
    rng = np.random.default_rng(1)
    out = []
    for level in levels:
        for b in (1, 32):
            q = rng.standard_normal((b, 2, dim)).astype(np.float32)
            q /= np.linalg.norm(q, axis=-1, keepdims=True)
            steps = np.broadcast_to(np.asarray([[0, 1, 0], [1, 2, 1]], np.int32), (b, 2, 3)).copy()
            batch = TraceBatch(steps=steps, step_mask=np.ones((b, 2), bool), step_emb=q,
                               anchor=np.full(b, anchors[level], np.int32), anchor_score=np.ones(b, np.float32),
                               guidance=np.full((b, 64), -1, np.int32))
            out.append({"level": level, "b": b, "anchor": int(anchors[level]),
                        "anchor_degree": int(degree[anchors[level]]), "batch": batch})
    return out


def timed_calls(call, reps: int) -> tuple[list[np.ndarray], float, float]:
    """(outputs of the last call, first call s, p50 of ``reps`` warm calls s)."""
    import jax

    times = []
    out = None
    for _ in range(1 + reps):
        t0 = time.perf_counter()
        out = call()
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    return out, times[0], float(np.median(times[1:]))


def child(args: argparse.Namespace) -> dict:
    try:  # if memory runs out, the kernel kills this child first
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass
    import jax

    if args.process_id is not None:
        jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
    import jax.numpy as jnp

    from stem_jax.kg.index import build_index
    from stem_jax.shard import kg_mesh, local_result, shard_kg, trace_batch_sharded
    from stem_jax.trace.tracer import Hyper, KGArrays, TracerShapes, trace_batch

    size = args.child_size
    out: dict = {"requested_triples": size, "dim": args.dim, "row_format": "int8", "devices": jax.device_count(),
                 "processes": jax.process_count(), "local_devices": jax.local_device_count(),
                 "sources": scale_curves.source_digest("stem_jax/kg/index.py", "stem_jax/trace/tracer.py",
                                                       "stem_jax/shard/trace.py", "stem_jax/shard/partition.py")}
    mark = {}

    def note(name: str) -> None:
        mark[name] = round(scale_curves.rss_now_mb() / 1024, 3)
        out["vm_peak_gib"] = round((scale_curves.proc_mb("/proc/self/status", "VmPeak:") or 0) / 1024, 3)

    note("start")
    if args.gen_pass:
        began = time.perf_counter()
        for _ in scale_curves.synthetic_triples(size):
            pass
        out["generate_seconds"] = time.perf_counter() - began
    began = time.perf_counter()
    index = build_index(scale_curves.synthetic_triples(size))
    out["index_with_generation_seconds"] = time.perf_counter() - began
    if args.gen_pass:
        out["index_seconds"] = out["index_with_generation_seconds"] - out["generate_seconds"]
    out["index_peak_rss_gib"] = round(scale_curves.rss_mb() / 1024, 3)
    note("index")
    light = types.SimpleNamespace(triples=index.triples, csr_offsets=index.csr_offsets, csr_triples=index.csr_triples,
                                  num_triples=index.num_triples, num_entities=index.num_entities)
    out.update(triples=index.num_triples, entities=index.num_entities)
    del index
    gc.collect()
    triples = aligned_empty(light.triples.shape, np.int32)  # aligned, so the tracers use it in place
    triples[:] = light.triples
    light.triples = triples
    del triples
    note("index_arrays_only")
    out["index_arrays_gib"] = round(sum(a.nbytes for a in (light.triples, light.csr_offsets, light.csr_triples))
                                    / 2**30, 3)
    began = time.perf_counter()
    rows = random_int8_rows(light.num_triples, args.dim)
    out["rows_seconds"] = time.perf_counter() - began
    out["rows_gib"] = round(rows.nbytes / 2**30, 3)
    out["row_bytes"] = rows.bytes_per_row
    note("rows")
    degree = np.diff(light.csr_offsets)
    out.update(max_degree=int(degree.max()), p99_degree=float(np.percentile(degree, 99)))
    batches = batches_for(degree, args.dim, tuple(args.levels.split(",")))
    hyper = Hyper(tau=jnp.float32(0.5), theta=jnp.float32(0.0))
    configs = [(64, strategy == "precision") for strategy in args.strategies.split(",")]
    rows_out: list[dict] = []
    reference: dict[tuple, list[np.ndarray]] = {}

    def edges_of(res_nodes: np.ndarray, batch) -> float:
        step1 = res_nodes[:, 1]
        per_run = degree[batch.anchor] + np.where(step1 >= 0, degree[np.maximum(step1, 0)], 0).sum(axis=1)
        return float(per_run.mean())

    # one device; every process of a multi-process job traces it too, so all reach the mesh together
    began = time.perf_counter()
    kg = KGArrays.from_index(light, rows)
    jax.block_until_ready(kg)
    out["device_kg_seconds"] = time.perf_counter() - began
    note("one_device_kg")
    for frontier, precision in configs:
        for item in batches:
            shapes = TracerShapes(frontier=frontier)
            reps = args.reps if item["b"] == 1 else max(1, args.reps // 2)
            res, first, p50 = timed_calls(lambda: trace_batch(kg, item["batch"], hyper, shapes=shapes,  # noqa: B023
                                                              precision=precision), reps)  # noqa: B023
            res = [np.asarray(a) for a in res]
            reference[(frontier, precision, item["level"], item["b"])] = res
            edges = edges_of(res[0], item["batch"])
            row = {"tracer": "1 device", "strategy": "precision" if precision else "breadth", "F": frontier,
                   "level": item["level"], "anchor_degree": item["anchor_degree"], "batch": item["b"],
                   "first_s": round(first, 2), "p50_ms": round(1e3 * p50, 2),
                   "ms_per_question": round(1e3 * p50 / item["b"], 3), "edges_per_run": round(edges),
                   "ns_per_edge": round(1e9 * p50 / item["b"] / max(edges, 1), 1),
                   "load": os.getloadavg()[0]}
            rows_out.append(row)
            print(json.dumps(row), flush=True)
    kg = None  # its arrays are released before the sharded KG is built
    gc.collect()
    note("one_device_done")
    mesh = kg_mesh()
    began = time.perf_counter()
    skg, layout = shard_kg(light, rows, mesh)
    jax.block_until_ready(skg)
    out["shard_seconds"] = time.perf_counter() - began
    out["shard_layout"] = {"devices": layout.devices, "rows_per_shard": layout.rows_per_shard,
                           "incidence_per_shard": layout.incidence_per_shard,
                           "bytes_per_device_gib": round(layout.bytes_per_device(rows.bytes_per_row) / 2**30, 3)}
    note("sharded_kg")
    out["identical"] = True
    for frontier, precision in configs:
        for item in batches:
            shapes = TracerShapes(frontier=frontier)
            reps = args.reps if item["b"] == 1 else max(1, args.reps // 2)
            res, first, p50 = timed_calls(lambda: trace_batch_sharded(skg, item["batch"], hyper, mesh=mesh,  # noqa: B023
                                                                      shapes=shapes, precision=precision), reps)  # noqa: B023
            res = list(local_result(res))
            row = {"tracer": f"{jax.device_count()} devices" + (f", {jax.process_count()} processes"
                                                                if jax.process_count() > 1 else ""),
                   "strategy": "precision" if precision else "breadth", "F": frontier, "level": item["level"],
                   "anchor_degree": item["anchor_degree"], "batch": item["b"], "first_s": round(first, 2),
                   "p50_ms": round(1e3 * p50, 2), "ms_per_question": round(1e3 * p50 / item["b"], 3),
                   "edges_per_run": round(edges_of(res[0], item["batch"])), "load": os.getloadavg()[0]}
            row["ns_per_edge"] = round(1e9 * p50 / item["b"] / max(row["edges_per_run"], 1), 1)
            want = reference.get((frontier, precision, item["level"], item["b"]))
            if want is not None:
                row["identical"] = all(np.array_equal(a, b) for a, b in zip(want, res, strict=True))
                out["identical"] &= row["identical"]
            rows_out.append(row)
            print(json.dumps(row), flush=True)
    note("end")
    out["rss_gib"] = mark
    out["peak_rss_gib"] = round(scale_curves.rss_mb() / 1024, 3)
    out["traces"] = rows_out
    return out


def run_child(args: argparse.Namespace, size: int) -> dict:
    """One KG in its own process(es) under the memory cap; its result or an error."""
    cap = str(int(args.cap_gib * 2**30))
    base = ["prlimit", f"--as={cap}", "nice", "-n", "10", sys.executable, __file__, "--child-size", str(size),
            "--dim", str(args.dim), "--reps", str(args.reps), "--levels", args.levels, "--strategies", args.strategies, "--gen-pass" if args.gen_pass else "--no-gen-pass"]
    procs, outs = [], []
    count = args.processes
    port = None
    if count > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    for pid in range(count):
        out = Path(tempfile.gettempdir()) / f"kg-shard-{os.getpid()}-{size}-{pid}.json"
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={args.devices // count}",
               "JAX_PLATFORMS": "cpu"}
        cmd = base + ["--child-out", str(out)]
        if count > 1:
            cmd += ["--processes", str(count), "--process-id", str(pid), "--coordinator", f"127.0.0.1:{port}"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    results = []
    for proc, out in zip(procs, outs, strict=True):
        try:
            stdout, stderr = proc.communicate(timeout=args.limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            results.append({"requested_triples": size, "error": f"over the {args.limit}s limit",
                            "log": scale_curves.scrub_paths(stdout[-1500:])})
            continue
        if proc.returncode != 0 or not out.exists():
            killed = " (SIGKILL: e.g. the OOM killer)" if proc.returncode == -9 else ""
            results.append({"requested_triples": size, "error": scale_curves.scrub_paths(
                f"exit {proc.returncode}{killed}: {stderr[-1500:]}"), "log": scale_curves.scrub_paths(stdout[-1500:])})
        else:
            results.append(json.loads(out.read_text()))
            out.unlink()
    main_result = results[0]
    if count > 1:
        main_result["other_processes"] = results[1:]
    return main_result


def report(results: list[dict], args: argparse.Namespace, argv: list[str]) -> None:
    from stem_jax.eval.report import markdown_table, run_metadata, write_report

    meta = run_metadata()
    size_rows, trace_rows = [], []
    for r in results:
        if "error" in r:
            size_rows.append([f"{r['requested_triples']:,} requested", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                              "-", "-", r["error"][-200:].replace("\n", " ")])
            continue
        marks = r["rss_gib"]
        size_rows.append([f"{r['triples']:,}", f"{r['entities']:,}", r["max_degree"],
                          round(r.get("generate_seconds", float("nan")), 1), round(r["index_with_generation_seconds"], 1),
                          round(r.get("index_seconds", float("nan")), 1), r["index_peak_rss_gib"],
                          r["index_arrays_gib"], f"{r['rows_gib']} ({r['row_bytes']} B/row)",
                          round(r["shard_seconds"], 1), r["shard_layout"]["bytes_per_device_gib"],
                          f"{r['peak_rss_gib']} (" + ", ".join(f"{k} {v}" for k, v in marks.items()) + ")",
                          r.get("vm_peak_gib", "-")])
        for t in r["traces"]:
            trace_rows.append([f"{r['triples']:,}", t["tracer"], t["strategy"], t["F"], t["level"], t["anchor_degree"],
                               t["batch"], t["edges_per_run"], t["p50_ms"], t["ms_per_question"], t["ns_per_edge"],
                               t["first_s"], {True: "yes", False: "NO"}.get(t.get("identical"), "(reference)"),
                               round(t["load"], 1)])
    md = (f"KG sharded over devices at scale (CPU {meta['machine']}, {meta['cpu_count']} cores shared with other "
          f"jobs; commit {meta['commit']}, jax {meta['jax']}). Synthetic power-law KGs (experiments/scale_curves.py's "
          f"generator), triple rows random unit vectors of width {args.dim} stored as int8 codes + float32 scale; "
          f"{args.devices} forced host devices"
          + (f" over {args.processes} jax.distributed processes" if args.processes > 1 else "")
          + f"; each KG in a child under `prlimit --as={args.cap_gib}GiB` and `nice -n 10`.\n\nCommand: "
          f"`python experiments/kg_shard_scale.py {' '.join(argv)}`\n\n"
          "Size table: gen = one pass over the string generator alone; build_index+gen = build_index over a "
          "fresh one; build_index = the difference; index peak RSS = the child's high-water mark after "
          "build_index (imports and the index with its strings); index arrays = triples + CSR; rows = the "
          "compact table; shard s = shard_kg over every device; per device = one shard's rows, triples, "
          "incidence and offsets; peak RSS = the child's whole-run high-water mark, then the resident set at "
          "each phase (GiB); VmPeak = the child's peak address space (what the prlimit cap bounds).\n\n"
          + markdown_table(["triples", "entities", "max degree", "gen s", "build_index+gen s", "build_index s",
                            "index peak RSS GiB", "index arrays GiB", "rows GiB", "shard s", "per device GiB",
                            "peak RSS GiB (phases)", "VmPeak GiB"], size_rows)
          + "\n\nTrace latency (2-step chain from an anchor at each degree level; batch 1: p50 of warm calls, "
            "batch 32: p50 of the batch; ms/q = p50 / batch; edges/run = incident triples a run scores, mean over "
            "the batch; ns/edge = ms/q / edges/run; first s = the first call, compile included; identical = "
            "every output array equals the one-device tracer's on the same batch; load = 1-minute load "
            "average):\n\n"
          + markdown_table(["triples", "tracer", "strategy", "F", "anchor", "anchor degree", "batch", "edges/run",
                            "p50 ms", "ms/q", "ns/edge", "first s", "identical", "load"], trace_rows))
    payload = {"meta": meta, "argv": argv, "results": results, "dim": args.dim, "devices": args.devices,
               "processes": args.processes}
    name = f"kg-shard-scale-{args.label}" if args.label else "kg-shard-scale"
    paths = write_report(RESULTS, name, payload, md)
    print(md)
    print(f"wrote {paths[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--levels", default=",".join(LEVELS), help="anchor degree levels to trace from")
    parser.add_argument("--strategies", default="breadth,precision", help="strategies traced (F = 64)")
    parser.add_argument("--devices", type=int, default=8, help="forced host devices in all")
    parser.add_argument("--processes", type=int, default=1, help="jax.distributed processes sharing the devices")
    parser.add_argument("--gen-pass", dest="gen_pass", action=argparse.BooleanOptionalAction, default=True,
                        help="time one pass of the string generator alone (build_index's own time is the rest)")
    parser.add_argument("--cap-gib", dest="cap_gib", type=float, default=16.0, help="prlimit --as per child")
    parser.add_argument("--min-free-gib", dest="min_free_gib", type=float, default=18.0,
                        help="MemAvailable needed before a KG above 10M triples")
    parser.add_argument("--limit", type=int, default=3000, help="seconds per KG")
    parser.add_argument("--label", default="")
    parser.add_argument("--child-size", dest="child_size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", dest="child_out", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_size:
        result = child(args)
        Path(args.child_out).write_text(json.dumps(result))
        return 0
    argv = sys.argv[1:] if argv is None else argv
    results = []
    for size in sorted(int(s) for s in args.sizes.split(",") if s):
        available = (scale_curves.mem_available_mb() or 0) / 1024
        if size > 10_000_000 and available < args.min_free_gib:
            results.append({"requested_triples": size, "error": f"skipped: MemAvailable {available:.1f} GiB < "
                                                                f"{args.min_free_gib} GiB"})
            print(results[-1], flush=True)
            continue
        began = time.perf_counter()
        results.append(run_child(args, size))
        results[-1]["wall_seconds"] = time.perf_counter() - began
        results[-1]["mem_available_before_gib"] = round(available, 1)
        print(size, {k: v for k, v in results[-1].items() if k != "traces"}, flush=True)
    report(results, args, argv)
    return 0 if all(r.get("identical", False) for r in results if "error" not in r) else 1


if __name__ == "__main__":
    raise SystemExit(main())

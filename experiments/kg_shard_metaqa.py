"""Does STEM answer MetaQA identically with the KG sharded over devices (and over processes)?

Command (repo root; MetaQA index and pattern planner ready):

    STEM_DATA_DIR=../shared/data nice python experiments/kg_shard_metaqa.py --limit 300
    STEM_DATA_DIR=../shared/data nice python experiments/kg_shard_metaqa.py --limit 100 --processes 2

The engine answers the first ``--limit`` test questions per hop twice in one process with ``--devices``
forced host devices (8): first as it does today (batches split over the local devices, the KG replicated),
then with the STEM holder's tracing collaborator replaced by :class:`stem_jax.shard.KGShardedTracing` (the KG
cut over every device by :func:`stem_jax.shard.shard_kg`, each device scoring the triples it holds, the
candidates merged with collectives), and compares every record: answers in order, answer scores, evidence
triples, evidence count, coverage, overflow and θ. ``--processes 2`` runs it as a ``jax.distributed`` job
of 2 processes with ``--devices`` / 2 devices each, the mesh spanning both; each process answers the same
questions (the sharded trace is one SPMD program) and compares its own records.

The swap is the one line a holder needs to opt in (``method.resources.sharding = KGShardedTracing(...)``, what
``--engine.kg_shards`` sets up): the trace stage calls ``res.sharding.trace(...)`` for every traced batch and
``anchor``/``round_up`` for the rest.

Writes experiments/results/kg-shard-metaqa[-LABEL].{json,md}; exits 1 if any record differs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from predictions_identity import COMPARED  # noqa: E402  (this script's folder is first on sys.path)


def child(args: argparse.Namespace) -> dict:
    import jax

    if args.process_id is not None:
        jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
    from stem_jax.engine import Engine
    from stem_jax.shard import KGShardedTracing, kg_mesh, shard_kg

    engine = Engine.open("metaqa", split="test", limit=args.limit, planner=args.planner)
    questions = list(engine.dataset.questions)
    began = time.perf_counter()
    reference = engine.retrieve(questions)
    reference_s = time.perf_counter() - began
    res = engine.method("stem").resources
    mesh = kg_mesh()
    began = time.perf_counter()
    kg, layout = shard_kg(res.index, res.embeddings.trace_rows(), mesh)
    shard_s = time.perf_counter() - began
    res.sharding = KGShardedTracing(kg, mesh, res.sharding)
    began = time.perf_counter()
    sharded = engine.retrieve(questions)
    sharded_s = time.perf_counter() - began
    differ = []
    for question, a, b in zip(questions, reference, sharded, strict=True):
        fields = [f for f in COMPARED if a.record.get(f) != b.record.get(f)]
        if fields:
            differ.append({"qid": question.qid, "fields": fields})
    trace_ms = [sum(r.record.get("ms", {}).get("trace", 0.0) for r in rs) for rs in (reference, sharded)]
    return {"questions": len(questions), "hops": sorted({q.hops for q in questions}), "differ": differ,
            "identical": not differ, "devices": jax.device_count(), "local_devices": jax.local_device_count(),
            "processes": jax.process_count(), "process": jax.process_index(),
            "triples": int(res.index.num_triples), "row_format": getattr(res.embeddings.trace_rows(), "format",
                                                                        "float16"),
            "rows_per_shard": layout.rows_per_shard, "shard_seconds": round(shard_s, 2),
            "reference_seconds": round(reference_s, 1), "sharded_seconds": round(sharded_s, 1),
            "reference_trace_ms_sum": round(trace_ms[0], 1), "sharded_trace_ms_sum": round(trace_ms[1], 1),
            "answered": sum(bool(r.record.get("prediction")) for r in reference)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=300, help="test questions per hop")
    parser.add_argument("--planner", default="pattern")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--label", default="")
    parser.add_argument("--child-out", dest="child_out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_out:
        Path(args.child_out).write_text(json.dumps(child(args)))
        return 0
    argv = sys.argv[1:] if argv is None else argv
    import tempfile

    port = None
    if args.processes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={args.devices // args.processes}",
           "JAX_PLATFORMS": "cpu"}
    procs, outs = [], []
    for pid in range(args.processes):
        out = Path(tempfile.gettempdir()) / f"kg-shard-metaqa-{os.getpid()}-{pid}.json"
        cmd = [sys.executable, __file__, "--limit", str(args.limit), "--planner", args.planner, "--child-out", str(out)]
        if args.processes > 1:
            cmd += ["--processes", str(args.processes), "--process-id", str(pid), "--coordinator", f"127.0.0.1:{port}"]
        procs.append(subprocess.Popen(cmd, env=env))
        outs.append(out)
    codes = [p.wait() for p in procs]
    if any(codes):
        print(f"child exit codes {codes}", file=sys.stderr)
        return 2
    results = [json.loads(o.read_text()) for o in outs]
    for o in outs:
        o.unlink()
    from stem_jax.eval.report import markdown_table, run_metadata, write_report

    meta = run_metadata()
    rows = [[r["process"], r["questions"], ",".join(map(str, r["hops"])), r["answered"], r["triples"], r["row_format"],
             f"{r['devices']} ({r['local_devices']} local)", r["rows_per_shard"], r["reference_seconds"],
             r["sharded_seconds"], r["reference_trace_ms_sum"], r["sharded_trace_ms_sum"],
             "yes" if r["identical"] else f"NO ({len(r['differ'])} differ)"] for r in results]
    md = (f"STEM on MetaQA test (first {args.limit} questions per hop, {args.planner} planner) with the KG sharded "
          f"over devices against today's engine in the same process (CPU {meta['machine']}, {meta['cpu_count']} "
          f"cores shared; commit {meta['commit']}, jax {meta['jax']}).\n\nCommand: "
          f"`python experiments/kg_shard_metaqa.py {' '.join(argv)}`\n\n"
          "reference = batches split over the local devices, KG replicated (the engine's default); sharded = "
          "the same engine with its holder's sharding = KGShardedTracing over every device of the job (each device "
          "holds rows_per_shard triples); s = wall time of engine.retrieve over the sample (planning, encoding, "
          "anchoring, tracing, answers), trace ms = the records' trace stage summed; identical = prediction, "
          "scores, evidence, evidence count, coverage, overflow and θ equal for every question.\n\n"
          + markdown_table(["process", "questions", "hops", "answered", "KG triples", "rows", "devices",
                            "rows/shard", "reference s", "sharded s", "reference trace ms", "sharded trace ms",
                            "identical"], rows))
    name = "kg-shard-metaqa" + (f"-{args.label}" if args.label else "")
    paths = write_report(HERE / "results", name, {"meta": meta, "argv": argv, "results": results}, md)
    print(md)
    print(f"wrote {paths[0]}")
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

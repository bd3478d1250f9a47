"""Does STEM answer the MetaQA test split identically with the KG sharded over devices and processes as on one
device? Each side is its own process (or ``jax.distributed`` job), written once to a predictions file and
compared record by record; interrupted sides resume.

Command (repo root; MetaQA index and pattern planner ready):

    STEM_DATA_DIR=../shared/data nice -n 15 python experiments/kg_shard_metaqa_split.py --per-hop 1000 \\
        --rev HEAD --label sample1000

``--per-hop N`` takes N questions of each hop spread evenly over the split (0, the default: the whole split,
38,851 questions). The sides (``--sides``, all three by default):

* ``one``: the engine as `stem-jax eval` runs it, in a process with one CPU device (the reference);
* ``mesh8``: one process with ``--devices`` forced host devices and ``--engine.kg_shards`` = that count (the
  KG cut over every device, each scoring the triples it holds, candidates merged with collectives);
* ``proc2``: a ``jax.distributed`` job of 2 processes with ``--devices`` / 2 devices each, the KG cut over all
  ``--devices`` (both processes answer every question; each writes and is compared on its own records).

Every side answers the same chunks of ``--chunk`` questions (same order, so the same batches) and appends each
finished chunk's records to ``runs/kg-shard-metaqa-split/<label>/<side>[-p<i>].jsonl`` with its seconds,
compile count and compile seconds (JAX's compile events), so a killed run keeps what it computed and the next
one starts at the first unfinished chunk. ``--rev`` runs every side from a checkout of that commit
(``git worktree`` under ``runs/kg-shard-metaqa-split/src-<sha>``), so edits to the shared tree during a run do
not reach it. Compared per question: prediction, scores, evidence, evidence count, coverage, overflow, θ.

Writes experiments/results/kg-shard-metaqa-split-<label>.{json,md}; exits 1 if any record differs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if "STEM_SPLIT_CHILD" not in os.environ:  # a child imports stem_jax from its checkout (PYTHONPATH), never this tree
    sys.path.insert(0, str(ROOT))
sys.path.append(str(HERE))  # the sibling scripts (a child runs with -P, which leaves this folder off sys.path)

from predictions_identity import COMPARED, source_tree  # noqa: E402

SIDES = ("one", "mesh8", "proc2")


def select(questions: list, per_hop: int) -> list:
    """``per_hop`` questions of each hop spread evenly over the split (0: all), the hops interleaved (ordered by
    position within their hop as a fraction), so every prefix of the chunks is a stratified sample: an
    interrupted side has compared questions of every hop."""
    from stem_jax.data.sampling import sample_per_hop

    chosen = sample_per_hop(questions, per_hop or None, rule="spread")
    size = Counter(q.hops for q in chosen)
    seen: Counter = Counter()
    keyed = []
    for q in chosen:  # the k-th chosen question of its hop sits at (k + 0.5) / n of the hop
        keyed.append(((seen[q.hops] + 0.5) / size[q.hops], q))
        seen[q.hops] += 1
    return [q for _, q in sorted(keyed, key=lambda kq: (kq[0], kq[1].hops or 0))]


def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def read_records(path: Path) -> dict[str, dict]:
    """qid -> record of a side's file (a half-written last line from a kill is skipped)."""
    records: dict[str, dict] = {}
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        for record in entry.get("records", []):
            records[record["id"]] = record
    return records


def read_chunks(path: Path) -> list[dict]:
    """The chunk entries of a side's file, without their records."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            out.append({k: v for k, v in entry.items() if k != "records"})
    return out


def child(args: argparse.Namespace) -> int:
    import jax

    if args.process_id is not None:
        jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
    import stem_jax
    from stem_jax.config import StemConfig, apply_overrides
    from stem_jax.engine import Engine

    source = Path(stem_jax.__file__).resolve().parent.parent
    if args.source and source != Path(args.source).resolve():
        raise SystemExit(f"stem_jax imports from {source}, not from {args.source}")
    compiles = {"count": 0, "seconds": 0.0}

    def on_event(event: str, seconds: float, **_: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles["count"] += 1
            compiles["seconds"] += seconds

    jax.monitoring.register_event_duration_secs_listener(on_event)
    overrides = {"engine.kg_shards": str(jax.device_count())} if args.side != "one" else {}
    config = apply_overrides(StemConfig(), overrides)
    began = time.perf_counter()
    engine = Engine.open("metaqa", split="test", planner=args.planner, config=config)
    questions = select(list(engine.dataset.questions), args.per_hop)
    done = set(json.loads(Path(args.done).read_text()))
    out = Path(args.out)
    with out.open("a") as f:
        f.write(json.dumps({"open_seconds": round(time.perf_counter() - began, 2), "devices": jax.device_count(),
                            "local_devices": jax.local_device_count(), "processes": jax.process_count(),
                            "rss_mib": _rss_mib(), "expected": [q.qid for q in questions]}) + "\n")
    batches = chunks(questions, args.chunk)
    print(f"{args.side} p{jax.process_index()}: {len(batches) - len(done)} of {len(batches)} chunks to run",
          flush=True)
    for number, batch in enumerate(batches):
        if number in done or (args.upto and number >= args.upto):
            continue
        before = dict(compiles)
        began = time.perf_counter()
        answers = engine.retrieve(batch)
        seconds = time.perf_counter() - began
        records = [{"id": a.question.qid, "hops": a.question.hops,
                    **{k: a.record.get(k) for k in COMPARED}, "ms": a.record.get("ms", {})} for a in answers]
        entry = {"chunk": number, "questions": len(batch), "seconds": round(seconds, 2),
                 "compiles": compiles["count"] - before["count"],
                 "compile_seconds": round(compiles["seconds"] - before["seconds"], 2), "rss_mib": _rss_mib(),
                 "records": records}
        with out.open("a") as f:  # one write per chunk: a kill loses at most the chunk in flight
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(f"{args.side} p{jax.process_index()} chunk {number + 1}/{len(batches)}: {len(batch)} questions "
              f"{seconds:.1f}s, {entry['compiles']} compiles {entry['compile_seconds']}s, rss {entry['rss_mib']} MiB",
              flush=True)
    return 0


def _rss_mib() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def side_files(folder: Path, side: str) -> list[Path]:
    return [folder / f"{side}-p{i}.jsonl" for i in range(2)] if side == "proc2" else [folder / f"{side}.jsonl"]


def run_side(args: argparse.Namespace, side: str, folder: Path, tree: Path) -> int:
    files = side_files(folder, side)
    entries = [read_chunks(p) for p in files]
    done = sorted(set.intersection(*({e["chunk"] for e in es if "chunk" in e} for es in entries)))
    expected = [e["expected"] for es in entries for e in es if "expected" in e]
    wanted = len(chunks(expected[-1], args.chunk)) if expected else None
    if wanted is not None and args.upto:
        wanted = min(wanted, args.upto)
    if wanted is not None and len([c for c in done if c < wanted]) == wanted:
        print(f"{side}: all {len(done)} chunks on file", flush=True)
        return 0
    done_path = folder / f"{side}-done.json"
    done_path.write_text(json.dumps(done))
    processes = 2 if side == "proc2" else 1
    devices = 1 if side == "one" else args.devices // processes
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "STEM_SPLIT_CHILD": "1", "PYTHONPATH": str(tree),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    port = None
    if processes > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    script = tree / "experiments" / Path(__file__).name
    if not script.exists():
        script = Path(__file__)
    procs = []
    for pid, path in enumerate(files):
        cmd = [sys.executable, "-P", str(script), "--child", "--side", side, "--per-hop", str(args.per_hop),
               "--upto", str(args.upto),
               "--chunk", str(args.chunk), "--planner", args.planner, "--done", str(done_path), "--out", str(path),
               "--source", str(tree)]
        if processes > 1:
            cmd += ["--processes", str(processes), "--process-id", str(pid), "--coordinator", f"127.0.0.1:{port}"]
        procs.append(subprocess.Popen(cmd, env=env, cwd=tree))
    return max(p.wait() for p in procs)


def summarize(path: Path) -> dict:
    entries = read_chunks(path)
    chunk_rows = [e for e in entries if "chunk" in e]
    opens = [e for e in entries if "open_seconds" in e]
    # the first chunk also pays tracing and cache loads; later chunks are the steady state
    steady = sorted((e["seconds"] - e["compile_seconds"]) / e["questions"] for e in chunk_rows[1:] or chunk_rows)
    return {"chunks": len(chunk_rows), "questions": sum(e["questions"] for e in chunk_rows),
            "seconds": round(sum(e["seconds"] for e in chunk_rows), 1),
            "compiles": sum(e["compiles"] for e in chunk_rows),
            "compile_seconds": round(sum(e["compile_seconds"] for e in chunk_rows), 1),
            "steady_ms_per_question": round(1000 * steady[len(steady) // 2], 1) if steady else None,
            "first_chunk_seconds": chunk_rows[0]["seconds"] if chunk_rows else None,
            "open_seconds": opens[-1]["open_seconds"] if opens else None,
            "devices": opens[-1]["devices"] if opens else None,
            "local_devices": opens[-1]["local_devices"] if opens else None,
            "peak_rss_mib": max([e.get("rss_mib", 0) for e in entries] or [0]),
            "runs": len(opens)}


def compare(reference: dict[str, dict], other: dict[str, dict], expected: list[str]) -> dict:
    differ, missing = [], []
    for qid in expected:
        a, b = reference.get(qid), other.get(qid)
        if a is None or b is None:
            missing.append(qid)
            continue
        fields = [f for f in COMPARED if a.get(f) != b.get(f)]
        if fields:
            differ.append({"qid": qid, "fields": fields})
    return {"compared": len(expected) - len(missing), "missing": len(missing), "differ": differ}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-hop", dest="per_hop", type=int, default=0, help="questions per hop (0: all)")
    parser.add_argument("--chunk", type=int, default=512, help="questions per engine.retrieve call and file entry")
    parser.add_argument("--upto", type=int, default=0, help="run only the first N chunks (0: all); rerun to go on")
    parser.add_argument("--planner", default="pattern")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--rev", default="HEAD", help="the commit every side runs (a worktree of it)")
    parser.add_argument("--label", default="")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "kg-shard-metaqa-split"))
    parser.add_argument("--report-only", dest="report_only", action="store_true",
                        help="compare what the files hold; run nothing")
    parser.add_argument("--note", action="append", default=[], help="a line for the report's Notes (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--done", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    argv = sys.argv[1:] if argv is None else argv
    sides = [s for s in args.sides.split(",") if s]
    if "one" not in sides or any(s not in SIDES for s in sides):
        raise SystemExit(f"--sides: 'one' and any of {SIDES[1:]}")
    label = args.label or (f"per-hop{args.per_hop}" if args.per_hop else "full")
    sha, tree = source_tree(args.rev, Path(args.runs), working_tree=False)
    folder = Path(args.runs) / f"{label}-{sha}"
    folder.mkdir(parents=True, exist_ok=True)

    wall = {}
    if not args.report_only:
        for side in sides:
            began = time.perf_counter()
            code = run_side(args, side, folder, tree)
            wall[side] = round(time.perf_counter() - began, 1)
            if code:
                print(f"{side}: a process exited {code}; what it finished is on file (rerun to resume)",
                      file=sys.stderr)
                return 2
    return report(args, argv, sides, folder, sha, label, wall)


def report(args, argv, sides, folder, sha, label, wall) -> int:
    from stem_jax.eval.report import markdown_table, run_metadata, write_report

    meta = {**run_metadata(), "commit": sha}
    reference = read_records(side_files(folder, "one")[0])
    heads = [e["expected"] for e in read_chunks(side_files(folder, "one")[0]) if "expected" in e]
    questions = heads[-1] if heads else []
    hops = sorted({r["hops"] for r in reference.values()})
    rows, results = [], {}
    for side in sides:
        for i, path in enumerate(side_files(folder, side)):
            summary = summarize(path)
            name = side if side != "proc2" else f"proc2 p{i}"
            records = reference if side == "one" else read_records(path)
            stages: dict[str, float] = {}
            for record in records.values():
                for stage, ms in (record.get("ms") or {}).items():
                    stages[stage] = stages.get(stage, 0.0) + float(ms)
            summary["stage_seconds"] = {k: round(v / 1000, 1) for k, v in stages.items()}
            result = {**summary, **({} if side == "one" else compare(reference, records, questions))}
            del records
            if side == "one":
                result.update(compared=len(reference), missing=len(questions) - len(reference), differ=[])
            results[name] = result
            verdict = ("reference" if side == "one" else
                       ("yes" if not result["differ"] and not result["missing"] else
                        f"NO ({len(result['differ'])} differ, {result['missing']} missing)"))
            rows.append([name, f"{summary['devices']} ({summary['local_devices']} local)", result["compared"],
                         summary["seconds"], summary["compiles"], summary["compile_seconds"],
                         summary["steady_ms_per_question"], summary["stage_seconds"].get("trace", "-"),
                         summary["open_seconds"], summary["peak_rss_mib"],
                         wall.get(side, "-"), verdict])
    scope = (f"the whole test split ({len(questions)} questions)" if not args.per_hop else
             f"{args.per_hop} questions per hop spread evenly over the test split ({len(questions)} questions)")
    md = (f"STEM on MetaQA {scope}, hops {','.join(map(str, hops))}, {args.planner} planner: one device against "
          f"the KG sharded over {args.devices} devices in one process and over 2 `jax.distributed` processes "
          f"(CPU {meta['machine']}, {meta['cpu_count']} cores shared, nice 15; every side ran commit {sha}, "
          f"jax {meta['jax']}).\n\nCommand: `python experiments/kg_shard_metaqa_split.py {' '.join(argv)}`\n\n"
          f"one = `Engine.open('metaqa')` with one CPU device, as `stem-jax eval`; mesh8 = "
          f"`--engine.kg_shards {args.devices}` with {args.devices} forced host devices; proc2 = the same over 2 "
          f"processes x {args.devices // 2} devices (each process answers every question and is compared on its "
          "own records). Each side answers the same chunks of "
          f"{args.chunk} questions. s = engine.retrieve seconds summed over the chunks; compiles = XLA backend "
          "compiles (persistent compile cache on, so a rerun may load instead), compile s = their seconds; "
          "steady ms/q = (chunk s - compile s) per question, the median over the chunks after the first; trace s = the records' trace stage summed; open s = Engine.open; wall s = "
          "the side's process wall time in the last invocation (resumed runs: only what it ran); identical = "
          "prediction, scores, evidence, evidence count, coverage, overflow and θ equal for every question.\n\n"
          + markdown_table(["side", "devices", "questions", "s", "compiles", "compile s", "steady ms/q", "trace s", "open s",
                            "peak RSS MiB", "wall s", "identical to one device"], rows))
    differ = {name: r["differ"][:50] for name, r in results.items() if r["differ"]}
    if differ:
        md += "\n\nFirst differences: " + json.dumps(differ)[:3000]
    if args.note:
        md += "\n\nNotes:\n\n" + "\n".join(f"- {line}" for line in args.note)
    name = "kg-shard-metaqa-split-" + label
    paths = write_report(HERE / "results", name, {"meta": meta, "argv": argv, "results": results}, md)
    print(md)
    print(f"wrote {paths[0]}")
    ok = all(not r["differ"] and not r["missing"] for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

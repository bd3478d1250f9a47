"""Several processes (hosts) scoring one split: ``eval --num-processes N --process-id I``, then ``score``.

Each process joins the job (flags, or ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` /
``JAX_PROCESS_ID``) as ``jax.distributed.initialize`` would, except that JAX's coordination service
runs in a helper process that process 0 starts (:mod:`stem_jax.coordination`), so killing any
process, process 0 included, leaves the others running. Each shards its own batches over its local
devices (:mod:`stem_jax.eval.sharding`) and evaluates its deterministic share of the questions (every
N-th, starting at its id) into its own run folder ``<out>/shard-<I>-of-<N>/`` (locked,
fingerprinted and resumable like any run folder, so resume works per shard). ``stem-jax score
--out <out>`` checks that every shard is complete and ran the same settings, merges them into
``<out>/predictions.jsonl`` in the split's order and scores it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from stem_jax.coordination import join
from stem_jax.errors import StemError

SHARD = re.compile(r"shard-(\d+)-of-(\d+)$")


def add_distributed_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("several processes (hosts): each evaluates every N-th question")
    group.add_argument("--num-processes", dest="num_processes", type=int, default=None,
                       help="processes in the job (default $JAX_NUM_PROCESSES, else 1); merge with `stem-jax score`")
    group.add_argument("--process-id", dest="process_id", type=int, default=None,
                       help="this process's id, 0..N-1 (default $JAX_PROCESS_ID)")
    group.add_argument("--coordinator", default=None,
                       help="host:port of process 0 (default $JAX_COORDINATOR_ADDRESS)")
    group.add_argument("--worker-share", dest="worker_share", type=_share, default=None, help=argparse.SUPPRESS)
    group.add_argument("--heartbeat-timeout", dest="heartbeat_timeout", type=int, default=100, metavar="SECONDS",
                       help="a process silent this long counts as dead; the others, done, wait that long for it "
                       "before exiting (default 100, JAX's)")


def _share(value: str) -> tuple[int, int]:
    """``I/N`` (the share ``eval --workers`` gives each worker process) as (I, N)."""
    try:
        pid, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, got {value!r}") from None
    if not 0 <= pid < count:
        raise argparse.ArgumentTypeError(f"expected 0 <= I < N, got {value!r}")
    return pid, count


def join_processes(args: argparse.Namespace) -> tuple[int, int]:
    """(process id, process count) after ``jax.distributed.initialize``; (0, 1) for a single process."""
    local = getattr(args, "worker_share", None)
    if local is not None:  # a worker process of `eval --workers N` (stem_jax.cli.workers): no coordination service
        pid, count = local
        return pid, count
    env = os.environ
    count = args.num_processes if getattr(args, "num_processes", None) is not None else int(env.get("JAX_NUM_PROCESSES", 1))
    if count < 1:
        raise StemError(f"--num-processes must be 1 or more, got {count}")
    if count == 1:
        return 0, 1
    pid = args.process_id if getattr(args, "process_id", None) is not None else env.get("JAX_PROCESS_ID")
    coordinator = getattr(args, "coordinator", None) or env.get("JAX_COORDINATOR_ADDRESS")
    if pid is None or coordinator is None:
        raise StemError(f"--num-processes {count} needs --process-id and --coordinator (or $JAX_PROCESS_ID and "
                        "$JAX_COORDINATOR_ADDRESS)\n  how to fix: e.g. --coordinator host0:1234 --process-id 0 on host0, "
                        "--process-id 1 on host1")
    pid = int(pid)
    if not 0 <= pid < count:
        raise StemError(f"--process-id must be in 0..{count - 1}, got {pid}")
    heartbeat = getattr(args, "heartbeat_timeout", None) or 100
    if heartbeat < 1:
        raise StemError(f"--heartbeat-timeout must be 1 second or more, got {heartbeat}")
    # Each process scores its own share into its own shard with no collectives between processes, so
    # one process dying must not take the others down. JAX's coordination service runs in a helper
    # process of its own (stem_jax.coordination), not inside process 0, so killing any eval process,
    # process 0 included, leaves the service to the others; at exit each waits for the peers still
    # alive, and a dead one drops out after --heartbeat-timeout.
    join(coordinator, pid, count, heartbeat=heartbeat)
    return pid, count


def shard_folder(out: Path, pid: int, count: int) -> Path:
    return Path(out) / f"shard-{pid}-of-{count}"


def share(questions: list[Any], pid: int, count: int) -> list[Any]:
    """Process ``pid``'s deterministic share: questions pid, pid + count, pid + 2·count, ..."""
    return list(questions[pid::count])


def merge_shards(out: Path) -> tuple[Path, dict[str, Any]]:
    """Merge ``out/shard-*-of-N/predictions.jsonl`` into ``out/predictions.jsonl`` (split order).

    Every shard must be complete for the same run: the same settings (``fingerprint.json``), the same
    question selection (``run.json``: a rerun with another ``--limit`` makes a new selection), and a
    record for every question of its share; together the shards must hold exactly that selection.
    A stale, interrupted, foreign or damaged shard is refused with the process id to rerun.

    Raises:
      StemError: no shards, shards of different process counts, an id out of range, a missing,
        stale, incomplete or damaged shard, or shards of different settings.
    """
    from stem_jax.atomic import write_text_atomic
    from stem_jax.eval.run_folder import ids_digest, read_predictions, read_run

    out = Path(out)
    shards = sorted((p for p in out.glob("shard-*-of-*") if SHARD.match(p.name) and p.is_dir()),
                    key=lambda p: (int(SHARD.match(p.name).group(2)), int(SHARD.match(p.name).group(1))))
    if not shards:
        raise StemError(f"no shard folders (shard-<i>-of-<n>) in {out}\n  how to fix: run `stem-jax eval "
                        f"--num-processes N --process-id I --out {out}` on every process first")
    counts = sorted({int(SHARD.match(p.name).group(2)) for p in shards})
    if len(counts) > 1:
        raise StemError(f"{out} holds shards of runs with different process counts {counts} "
                        f"({', '.join(p.name for p in shards)})\n"
                        "  how to fix: keep one run's shard folders (move the others away), or use a new --out")
    count = counts[0]
    extra = [p.name for p in shards if int(SHARD.match(p.name).group(1)) >= count]
    if extra:
        raise StemError(f"{out}: {', '.join(extra)} names a process id outside 0..{count - 1}\n"
                        "  how to fix: remove that folder (it is not part of this run)")
    missing = sorted(set(range(count)) - {int(SHARD.match(p.name).group(1)) for p in shards})
    if missing:
        raise StemError(f"{out}: shards {missing} of {count} are missing\n  how to fix: run those process ids")

    def rerun(p: Path) -> str:
        return (f"  how to fix: rerun process {SHARD.match(p.name).group(1)} (--process-id "
                f"{SHARD.match(p.name).group(1)}) with the same flags as the others (it resumes), then score again")

    prints = []
    for p in shards:
        try:
            prints.append(json.loads((p / "fingerprint.json").read_bytes())["fingerprint"])
        except (OSError, ValueError, KeyError, TypeError):
            raise StemError(f"{p}: fingerprint.json is missing or unreadable, so its settings are unknown\n"
                            + rerun(p)) from None
    odd = [p.name for p, f in zip(shards, prints, strict=True) if f != prints[0]]
    if odd:
        raise StemError(f"{out}: the shards ran with different settings ({', '.join(odd)} differ from "
                        f"{shards[0].name} in fingerprint.json)\n  how to fix: rerun the odd shards with the same flags")
    runs = []
    for p in shards:
        run = read_run(p)
        if run is None or not isinstance(run.get("selection"), dict):
            raise StemError(f"{p}: run.json is missing or unreadable (a shard never started, or written by an "
                            "older stem-jax), so its question set is unknown\n" + rerun(p))
        runs.append(run)
    odd = [(p, r) for p, r in zip(shards, runs, strict=True) if r["selection"] != runs[0]["selection"]]
    if odd:
        p, r = odd[0]
        raise StemError(f"{out}: {p.name} was last run over another question selection ({r['selection'].get('questions')} "
                        f"questions) than {shards[0].name} ({runs[0]['selection'].get('questions')}): a rerun with "
                        "other --limit/--hops/--split where not every process finished\n" + rerun(p))
    order = [r["questions"][row] for row in range(max(len(r["questions"]) for r in runs))
             for r in runs if row < len(r["questions"])]  # round robin restores the split's order
    selection = runs[0]["selection"]
    if len(order) != selection.get("questions") or ids_digest(order) != selection.get("ids_sha256"):
        raise StemError(f"{out}: the shards' questions ({len(order)}) are not the {selection.get('questions')} "
                        "questions of their selection, shared out by process id\n"
                        "  how to fix: rerun every process with the same flags, then score again")
    records: dict[str, dict] = {}
    totals = []
    for p, run in zip(shards, runs, strict=True):
        found, problems, _ = read_predictions(p / "predictions.jsonl", log=None)
        wanted = run["questions"]
        absent = [qid for qid in wanted if qid not in found]
        if problems or absent:
            what = (f"{len(wanted) - len(absent)} of its {len(wanted)} questions have a record" if absent else
                    f"{len(problems)} damaged line(s), first: {problems[0].split(': ', 1)[-1]}")
            raise StemError(f"{p} is incomplete: {what} (the process was interrupted or is still running)\n"
                            + rerun(p))
        records.update((qid, found[qid]) for qid in wanted)
        totals.append({"shard": p.name, "records": len(wanted), "questions": len(wanted)})
    path = out / "predictions.jsonl"
    write_text_atomic(path, "".join(json.dumps(records[qid], ensure_ascii=False) + "\n" for qid in order))
    write_text_atomic(out / "fingerprint.json", (shards[0] / "fingerprint.json").read_text())
    return path, {"shards": totals, "processes": count}


def add_score_parser(sub) -> None:
    p = sub.add_parser("score", help="merge the shards of a multi-process eval and score them",
                       description="Merge <out>/shard-<i>-of-<n>/predictions.jsonl (written by `stem-jax eval "
                       "--num-processes N`) into <out>/predictions.jsonl and write metrics.json/.md from it.")
    p.add_argument("--out", type=Path, required=True, help="the run folder given to every process")
    p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
    score_run(Path(args.out), getattr(args, "argv", []))
    return 0


def score_run(out: Path, argv: list[str]) -> dict[str, Any]:
    """Merge ``out``'s shards (:func:`merge_shards`), score them, print the table and write ``metrics.json``/``.md``."""
    from stem_jax.cli.report import run_metadata, summary_table, write_report
    from stem_jax.eval.scoring import score_predictions

    started = time.perf_counter()
    path, info = merge_shards(out)
    summary = score_predictions(path)
    table = summary_table(summary)
    print(f"merged {info['processes']} complete shards ({summary['overall']['n']} questions) into {path}:\n\n{table}")
    payload = {"meta": run_metadata(), "command": "stem-jax " + " ".join(argv), **info,
               **summary, "wall_seconds": time.perf_counter() - started}
    paths = write_report(Path(out), "metrics", payload, table)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return summary

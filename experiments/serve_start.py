"""How long `stem-jax serve` takes from start to its first answer, on a cold and on a warm compilation cache.

Command (repo root; the KG's index, embeddings and trained planner already in the cache):

    STEM_DATA_DIR=../shared/data python experiments/serve_start.py --data-dir ../shared/data/webqsp-r \\
        --compile-cache runs/serve-start-xla-webqsp-r --name serve-start-webqsp-r-staged

Starts ``stem-jax serve --dataset files --data-dir DIR --split dev --port 0`` twice with ``STEM_COMPILE_CACHE`` set
to ``--compile-cache``: first emptied (a cold start: every program compiles), then as the first start left it (a
warm restart: programs are read back). For each start it records the seconds from launch to the "serving" line,
to the answer of the first request (``POST /v1/ask`` with the last question of the split that has a topic entity:
one the warm-up does not answer), and, with ``--warm-up staged`` (the default), to ``GET /healthz`` saying
``ready`` (the background warm-up done), with the latency of one more fresh question asked while it ran; and the
lines the server printed. Writes ``experiments/results/<name>.{json,md}``.

More ``stem-jax serve`` flags go after ``--``: ``-- --warm-up full`` measures a start that compiles every shape
before serving.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.report import markdown_table, portable_paths, run_metadata, write_report  # noqa: E402

SERVING = re.compile(r"serving .* on http://(\S+):(\d+)")


def fresh_qids(data_dir: Path, split: str) -> list[str]:
    """The ids of the split's last two questions with topic entities, last first (the warm-up answers the first
    ones of the split)."""
    found = []
    with open(data_dir / f"{split}.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("topic_entities"):
                found.append(record["id"])
    if len(found) < 2:
        raise SystemExit(f"{data_dir}/{split}.jsonl: fewer than two questions with topic entities")
    return [found[-1], found[-2]]


def ask(url: str, qid: str, timeout: float) -> tuple[dict, float]:
    """``POST /v1/ask`` for ``qid``, retried while the server is not accepting yet; (answer, seconds it took)."""
    body = json.dumps({"qid": qid}).encode()
    while True:  # the socket is bound before uvicorn accepts: retry until it answers
        began = time.perf_counter()
        try:
            request = urllib.request.Request(f"{url}/v1/ask", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read()), time.perf_counter() - began
        except urllib.error.HTTPError as err:
            raise SystemExit(f"POST /v1/ask {qid}: {err.code} {err.read().decode()[:500]}") from None
        except OSError:
            time.sleep(0.05)


def health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/healthz", timeout=30) as response:
        return json.loads(response.read())


def start(data_dir: Path, split: str, cache: Path, extra: list[str], timeout: float) -> dict:
    env = {**os.environ, "STEM_COMPILE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "stem_jax.cli.main", "serve", "--dataset", "files", "--data-dir", str(data_dir),
               "--split", split, "--port", "0", "--no-progress", "--log-level", "warning", *extra]
    began = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    lines, url, reader = [], None, None
    try:
        for line in proc.stdout:
            lines.append(f"{time.perf_counter() - began:7.1f}s  {line.rstrip()}")
            found = SERVING.search(line)
            if found:
                url = f"http://{found.group(1).strip('[]')}:{found.group(2)}"
                break
            if time.perf_counter() - began > timeout:
                break
        if url is None:
            raise SystemExit("serve did not start:\n" + "\n".join(lines[-20:]))
        serving = time.perf_counter() - began

        def keep_reading() -> None:  # the background warm-up's lines, timed; and the pipe never fills
            for line in proc.stdout:
                lines.append(f"{time.perf_counter() - began:7.1f}s  {line.rstrip()}")

        reader = threading.Thread(target=keep_reading, daemon=True)
        reader.start()
        first, second = fresh_qids(data_dir, split)
        answer, first_ms = ask(url, first, timeout)
        answered = time.perf_counter() - began
        state = health(url)
        out = {"serving_s": round(serving, 2), "first_answer_s": round(answered, 2),
               "first_answer_ms": round(1000 * first_ms, 1), "first_qid": first,
               "first_answer": [a["entity"] for a in answer.get("answers", [])[:3]],
               "warm_up_at_first_answer": state.get("warm_up")}
        if state.get("warm_up") and state["warm_up"]["state"] == "warming":
            during, during_s = ask(url, second, timeout)  # a fresh question while the background compiles
            out.update(during_warm_up_qid=second, during_warm_up_ms=round(1000 * during_s, 1),
                       during_warm_up_answer=[a["entity"] for a in during.get("answers", [])[:3]])
            while state["warm_up"]["state"] == "warming" and time.perf_counter() - began < timeout:
                time.sleep(0.5)
                state = health(url)
            out.update(ready_s=round(time.perf_counter() - began, 2), warm_up_state=state["warm_up"]["state"])
        elif state.get("ready", True):
            out["ready_s"] = round(answered, 2)
    finally:
        proc.terminate()  # SIGTERM: the server stops its background warm-up and exits
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stopped = time.perf_counter() - began
        if reader is not None:
            reader.join(10)
        lines.append(f"{stopped:7.1f}s  (exit code {proc.returncode})")
    return {**out, "exit_code": proc.returncode, "lines": lines}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--compile-cache", type=Path, required=True, help="emptied first (the cold start)")
    parser.add_argument("--name", default="serve-start")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("serve_flags", nargs="*", help="more `stem-jax serve` flags (after --)")
    args = parser.parse_args()
    shutil.rmtree(args.compile_cache, ignore_errors=True)
    load = {"before": [round(x, 2) for x in os.getloadavg()]}
    runs = {"cold": start(args.data_dir, args.split, args.compile_cache, args.serve_flags, args.timeout)}
    load["after_cold"] = [round(x, 2) for x in os.getloadavg()]
    runs["warm"] = start(args.data_dir, args.split, args.compile_cache, args.serve_flags, args.timeout)
    load["after_warm"] = [round(x, 2) for x in os.getloadavg()]
    meta = {**run_metadata(), "load_average": load}
    command = (f"python experiments/serve_start.py --data-dir {args.data_dir} --compile-cache {args.compile_cache} "
               f"--name {args.name}" + (" -- " + " ".join(args.serve_flags) if args.serve_flags else ""))
    table = markdown_table(
        ["start", "compilation cache", "serving after", "first answer after (its latency)",
         "a fresh question while warming", "ready (no request compiles) after"],
        [[k, "empty" if k == "cold" else "left by the cold start", f"{r['serving_s']:.1f} s",
          f"{r['first_answer_s']:.1f} s ({r['first_answer_ms']:.0f} ms)",
          f"{r['during_warm_up_ms']:.0f} ms" if "during_warm_up_ms" in r else "-",
          f"{r['ready_s']:.1f} s" if "ready_s" in r else "-"] for k, r in runs.items()])
    logs = "\n\n".join(f"{k} start:\n\n```\n" + "\n".join(r["lines"]) + "\n```" for k, r in runs.items())
    command, runs, logs = portable_paths([command, runs, logs], ROOT)
    write_report(ROOT / "experiments" / "results", args.name, {"meta": meta, "command": command, "runs": runs},
                 f"Command: `{command}`\n\nMachine: {meta}\n\n{table}\n\n{logs}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

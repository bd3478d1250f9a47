"""Shared helpers of the experiment scripts: engines, run folders, tables, timings and reports (first written
for the paper-table scripts, experiments/paper_*.py).

Every script evaluates through :class:`stem_jax.Engine` into a resumable run folder under
``runs/paper/`` (or reads one that already exists) and writes JSON + Markdown (+ PNG) with the
machine, versions and commit under ``experiments/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.config import StemConfig, apply_overrides, default_cache_dir  # noqa: E402
from stem_jax.data.sampling import sample_per_hop  # noqa: E402
from stem_jax.eval.metrics import MetricAccumulator, rog_question_metrics, strict_metrics  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
# Relative to the working directory (the scripts run from the repo root), so the commands and paths
# recorded in the results are the ones a fresh clone types, not this machine's.
RUNS = Path("runs") / "paper"
# the Triple-GNN run folder `stem-jax train-gnn --out runs/gnn-metaqa-1000` writes (experiments/README.md)
GNN = Path(os.environ.get("GNN_CHECKPOINT", "runs/gnn-metaqa-1000"))


def config(overrides: dict[str, str] | None = None) -> StemConfig:
    return apply_overrides(StemConfig(), overrides or {})


class Base:
    """MetaQA loaded once (KG, index, encoder, embeddings); engines for planners/guidance share it."""

    def __init__(self, *, split: str = "test", hops: tuple[int, ...] = (1, 2, 3), limit: int | None = None,
                 subset: int | None = None, overrides: dict[str, str] | None = None):
        from stem_jax.data.registry import DatasetSpec
        from stem_jax.engine import load_kg, open_embeddings

        self.config = config(overrides)
        self.spec = DatasetSpec(name="metaqa", split=split, hops=hops, limit=limit, seed=self.config.seed)
        self.dataset, self.index = load_kg(self.spec, log=print)
        self.dataset.questions = sample_per_hop(self.dataset.questions, subset, rule="lowest_hash")
        self.cache_root = default_cache_dir()
        self.encoder, self.embeddings, _ = open_embeddings(self.config, self.dataset, self.index, self.cache_root,
                                                           log=print)

    def engine(self, planner: str = "oracle", guidance: Path | None = None, cfg: StemConfig | None = None) -> Any:
        from stem_jax.engine import Engine, GuidanceSpec
        from stem_jax.plan.factory import PlannerSpec

        spec = GuidanceSpec("gnn", guidance) if guidance is not None else GuidanceSpec()
        return Engine(self.spec, self.dataset, self.index, self.encoder, self.embeddings, cfg or self.config,
                      cache_root=self.cache_root, planner=PlannerSpec(name=planner), guidance=spec, log=print)


def gnn_ready(checkpoint: Path = GNN) -> bool:
    """Whether ``checkpoint`` is a train-gnn run folder with at least one saved step."""
    steps = Path(checkpoint) / "checkpoints"
    return (Path(checkpoint) / "model.json").is_file() and steps.is_dir() and any(steps.iterdir())


def gnn_sweep(subset: int, checkpoint: Path, out: Path, *grid: str) -> dict[str, Any]:
    """``stem-jax sweep`` over ``grid`` on ``subset`` MetaQA test questions per hop, oracle plans and the
    Triple-GNN guidance of ``checkpoint``, in a child process; its sweep.json."""
    subprocess.run([sys.executable, "-m", "stem_jax.cli.main", "sweep", "--dataset", "metaqa", "--subset",
                    str(subset), "--planner", "oracle", "--guidance", "gnn", "--gnn-checkpoint", str(checkpoint),
                    *grid, "--no-progress", "--out", str(out)], check=True)
    return load_json(out / "sweep.json")


def run_command(argv: list[str], report: Path, wall_key: str) -> dict[str, Any] | None:
    """``stem-jax argv`` in this process, then the JSON report it wrote with the call's wall seconds under
    ``wall_key`` and the command; None when the command failed."""
    from stem_jax.cli.main import main

    began = time.perf_counter()
    if main(argv) != 0:
        return None
    out = load_json(report)
    out[wall_key] = time.perf_counter() - began
    out["command"] = "stem-jax " + " ".join(argv)
    return out


def best_seconds(call: Callable[[], Any], reps: int) -> float:
    """The fastest of ``reps`` calls of ``call`` (JAX results waited for), after one untimed call."""
    import jax

    jax.block_until_ready(call())
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - began)
    return min(times)


def open_metaqa_stem() -> tuple[Any, list[Any]]:
    """MetaQA test with oracle plans: the engine's STEM method with every question prepared, and the questions."""
    from stem_jax.engine import Engine

    engine = Engine.open("metaqa", planner="oracle", split="test")
    method = engine.method("stem")
    questions = list(engine.dataset.questions)
    method.prepare(questions)
    return method, questions


def fresh_metaqa_2hop(batch_sizes: str, calls: str) -> tuple[Any, dict[int, int]]:
    """An engine over MetaQA 2-hop test with the pattern planner and the encoder's memo off (every question
    encoded afresh, as ``bench stages --no-encoder-memo``), and {batch size: timed calls} from the comma
    lists ``--batch-sizes`` and ``--calls``."""
    from stem_jax.engine import Engine

    sizes = tuple(int(s) for s in batch_sizes.split(","))
    per_size = dict(zip(sizes, (int(c) for c in calls.split(",")), strict=True))
    engine = Engine.open("metaqa", hops=(2,), planner="pattern")
    engine.encoder.memo_size = 0
    return engine, per_size


def parse_or_render(parser: Any, name: str, render: Callable[[dict[str, Any], Callable], str]) -> Any:
    """``parser``'s arguments with ``--out`` (the results folder) and ``--render-only`` added; with
    ``--render-only``, rewrite ``<out>/<name>.md`` from its JSON with ``render(payload, markdown_table)`` and exit."""
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--render-only", action="store_true", help="rewrite the .md from the existing .json")
    args = parser.parse_args()
    if args.render_only:
        payload = load_json(args.out / f"{name}.json")
        (args.out / f"{name}.md").write_text(render(payload, markdown_table) + "\n")
        raise SystemExit(0)
    return args


def write_rendered(out: Path, name: str, payload: dict[str, Any], render: Callable[[dict[str, Any], Callable], str],
                   *, indent: int = 1) -> int:
    """Write ``<out>/<name>.json`` and beside it the Markdown ``render(payload, markdown_table)`` (what
    :func:`parse_or_render` rewrites); 0 (an exit status)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=indent, sort_keys=True, default=str) + "\n")
    (out / f"{name}.md").write_text(render(payload, markdown_table) + "\n")
    print(f"wrote {out / f'{name}.json'} and .md [{payload['seconds']:.0f}s]")
    return 0


def metaqa_paraphrases(limit: int | None, every: int = 1) -> tuple[Any, Any, list[Any]]:
    """MetaQA test (``limit`` questions per hop, the first ones; None: all), its KG index, and every
    ``every``-th question of experiments/data/metaqa_paraphrases.tsv grounded in that KG."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.eval.plan_quality import load_qtype_questions
    from stem_jax.kg.index import build_index

    test = load_dataset(DatasetSpec(name="metaqa", split="test", limit=limit))
    index = build_index(test.triples)
    paraphrases = load_qtype_questions(ROOT / "experiments" / "data" / "metaqa_paraphrases.tsv", index,
                                       name="paraphrase")
    return test, index, paraphrases[::every]


def warm_each_setting(encoder, field: str, values, size: int, run, warm_up, warm: int) -> None:
    """Before timing settings against each other: for each value of the encoder's ``field``, one call of ``size``
    questions that compiles (``run(size)``), the engine's warm-up for ``size`` questions, then ``warm`` untimed
    calls."""
    for value in values:
        setattr(encoder, field, value)
        run(size)
        warm_up(size)
        for _ in range(warm):
            run(size)


def load_averages() -> list[float]:
    """The machine's 1, 5 and 15-minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def publish(name: str, payload: dict[str, Any], markdown: str) -> int:
    """Write ``experiments/results/<name>.{json,md}``, print the Markdown and where it went; 0 (an exit status)."""
    paths = write_report(RESULTS, name, payload, markdown)
    print(markdown)
    print(f"wrote {paths[0]}")
    return 0


def read_records(run: Path) -> list[dict[str, Any]]:
    from stem_jax.eval.run_folder import read_predictions

    records, _, _ = read_predictions(Path(run) / "predictions.jsonl", log=None)
    return list(records.values())


def group_metrics(records: Iterable[dict[str, Any]], key: Callable[[dict], str | None],
                  group_name: str = "group") -> dict[str, Any]:
    """Hit@1 / F1 / Hit / coverage per group (``key(record)``; None drops the record) and overall."""
    acc = MetricAccumulator(group_name=group_name)
    for record in records:
        group = key(record)
        if group is None or not record["ground_truth"]:
            continue
        metrics = dict(strict_metrics(record["prediction"], record["ground_truth"]))
        metrics.update({k: v for k, v in rog_question_metrics(record["prediction"], record["ground_truth"]).items()
                        if k in ("rog_hit", "rog_f1")})
        if record.get("coverage") is not None:
            metrics["coverage"] = record["coverage"]
        acc.add(metrics, group=group)
    return acc.summary()


def metric_rows(summary: dict[str, Any], columns: tuple[tuple[str, str], ...], label: list[Any] | None = None,
                order: list[str] | None = None) -> list[list[Any]]:
    groups = order or list(summary["groups"])
    rows = []
    for group in [*groups, "all"]:
        stats = summary["overall"] if group == "all" else summary["groups"].get(group)
        if not stats:
            continue
        rows.append([*(label or []), group, stats["n"]] + [round(100 * stats["mean"][k], 2) if k in stats["mean"]
                                                            else "-" for k, _ in columns])
    return rows


def latency_by(records: Iterable[dict[str, Any]], key: Callable[[dict], str | None]) -> dict[str, dict[str, float]]:
    """Mean per-stage and total milliseconds per group (the records' ``ms`` shares of batch times)."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        group = key(record)
        if group is None:
            continue
        counts[group] += 1
        for stage, ms in record.get("ms", {}).items():
            sums[group][stage] += ms
            sums[group]["total"] += ms
    return {g: {"n": counts[g], **{s: v / counts[g] for s, v in sums[g].items()}} for g in sums}


def answer_bucket(record: dict[str, Any]) -> str:
    """Paper Table 2 buckets of the gold answer count."""
    n = len(record["ground_truth"])
    return "1" if n == 1 else "2-4" if n < 5 else "5-9" if n < 10 else ">=10"


ANSWER_BUCKETS = ["1", "2-4", "5-9", ">=10"]
COLUMNS = (("hit_at_1", "Hit@1"), ("f1", "F1"), ("hit", "Hit"), ("coverage", "Coverage"))


def save(name: str, payload: dict[str, Any], markdown: str, command: str) -> None:
    payload = {"meta": run_metadata(), "command": command, **payload}
    json_path, md_path = write_report(RESULTS, name, payload, f"Command: `{command}`\n\n{markdown}")
    print(f"wrote {json_path} and {md_path}")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    return markdown_table(headers, rows)


def replace_engine(cfg: StemConfig, **fields: Any) -> StemConfig:
    return dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, **fields))


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())

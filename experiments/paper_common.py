"""Shared helpers of the paper-table scripts (experiments/paper_*.py): engines, run folders, tables.

Every script evaluates through :class:`stem_jax.Engine` into a resumable run folder under
``runs/paper/`` (or reads one that already exists) and writes JSON + Markdown (+ PNG) with the
machine, versions and commit under ``experiments/results/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
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

"""Flags -> library specs -> :class:`stem_jax.engine.Engine`: the only place the CLI builds the pipeline."""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path
from typing import Any

from stem_jax.cli.args import cache_root, dataset_spec
from stem_jax.config import StemConfig
from stem_jax.data.types import Dataset
from stem_jax.engine import Engine, GuidanceSpec, load_kg, open_embeddings
from stem_jax.kg.index import KGIndex
from stem_jax.plan.factory import PlannerSpec


def planner_spec(args: argparse.Namespace) -> PlannerSpec:
    plans_file = getattr(args, "plans_file", None)
    return PlannerSpec(
        name="file" if plans_file is not None else getattr(args, "planner", "oracle"),
        path=getattr(args, "planner_path", None),
        method=getattr(args, "pattern_method", "mlp"), train_split=getattr(args, "train_split", None),
        llm_model=getattr(args, "vllm_model", None), llm_url=getattr(args, "vllm_url", None),
        plans=getattr(args, "plans", None), plans_file=plans_file,
    )


def guidance_spec(args: argparse.Namespace, *, force: bool = False) -> GuidanceSpec:
    kind = "gnn" if force else getattr(args, "guidance", "none")
    return GuidanceSpec(kind, getattr(args, "gnn_checkpoint", None))


def load(args: argparse.Namespace, config: StemConfig) -> tuple[Dataset, KGIndex]:
    """The dataset and its KG index, with counts and skips printed."""
    return load_kg(dataset_spec(args, config), log=print)


def embed(args: argparse.Namespace, config: StemConfig, dataset: Dataset, index: KGIndex) -> tuple[Any, Any, list]:
    """Encoder, embedding tables (built once, resumable) and a summary table's rows."""
    if getattr(args, "rebuild", False):  # --rebuild reaches every embedding cache, schema-triple texts included
        shutil.rmtree(cache_root(args) / dataset.name / "schema-texts", ignore_errors=True)
    return open_embeddings(config, dataset, index, cache_root(args), rebuild=getattr(args, "rebuild", False),
                           show_progress=not getattr(args, "no_progress", False), log=print)


def open_engine(args: argparse.Namespace, config: StemConfig, *, force_guidance: bool = False,
                method_options: dict[str, dict[str, Any]] | None = None,
                loaded: tuple[Dataset, KGIndex, Any, Any, list] | None = None, log: Any = print) -> Engine:
    """An :class:`Engine` for the flags in ``args`` (``config``: the settings, which may differ from the flags'
    where a command opens several engines). ``loaded``: the (dataset, index, encoder, embeddings, embedding
    rows) of :func:`load` and :func:`embed` when the command loaded them already (the demo opens one engine
    per configuration over one KG); ``log``: where the engine's progress lines go."""
    if loaded is None:
        dataset, index = load(args, config)
        loaded = (dataset, index, *embed(args, config, dataset, index))
    dataset, index, encoder, embeddings, rows = loaded
    return Engine(dataset_spec(args, config), dataset, index, encoder, embeddings, config, cache_root=cache_root(args),
                  planner=planner_spec(args), guidance=guidance_spec(args, force=force_guidance),
                  method_options=method_options, show_progress=not getattr(args, "no_progress", False), log=log,
                  embed_rows=rows)


def default_run_folder(args: argparse.Namespace, dataset_name: str, label: str) -> Path:
    """``runs/<dataset>-<split or --questions file name>-<label>``: two question sources never share one."""
    source = args.split
    if getattr(args, "questions", None) is not None:
        source = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(args.questions).name).strip("-.") or "questions"
    return Path("runs") / f"{dataset_name}-{source}-{label}"

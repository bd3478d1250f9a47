"""Planner construction from a :class:`PlannerSpec` (the library side of ``--planner``).

Every command and the :class:`stem_jax.engine.Engine` build planners here, so the choice of
planner and what each one needs (trained weights, an LLM server, a plan store) lives in one place.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import StemConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import Dataset, Question
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex
from stem_jax.plan.schema import SchemaGraph

PLANNERS = ("oracle", "pattern", "vllm", "hybrid")

PerQuestionPlanner = Callable[[Question, KGIndex], list[SchemaGraph]]


@dataclasses.dataclass(frozen=True)
class PlannerSpec:
    """Which planner, and what it needs.

    Attributes:
      name: ``oracle`` (gold paths), ``pattern`` (learned on CPU), ``vllm`` (an LLM through vLLM or
        any OpenAI-compatible server, e.g. llama.cpp's) or ``hybrid`` (the LLM, with the pattern
        planner where the LLM's plan fails to parse or ground: :mod:`stem_jax.plan.hybrid`).
      path: trained pattern planner folder (default ``<cache>/<dataset>/planners/pattern-<encoder>``).
      method: pattern planner scorer, ``mlp`` (Flax head) or ``knn``.
      train_split: split with training questions (few-shot examples); default dev for MetaQA.
      llm_model / llm_url: the LLM and, for a served model, its OpenAI-compatible base URL.
      plans: a plan store written by ``stem-jax plan``; when set it replaces the planner.
      plans_file: a JSONL of plans made elsewhere (:mod:`stem_jax.plan.plans_file`); when set it replaces the
        planner (``name`` is then ``file``).
    """

    name: str = "oracle"
    path: Path | None = None
    method: str = "mlp"
    train_split: str | None = None
    llm_model: str | None = None
    llm_url: str | None = None
    plans: Path | None = None
    plans_file: Path | None = None

    @property
    def label(self) -> str:
        """Short name for run folders and tables."""
        if self.plans is not None:
            return f"plans-{Path(self.plans).name}"
        if self.plans_file is not None:
            return f"plans-file-{Path(self.plans_file).stem}"
        return self.name


def default_planner_path(cache_root: Path, config: StemConfig, dataset_name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", config.encoder.name)
    return cache_root / dataset_name / "planners" / f"pattern-{slug}"


def train_planner_flags(dataset_name: str) -> str:
    """The ``--dataset`` flags that make ``train-planner`` train for ``dataset_name``: a files KG's
    name (``files-<folder>``) is no ``--dataset`` choice, its folder or triples file says which KG."""
    from stem_jax.data.registry import DATASETS

    if dataset_name in DATASETS:
        return f"--dataset {dataset_name}"
    return "--dataset files with this command's --data-dir (or --triples) flags"


def training_split(dataset_name: str, requested: str | None) -> str:
    """MetaQA has no train QA text here, so its learned parts train on dev (hash-split by qid)."""
    return requested or ("dev" if dataset_name == "metaqa" else "train")


def training_questions(dataset_spec: DatasetSpec, split: str | None) -> list[Question]:
    """The training split's questions, all hops, no limit."""
    spec = dataclasses.replace(dataset_spec, split=training_split(dataset_spec.name, split), limit=None,
                               questions=None, qtypes=None)
    return load_dataset(spec).questions


def build_planner(spec: PlannerSpec, config: StemConfig, dataset: Dataset, index: KGIndex, *, cache_root: Path,
                  dataset_spec: DatasetSpec | None = None, encoder: Any = None) -> tuple[Any, dict[str, Any]]:
    """The :class:`~stem_jax.plan.base.BatchPlanner` ``spec`` names, and a JSON-able description."""
    from stem_jax.plan.base import SingleQuestionPlanner
    from stem_jax.plan.oracle import OraclePlanner

    names = dataset.entity_names
    if spec.plans_file is not None:
        from stem_jax.plan.plans_file import FilePlanner

        if encoder is None:
            from stem_jax.encoder import get_encoder

            encoder = get_encoder(config.encoder)
        planner = FilePlanner(spec.plans_file, index, encoder=encoder, names=names, beam=config.planner.beam)
        return planner, {"planner": "file", "plans_file": str(spec.plans_file), "beam": config.planner.beam,
                         "questions_in_file": len(planner.records)}
    if spec.name == "oracle":
        # opaque ids (entity_names.tsv): the oracle's plans name the topic as the question does, like every planner
        return SingleQuestionPlanner(OraclePlanner(names=names).plan, "oracle", index), {"planner": "oracle"}
    if encoder is None:
        from stem_jax.encoder import get_encoder

        encoder = get_encoder(config.encoder)
    if spec.name == "pattern":
        from stem_jax.plan.path_ranker import RANKER_FILE
        from stem_jax.plan.pattern import PLANNER_FILE, PatternPlanner

        path = spec.path or default_planner_path(cache_root, config, dataset.name)
        if (Path(path) / RANKER_FILE).is_file() and not (Path(path) / PLANNER_FILE).is_file():
            # a path ranker alone: the pretrained one adapted to this KG's questions (few-shot), or one given
            return pretrained_planner(config, dataset, index, encoder, folder=Path(path))
        if not (Path(path) / PLANNER_FILE).is_file():
            from stem_jax.plan import pretrained

            if spec.path is None and pretrained.available():
                return pretrained_planner(config, dataset, index, encoder)
            raise StemError(f"no trained pattern planner at {path}\n  how to fix: run `stem-jax train-planner "
                            f"{train_planner_flags(dataset.name)}` first (or pass --planner-path)")
        planner = PatternPlanner.load(path, encoder=encoder, method=spec.method, beam=config.planner.beam,
                                      min_prob=config.planner.min_prob, names=names, index=index)
        planner.name = f"pattern-{spec.method}"
        info = {"planner": "pattern", "path": str(path), "method": spec.method, "beam": config.planner.beam,
                "min_prob": config.planner.min_prob, "templates": len(planner.templates)}
        mode = pattern_mode(planner, config)
        info["mode"] = mode
        if mode == "templates":
            return planner, info
        from stem_jax.plan.path_ranker import PATHS_FOLDER, PathRanker

        folder = Path(path) / PATHS_FOLDER
        if not folder.is_dir():
            raise StemError(f"{path}: this pattern planner has no path ranker ({PATHS_FOLDER}/ missing)\n  how to fix: "
                            f"retrain with `stem-jax train-planner {train_planner_flags(dataset.name)} "
                            "--planner.paths paths`, or run with --planner.paths templates")
        ranker = PathRanker.load(folder, beam=config.planner.beam, min_prob=config.planner.min_prob, names=names,
                                 index=index, encoder=encoder)
        ranker.name = "pattern-paths"
        info.update(paths=ranker.report.get("val", {}), temperature=ranker.temperature,
                    path_max_hops=ranker.config.max_hops)
        if ranker.tower is not None:  # its question side is the encoder's top layers fine-tuned
            info["question_side"] = f"tuned top {ranker.tower.layers} layers"
        chosen: Any = ranker
        if mode == "both":
            from stem_jax.plan.mixed import MixedPlanner

            weight = config.planner.mix_weight or float(planner.report.get("selection", {}).get("mix_weight", 0.5))
            info["mix_weight"] = weight
            chosen = MixedPlanner(planner, ranker, weight=weight, beam=config.planner.beam)
        if config.planner.branches != "off":
            from stem_jax.plan.branch_planner import BranchPlanner, load_branch_planner

            chosen = load_branch_planner(chosen, Path(path), index, ranker.catalog, encoder.encode, names)
            if isinstance(chosen, BranchPlanner):
                info["branches"] = {"threshold": chosen.model.threshold}
        return chosen, info
    if spec.name in ("vllm", "hybrid"):
        from stem_jax.data.splits import hash_split
        from stem_jax.plan.llm_planner import build_llm_planner

        if not spec.llm_model:
            raise StemError(f"--planner {spec.name} needs --llm-model (and --llm-url for an OpenAI-compatible server)")
        if dataset_spec is None:
            raise StemError(f"the {spec.name} planner needs the dataset spec to load few-shot training questions")
        train, _ = hash_split(training_questions(dataset_spec, spec.train_split))
        planner, info = build_llm_planner(spec.llm_model, spec.llm_url, config.planner, index, train, names=names,
                                          encoder=encoder)
        if spec.name == "vllm":
            return planner, info
        from stem_jax.plan.hybrid import HybridPlanner

        fallback, fallback_info = build_planner(dataclasses.replace(spec, name="pattern"), config, dataset, index,
                                                cache_root=cache_root, dataset_spec=dataset_spec, encoder=encoder)
        consult = config.planner.hybrid_consult_below
        hybrid = HybridPlanner(planner, fallback, index, names, consult_below=consult if consult <= 1.0 else None)
        return hybrid, {"planner": "hybrid", "llm": info, "fallback": fallback_info, "consult_below": consult}
    raise StemError(f"unknown planner {spec.name!r}; choose one of {', '.join(PLANNERS)}")


def pretrained_planner(config: StemConfig, dataset: Dataset, index: KGIndex, encoder: Any, *,
                       folder: Path | None = None) -> tuple[Any, dict[str, Any]]:
    """The pretrained path planner (:mod:`stem_jax.plan.pretrained`; the one in ``folder`` when given) over
    ``index``, for a KG without a trained planner of its own. Says so once on stderr, and once which relations
    have no readable text (an opaque id such as ``P57`` gives the ranker nothing to read)."""
    from stem_jax.plan import pretrained

    ranker = pretrained.load_pretrained(index=index, names=dataset.entity_names, encoder=encoder,
                                        beam=config.planner.beam, min_prob=config.planner.min_prob, folder=folder)
    if getattr(encoder, "name", None) != ranker.encoder_name:
        raise StemError(f"no trained pattern planner for {dataset.name}, and the pretrained path planner reads "
                        f"{ranker.encoder_name.split(':')[0]} vectors, not {getattr(encoder, 'name', encoder)}'s\n"
                        f"  how to fix: use the default encoder (--encoder.name=minilm), or run `stem-jax "
                        f"train-planner {train_planner_flags(dataset.name)}` with this encoder")
    about = pretrained.describe(ranker)
    seen = ", ".join(f"{family} ({', '.join(parts)})" for family, parts in about["trained_on"].items())
    if folder is None:
        pretrained.notice(f"no trained pattern planner for {dataset.name}: planning with the pretrained path planner "
                          f"{about['version']} (trained on questions of other KGs: {seen}); questions with answers "
                          f"about this KG adapt it: `stem-jax train-planner {train_planner_flags(dataset.name)}`")
    opaque = pretrained.opaque_relations(index)
    if opaque:
        shown = ", ".join(opaque[:5]) + (", ..." if len(opaque) > 5 else "")
        pretrained.notice(f"{len(opaque)} of {index.num_relations} relations of {dataset.name} have no readable "
                          f"name ({shown}): the planner matches questions to relation names\n  how to fix: give "
                          "names in relation_names.tsv (id<TAB>name) in the KG folder, or pass --relation-names FILE")
    mode = "few-shot" if ranker.report.get("few_shot") else "pretrained"
    info = {"planner": "pattern", "mode": mode, "path": str(folder or pretrained.model_folder()),
            "beam": config.planner.beam, "min_prob": config.planner.min_prob, "pretrained": about,
            "catalog_hops": ranker.catalog.options["max_hops"]}
    if opaque:
        info["relations_without_names"] = len(opaque)
    chosen: Any = ranker
    if config.planner.branches != "off":
        from stem_jax.plan.branch_planner import BranchPlanner, load_branch_planner

        # the constraint-branch model stored beside the ranker (the shipped one is trained on the same families)
        chosen = load_branch_planner(ranker, Path(folder or pretrained.model_folder()), index, ranker.catalog,
                                     encoder.encode, dataset.entity_names)
        if isinstance(chosen, BranchPlanner):
            info["branches"] = {"threshold": chosen.model.threshold,
                                "trained_on": chosen.model.report.get("trained_on", {})}
    return chosen, info


def pattern_mode(planner: Any, config: StemConfig) -> str:
    """Which part of a trained pattern planner runs: ``config.planner.paths`` when set, else the choice
    ``train-planner`` made on held-out questions (templates for planners trained before the choice existed)."""
    if config.planner.paths != "auto":
        return config.planner.paths
    return str(planner.report.get("selection", {}).get("mode", "templates"))


def planned(planner: Any, questions: list[Question], *, log: Callable[[str], None] | None = None,
            label: str = "") -> tuple[PerQuestionPlanner, dict[str, Any], dict[str, Any]]:
    """Plan ``questions`` once in batches; the evaluator's per-question callable, the beams, and stats."""
    from stem_jax.plan.base import precomputed_planner

    began = time.perf_counter()
    plan, beams = precomputed_planner(planner, questions)
    seconds = time.perf_counter() - began
    info: dict[str, Any] = {
        "plan_seconds": seconds,
        "plan_questions_per_second": len(questions) / max(seconds, 1e-9),
        "mean_beams": float(np.mean([len(b) for b in beams.values()])) if beams else 0.0,
    }
    if getattr(planner, "stats", None):
        info["stats"] = dict(planner.stats)
    if log is not None and questions:
        log(f"planned {len(questions)} questions with {getattr(planner, 'name', label)} in {seconds:.1f}s "
            f"({info['plan_questions_per_second']:.0f} questions/s, {info['mean_beams']:.2f} beams each)")
    return plan, beams, info


def open_plan_store(path: Path, index: KGIndex) -> tuple[PerQuestionPlanner, dict[str, Any]]:
    """A stored plan store as the evaluator's per-question planner."""
    from stem_jax.plan.store import PlanStore

    store = PlanStore.open(path)
    store.check_index(index)
    manifest = store.manifest
    rate = manifest["planned_questions"] / manifest["plan_seconds"] if manifest["plan_seconds"] else None
    return store.as_planner(), {"planner": manifest["planner"], "plans": str(path),
                                "plan_questions_per_second_when_stored": rate}

"""``stem-jax train-planner`` and ``stem-jax plan``, and the planner choice ``stem-jax eval`` uses.

Kept out of :mod:`stem_jax.cli.commands` so the planner flags and their wiring live in one place.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from stem_jax.cli.args import cache_root, command_parser, config_from_args
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.config import StemConfig, as_dict
from stem_jax.data.types import Dataset
from stem_jax.kg.index import KGIndex
from stem_jax.plan.factory import PLANNERS


def add_planner_flags(parser: argparse.ArgumentParser, *, plans: bool = False, default: str = "oracle") -> None:
    """``--planner`` and what each planner needs (trained weights, a vLLM model or server)."""
    group = parser.add_argument_group("planner")
    group.add_argument("--planner", choices=PLANNERS, default=default,
                       help="oracle (gold paths), pattern (learned, CPU; train with `stem-jax train-planner`) or "
                       "vllm (LLM SGDA+SAGB) or hybrid (LLM, pattern where its plan fails to parse or ground); "
                       "beam and min_prob: --planner.beam, --planner.min_prob")
    group.add_argument("--planner-path", type=Path, default=None,
                       help="trained pattern planner folder (default <cache>/<dataset>/planners/pattern-<encoder>)")
    group.add_argument("--pattern-method", choices=("mlp", "knn"), default="mlp",
                       help="pattern planner scorer: the Flax head (mlp) or the nearest-neighbour vote (knn)")
    group.add_argument("--train-split", default=None,
                       help="split with training questions (few-shot examples for vllm); default: dev for "
                       "metaqa (its train QA text is not available), train otherwise")
    group.add_argument("--llm-model", "--vllm-model", dest="vllm_model", default=None,
                       help="model for --planner vllm|hybrid (offline vllm.LLM, or the served name)")
    group.add_argument("--llm-url", "--vllm-url", dest="vllm_url", default=None,
                       help="OpenAI-compatible server instead of offline vLLM: http://host:8000/v1 from `vllm serve`, "
                       "or `python -m llama_cpp.server` on CPU; prompts/grammar/flavour: --planner.llm_prompts, "
                       "--planner.llm_grammar, --planner.llm_server")
    group.add_argument("--plans-file", type=Path, default=None,
                       help="JSONL of plans made elsewhere, per question id: relation paths as RoG writes them "
                       "(paths / rog_plans) or schema triples; grounded to the KG's relations (overrides --planner)")
    if plans:
        group.add_argument("--plans", type=Path, default=None,
                           help="read schema graphs from a plan store written by `stem-jax plan` (overrides --planner)")


def default_planner_path(args: argparse.Namespace, config: StemConfig, dataset_name: str) -> Path:
    from stem_jax.plan.factory import default_planner_path as library_default

    return library_default(cache_root(args), config, dataset_name)


def make_planner(args: argparse.Namespace, config: StemConfig, dataset: Dataset, index: KGIndex, encoder=None):
    """The :class:`~stem_jax.plan.base.BatchPlanner` that ``--planner`` names, and a JSON-able description."""
    from stem_jax.cli.args import dataset_spec
    from stem_jax.cli.engine_args import planner_spec
    from stem_jax.plan.factory import build_planner

    return build_planner(planner_spec(args), config, dataset, index, cache_root=cache_root(args),
                         dataset_spec=dataset_spec(args, config), encoder=encoder)


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def _report_table(report: dict[str, Any]) -> str:
    rows = []
    for method in ("mlp", "knn"):
        r = report[method]
        rows.append([method, r["template"]["n"], r["template"]["top1"], r["template"]["top4"], r["strategy"]["accuracy"],
                     r["strategy"]["ans_eq_1_precision_share"], r["strategy"]["ans_ge_2_breadth_share"]])
    base = report.get("strategy_baselines", {})
    if base:
        rows.append(["always Breadth", "", "", "", base["always_breadth"], 0.0, 1.0])
        rows.append(["template majority (gold template)", "", "", "",
                     base["template_majority_with_gold_template"], "", ""])
    return markdown_table(["method", "val questions", "template top-1", "template top-4", "strategy acc",
                           "Ans=1: Precision", "Ans>=2: Breadth"], rows)


def cmd_train_planner(args: argparse.Namespace) -> int:
    """Train the pattern planner on the training split's oracle plans; save it; print validation accuracy."""
    from stem_jax.cli.engine_args import load
    from stem_jax.plan.factory import training_split
    from stem_jax.plan.training import train_and_save

    config = config_from_args(args)
    if args.split is None:
        args.split = training_split(args.dataset, args.train_split)
    dataset, _ = load(args, config)
    out = args.out or default_planner_path(args, config, dataset.name)
    began = time.perf_counter()
    planner = train_and_save(dataset, args.split, config, out, cache_root=cache_root(args),
                             val_fraction=args.val_fraction, epochs=args.epochs, show_progress=not args.no_progress,
                             report={"meta": run_metadata()})
    if planner.report.get("few_shot"):  # too few questions or gold plans: the pretrained path planner adapted
        val = planner.report.get("val", {})
        print(f"\nadapted the pretrained path planner to {planner.report.get('train_questions')} questions of "
              f"{dataset.name}/{args.split} (their answers; gold paths where given)"
              + (f"; held out: top-1 path reaches an answer for {val['top1_reaches_answer']:.1%} of "
                 f"{val['questions']}" if val else ""))
    else:
        table = _report_table(planner.report)
        print(f"\nvalidation ({args.val_fraction:.0%} of {dataset.name}/{args.split} by qid hash):\n")
        print(table)
    if args.answer_scorer and not planner.report.get("few_shot"):  # an answer scorer needs more questions
        from stem_jax.answer.training import scorer_engine_config, train_scorer_for_planner
        from stem_jax.cli.args import dataset_spec
        from stem_jax.engine import Engine
        from stem_jax.plan.factory import PlannerSpec

        print()
        spec = dataset_spec(args, config)
        engine = Engine.open(spec, config=scorer_engine_config(config), planner=PlannerSpec("pattern", path=Path(out)),
                             cache_dir=cache_root(args), log=print)
        train_scorer_for_planner(engine, spec, out, val_fraction=args.val_fraction)
    print(f"\nsaved {out}  [{time.perf_counter() - began:.1f}s]")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Plan a split into a TensorStore plan store (resumable, chunk by chunk)."""
    from stem_jax.cli.engine_args import load
    from stem_jax.plan.store import write_plan_store
    from stem_jax.progress import progress

    config = config_from_args(args)
    dataset, index = load(args, config)
    planner, info = make_planner(args, config, dataset, index)
    suffix = f"-limit{args.limit}" if args.limit else ""
    name = info["planner"] + (f"-{info['method']}" if "method" in info else "")
    out = args.out or cache_root(args) / dataset.name / "plans" / f"{args.split}-{name}{suffix}"
    planner_id = "|".join(f"{k}={v}" for k, v in sorted(info.items()) if k not in ("path", "url"))
    began = time.perf_counter()
    with progress(len(dataset.questions), "plan", "q", enabled=not args.no_progress) as bar:
        store = write_plan_store(out, dataset.questions, planner, index, beam=config.planner.beam,
                                 max_triples=config.planner.max_triples, chunk_rows=args.chunk_rows,
                                 names=dataset.entity_names, planner_id=planner_id, rebuild=args.rebuild_plans,
                                 progress=bar.update, log=print)
    seconds = time.perf_counter() - began
    m = store.manifest
    rate = m["planned_questions"] / m["plan_seconds"] if m["plan_seconds"] else float("nan")
    valid = sum(int((b.strategy >= 0).sum()) for b in store.iter_batches(store.chunk_rows))
    print(f"plan store {out}: {store.n} questions, {valid} plans (beam {store.beam}, T_max {store.max_triples}), "
          f"dropped beams {m['dropped_beams']}; planning {rate:.0f} questions/s  [{seconds:.1f}s]")
    if hasattr(planner, "stats") and planner.stats:
        print(f"planner stats: {dict(planner.stats)}")
    write_report(out, "plan-report", {"meta": run_metadata(), "dataset": dataset.name, "split": args.split,
                                      "planner": info, "config": as_dict(config), "questions": store.n,
                                      "plans": valid, "dropped_beams": m["dropped_beams"],
                                      "plan_questions_per_second": rate, "wall_seconds": seconds},
                 f"{store.n} questions, {valid} plans, {rate:.0f} questions/s")
    return 0


def add_train_planner_parser(sub) -> None:
    p = command_parser(sub, "train-planner", training=True, help="train the pattern planner (question -> schema template, CPU)",
                       description="Learn question wording -> schema template + strategy from the training split's "
                       "oracle plans (MetaQA: the dev split, hash-split into train/val), with the topic mention masked. "
                       "Saves a Flax head and a nearest-neighbour bank; prints validation accuracy. With fewer than 50 training "
                       "questions that have a gold plan (answers alone are enough), adapts the pretrained path planner "
                       "shipped in the package to the questions' answers instead.")
    p.add_argument("--train-split", default=None, help="alias of --split for training (default: dev for metaqa, else train)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of questions held out by qid hash")
    p.add_argument("--epochs", type=int, default=None, help="training epochs of the head (default 100)")
    p.add_argument("--no-answer-scorer", dest="answer_scorer", action="store_false",
                   help="skip training the KG's answer scorer (stem_jax/answer/scorer.py) after the planner")
    p.add_argument("--out", type=Path, default=None,
                   help="planner folder (default <cache>/<dataset>/planners/pattern-<encoder>)")
    p.set_defaults(func=cmd_train_planner)


def add_plan_parser(sub) -> None:
    p = command_parser(sub, "plan", help="plan a split into a TensorStore plan store (resumable)",
                       description="Run a planner over a split and stream its grounded schema graphs to TensorStore: "
                       "int32 [Q, B, T_max, 3] triples, strategy and answer arrays, a JSONL sidecar; a rerun skips "
                       "finished chunks. `stem-jax eval --plans PATH` reads it back.")
    add_planner_flags(p)
    p.add_argument("--out", type=Path, default=None,
                   help="store folder (default <cache>/<dataset>/plans/<split>-<planner>)")
    p.add_argument("--chunk-rows", type=int, default=1024, help="questions per chunk (the resume granularity)")
    p.add_argument("--rebuild-plans", action="store_true", help="delete the store first and plan everything again")
    p.set_defaults(func=cmd_plan)

"""``stem-jax train-gnn``, ``stem-jax ablate-guidance`` and the ``--guidance`` flags of ``eval``.

Kept out of :mod:`stem_jax.cli.commands` so the Triple-GNN wiring lives in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from stem_jax.cli.args import (
    ValuedFlag,
    add_run_folder_flag,
    add_valued_flags,
    check_out_path,
    command_parser,
    config_from_args,
    run_folder,
    training_parser,
    training_split_of,
)
from stem_jax.cli.planning import add_planner_flags
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.config import GNNConfig, StemConfig, as_dict
from stem_jax.data.sampling import sample_per_hop
from stem_jax.data.types import Dataset
from stem_jax.errors import ConfigError
from stem_jax.kg.index import KGIndex


def add_guidance_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    group = parser.add_argument_group("guidance graph (Triple-GNN)")
    if not required:
        group.add_argument("--guidance", choices=("none", "gnn"), default="none",
                           help="none (λ, τ unused), or gnn: the top |T|·K' entities of a trained Triple-GNN")
    group.add_argument("--gnn-checkpoint", type=Path, default=None, metavar="DIR",
                       help="a `stem-jax train-gnn` run folder")


def example_factory(config: StemConfig, dataset: Dataset, index: KGIndex, embeddings, encoder):
    from stem_jax.engine import gnn_example_factory

    return gnn_example_factory(config, dataset, index, embeddings, encoder)


# ---------------------------------------------------------------------------------------------
# train-gnn
# ---------------------------------------------------------------------------------------------


def add_train_gnn_parser(sub) -> None:
    p = training_parser(sub, "train-gnn", cmd_train_gnn,
                        help="train the Triple-GNN that builds the guidance graph (resumable)")
    p.add_argument("--preset", choices=("small", "paper"), default="small",
                   help="architecture: small = L=3, d=64 (CPU, the default); paper = L=6, d=512. "
                   "--gnn.layers / --gnn.d_gnn override either")
    add_valued_flags(p, TRAIN_GNN_FLAGS)


# train-gnn's budget and validation flags (TrainConfig's fields, and the validation share)
TRAIN_GNN_FLAGS: tuple[ValuedFlag, ...] = (
    ("--steps", int, 300, "optimisation steps (default 300)"),
    ("--graphs-per-step", int, 8, "graphs per step (default 8)"),
    ("--lr", float, 1e-3, "peak AdamW learning rate (default 1e-3)"),
    ("--synthetic-ratio", float, 0.25, "share of random-walk (reverse-generation) examples (default 0.25)"),
    ("--val-percent", int, 10, "percent of question ids held out for validation (default 10)"),
    ("--val-questions", int, 192, "validation questions per evaluation, stratified by hop (default 192)"),
    ("--val-every", int, 50, "steps between validations"),
    ("--ckpt-every", int, 50, "steps between checkpoints"),
)


def gnn_architecture(args: argparse.Namespace, config: StemConfig) -> GNNConfig:
    from stem_jax.gnn.model import PRESETS

    preset = PRESETS[args.preset]
    return GNNConfig(
        layers=config.gnn.layers if getattr(args, "cfg:gnn.layers", None) is not None else preset.layers,
        d_gnn=config.gnn.d_gnn if getattr(args, "cfg:gnn.d_gnn", None) is not None else preset.d_gnn,
    )


def cmd_train_gnn(args: argparse.Namespace) -> int:
    """Train the Triple-GNN (paper appendix A, C.1-C.2) with AdamW on balanced BCE: questions of --split (default:
    the dataset's train split, dev for MetaQA, which has no train QA text; hash-split by question id into
    train/val) planned by the oracle, plus random-walk examples (reverse generation, Phase 1). Orbax checkpoints in
    --out; rerunning the same command resumes from the last one. Writes curves.png, history.json,
    train-summary.json."""
    from stem_jax.cli.engine_args import embed, load
    from stem_jax.gnn.data import question_examples, split_by_qid
    from stem_jax.gnn.model import ModelSpec
    from stem_jax.gnn.train import TrainConfig, stratified, train
    from stem_jax.kg.embeddings import kg_fingerprint
    from stem_jax.plan.oracle import OraclePlanner

    config = config_from_args(args)
    args.split = training_split_of(args)
    started = time.perf_counter()
    tc = TrainConfig(steps=args.steps, graphs_per_step=args.graphs_per_step, lr=args.lr,
                     synthetic_ratio=args.synthetic_ratio, val_questions=args.val_questions,
                     val_every=args.val_every, ckpt_every=args.ckpt_every, k_prime=config.guidance.k_prime,
                     seed=config.seed)
    problems = tc.problems()
    if isinstance(args.val_percent, bool) or not 0 <= args.val_percent <= 99:
        problems.append(f"--val-percent {args.val_percent}: expected an integer in [0, 99]")
    if problems:  # before anything is loaded
        raise ConfigError(problems)
    check_out_path(args.out)
    dataset, index = load(args, config)
    encoder, embeddings, _ = embed(args, config, dataset, index)
    factory = example_factory(config, dataset, index, embeddings, encoder)
    train_q, val_q = split_by_qid(dataset.questions, args.val_percent)
    # opaque ids (entity_names.tsv): the oracle names topics by display name, as the factory anchors them
    oracle = OraclePlanner(names=dataset.entity_names).plan
    train_pairs, skipped = question_examples(factory, train_q, oracle)
    val_pairs, _ = question_examples(factory, val_q, oracle)
    arch = gnn_architecture(args, config)
    spec = ModelSpec(layers=arch.layers, d_gnn=arch.d_gnn, d_pem=factory.featurizer.dim,
                     num_relations=index.num_relations)
    val_pairs = stratified(val_pairs, tc.val_questions)
    out = run_folder(args, dataset.name)
    print(f"train-gnn: {len(train_pairs)} training questions ({args.split} ids with hash bucket >= {args.val_percent}), "
          f"{len(val_pairs)} validation questions, skipped {skipped or 'none'}; L={spec.layers}, d={spec.d_gnn}, "
          f"d_pem={spec.d_pem}; {tc.steps} steps x {tc.graphs_per_step} graphs -> {out}")
    info = {"dataset": dataset.name, "split": args.split, "val_percent": args.val_percent, "encoder": encoder.name,
            "kg": kg_fingerprint(index), "subgraph": as_dict(config.subgraph), "train_questions": len(train_pairs)}
    summary = train(factory, train_pairs, val_pairs, spec, tc, out, run_info=info, show_progress=not args.no_progress)
    last = summary["val"][-1] if summary["val"] else None
    rows = [["steps (total / this run)", f"{summary['steps_total']} / {summary['steps_this_run']}"],
            ["wall seconds (this run, incl. compiles)", round(summary["wall_seconds_this_run"], 1)],
            ["steps/s steady (compiled shapes only)", _fmt(summary["steps_per_second_steady"])],
            ["steps/s overall", _fmt(summary["steps_per_second_overall"])],
            ["compiled shapes", summary["compiled_shapes"]],
            ["loss first -> last", f"{_fmt(summary['first_loss'])} -> {_fmt(summary['last_loss'])}"]]
    if last:
        rows.append([f"val recall@|T|·{tc.k_prime} (step {last['step']})",
                     f"{last['recall']:.3f} " + " ".join(f"{h}: {v:.3f}" for h, v in last["per_hop"].items())])
    table = markdown_table(["measure", "value"], rows)
    print("\n" + table)
    payload = {"meta": run_metadata(), "command": "stem-jax " + " ".join(getattr(args, "argv", [])),
               "config": as_dict(config), "train": dataclasses.asdict(tc), "spec": spec.as_dict(), **info, **summary,
               "total_seconds": time.perf_counter() - started}
    paths = write_report(out, "train-gnn", payload, table)
    print(f"\nwrote {out / 'curves.png'}, {paths[0]} and checkpoints under {out / 'checkpoints'}")
    return 0


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------------------------
# ablate-guidance
# ---------------------------------------------------------------------------------------------


def add_ablate_parser(sub) -> None:
    p = command_parser(
        sub, "ablate-guidance", help="full guidance vs without entity / triple / both biases (one command)",
        description="The paper's Table 7/12 analogue: evaluate a split four times (full guidance, λ=1, τ=0, both) "
        "with one STEM pipeline, one set of schema-text embeddings and one cached set of GNN outputs; prints Hit@1, F1 "
        "and coverage per hop for each row. Each row is resumable under --out/<row>/.")
    add_planner_flags(p)
    add_guidance_flags(p, required=True)
    p.add_argument("--subset", type=int, default=None,
                   help="deterministic stratified subset: per hop, the N questions with the lowest sha256(qid)")
    add_run_folder_flag(p, "ablate-<dataset>-<split>")
    p.set_defaults(func=cmd_ablate_guidance)


ABLATION_COLUMNS = (("hit_at_1", "Hit@1"), ("f1", "F1"), ("coverage", "Coverage"), ("hit", "Hit"))


def ablation_table(results: dict[str, dict[str, Any]]) -> str:
    from stem_jax.methods.stem.ablation import GUIDANCE_ABLATIONS

    groups = sorted({g for summary in results.values() for g in summary["groups"]}) + ["all"]
    order = {name: i for i, (name, *_) in enumerate(GUIDANCE_ABLATIONS)}
    rows = []
    for name, summary in sorted(results.items(), key=lambda kv: order.get(kv[0], len(order))):
        for group in groups:
            stats = summary["overall"] if group == "all" else summary["groups"].get(group)
            if not stats:
                continue
            mean = stats["mean"]
            rows.append([name, group, stats["n"]] + [round(100 * mean[k], 2) if k in mean else "-"
                                                     for k, _ in ABLATION_COLUMNS])
    return markdown_table(["variant", "hops", "questions"] + [t for _, t in ABLATION_COLUMNS], rows)


def cmd_ablate_guidance(args: argparse.Namespace) -> int:
    from stem_jax.cli.engine_args import open_engine
    from stem_jax.methods.stem.ablation import run_guidance_ablation

    config = config_from_args(args)
    started = time.perf_counter()
    engine = open_engine(args, config, force_guidance=True)
    dataset = engine.dataset
    dataset.questions = sample_per_hop(dataset.questions, args.subset, rule="lowest_hash")
    if args.subset is not None:
        print(f"stratified subset: {len(dataset.questions)} questions ({args.subset} per hop, lowest sha256(qid))")
    method = engine.method("stem")
    provider = method.context.guidance
    planner_info = engine.planner_info
    out = run_folder(args, dataset.name)
    results = run_guidance_ablation(method, dataset.questions, out, fingerprint=engine.results_fingerprint("stem"),
                                    show_progress=not args.no_progress)
    table = ablation_table(results)
    hyper, engine_settings = method.hyper, method.settings.engine
    title = (f"{dataset.name}/{args.split}, planner {engine.planner_spec.label}, guidance K=|T|·{config.guidance.k_prime}, "
             f"λ={hyper.lam}, τ={hyper.tau}, θ={hyper.theta:g} ({method.settings.theta_source}), "
             f"relation bonus {'on' if engine_settings.relation_bonus else 'off'} (percent)")
    print(f"\n{title}:\n\n{table}")
    wall = time.perf_counter() - started
    payload = {"meta": run_metadata(), "command": "stem-jax " + " ".join(getattr(args, "argv", [])),
               "dataset": dataset.name, "split": args.split, "subset_per_hop": args.subset,
               "questions": len(dataset.questions), "planner_info": planner_info, "config": as_dict(config),
               "effective": method.effective(),
               "gnn": {"checkpoint": str(args.gnn_checkpoint), **{k: v for k, v in provider.info.items()}},
               "results": results, "wall_seconds": wall}
    paths = write_report(out, "ablation", payload, f"{title}\n\n{table}")
    print(f"\nwrote {paths[0]} and {paths[1]}  [{wall:.1f}s]")
    return 0

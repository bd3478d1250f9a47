"""``stem-jax train-scr``: train SCR on a split's hash-split training part (resumable)."""

from __future__ import annotations

import argparse
import time

from stem_jax.cli.args import config_from_args, run_folder, training_parser, training_split_of
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.config import as_dict


def add_train_scr_parser(sub) -> None:
    p = training_parser(sub, "train-scr", cmd_train_scr,
                        help="train SCR (stepwise contrastive reasoning) for --method scr (resumable)")
    p.add_argument("--val-fraction", dest="val_fraction", type=float, default=0.1,
                   help="share of question ids held out for validation (default 0.1, as the planners)")
    p.add_argument("--stop-at", dest="stop_at", type=int, default=None,
                   help="end after this many total steps (resume later with the same command)")


def cmd_train_scr(args: argparse.Namespace) -> int:
    """Train SCR's relational GAT and question head with InfoNCE on teacher-forced reasoning steps along the gold
    relation paths of --split (default: the dataset's train split, dev for MetaQA; hash-split by question id into
    train/validation, the same split as the planners; test is never read by default). Orbax checkpoints in --out;
    rerunning the same command resumes. Writes curves.png, history.json, train-summary.json and
    train-scr.{json,md}. Architecture and budget: --scr.dim, --scr.layers, --scr.steps, --scr.train_batch,
    --scr.lr, ...; --scr.question_encoder=minilm fine-tunes MiniLM's top --scr.finetune_layers layers over the
    context string (the paper's BERT; slow on a CPU)"""
    from stem_jax.cli.args import cache_root
    from stem_jax.cli.engine_args import embed, load
    from stem_jax.data.splits import hash_split
    from stem_jax.methods.scr.train import prepare_data, train_scr

    config = config_from_args(args)
    args.split = training_split_of(args)
    started = time.perf_counter()
    dataset, index = load(args, config)
    encoder, embeddings, _ = embed(args, config, dataset, index)
    train_q, val_q = hash_split(dataset.questions, args.val_fraction)
    out = run_folder(args, dataset.name)
    data = prepare_data(train_q, val_q, index, embeddings, encoder, config.scr, seed=config.seed,
                        cache=cache_root(args) / dataset.name / "scr-questions", names=dataset.entity_names)
    scr = config.scr
    print(f"train-scr: {len(data.train)} training / {len(data.val)} validation questions with gold paths "
          f"({args.split}, hash split {args.val_fraction}); skipped {dict(data.skipped) or 'none'}; "
          f"L={scr.layers}, d={scr.dim}, " + (f"question encoder: MiniLM over the context string, top "
                                               f"{scr.finetune_layers} layers fine-tuned (lr {scr.encoder_lr}), "
                                               f"{scr.context_tokens} tokens"
                                               if scr.question_encoder == "minilm" else f"head layers {scr.head_layers}")
          + f", τ={scr.tau}, neighbour cap {scr.neighbours} "
          f"({data.neighbours.capped} hubs sampled); {scr.steps} steps x {scr.train_batch} questions -> {out}")
    summary = train_scr(data, scr, out, seed=config.seed, stop_at=args.stop_at, log=print)
    final = summary["final"] or {}
    rows = [["steps", summary["steps"]], ["training seconds (all runs, incl. compiles)", summary["seconds"]],
            ["last train loss", final.get("loss")], ["last validation loss", final.get("val_loss")],
            ["validation step accuracy", final.get("val_accuracy")],
            ["validation stop accuracy", final.get("val_stop_accuracy")],
            ["best validation step (what --method scr loads)", (summary.get("best") or {}).get("step")],
            ["stopped early at", summary.get("stopped_early")],
            ["questions dropped (counted)", summary.get("skipped") or "none"], ["params sha", summary["params_sha"]]]
    table = markdown_table(["measure", "value"], rows)
    print("\n" + table)
    payload = {"meta": run_metadata(), "command": "stem-jax " + " ".join(getattr(args, "argv", [])),
               "dataset": dataset.name, "split": args.split, "config": as_dict(config), "encoder": encoder.name,
               **{k: v for k, v in summary.items() if k != "params"},
               "total_seconds": round(time.perf_counter() - started, 1)}
    paths = write_report(out, "train-scr", payload, table)
    print(f"\nwrote {out / 'curves.png'}, {paths[0]} and checkpoints under {out / 'checkpoints'}")
    return 0

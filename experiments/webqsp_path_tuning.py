"""The path ranker with its question side fine-tuned (the encoder's top layers) against the frozen one, on webqsp-r.

    STEM_DATA_DIR=../shared/data python experiments/webqsp_path_tuning.py [--variants 0,1,2,1@1e-4] [--eval-dev]

Needs `stem-jax index` and `stem-jax train-planner` on the KG first (the template classifier is read from that
planner's folder, never written). For each variant (``tune_layers``: 0 = the frozen encoder, k = its top k layers
fine-tuned, ``k@lr`` at that learning rate, ``k+rel`` with the relation vectors corrected too), trains the path ranker on webqsp-r train less the held-out 10% (the split train-planner holds out)
and reports, on those held-out questions: the share whose top path reaches an answer, and the planner choice's
proxy (best answer of the beam, walked exactly, is right) for paths alone and mixed with the templates; the same
proxy on dev. ``--eval-dev`` also writes each variant as a planner folder under ``runs/webqsp-path-tuning/`` (the
cached planner's template classifier + this ranker) and runs `stem-jax eval --split dev` with it, paths alone and
mixed at the held-out choice's weight, with the KG's stored answer scorer: Hit / Hit@1 / F1 over all 163 questions.
Writes ``experiments/results/webqsp-path-tuning.{json,md}``. About 4 minutes a variant to train, 2 an eval.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="0,1,2,1@1e-4",
                        help="tune_layers values (0: frozen), each optionally @ its tuned layers' learning rate; "
                        "k+rel: also tune the relation vectors (tune_relations)")
    parser.add_argument("--epochs", type=int, default=None, help="path ranker epochs (default: its config's)")
    parser.add_argument("--tune-lr", type=float, default=None, help="tuned layers' learning rate (default: config's)")
    parser.add_argument("--eval-dev", action="store_true")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "webqsp-path-tuning")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="webqsp-path-tuning")
    args = parser.parse_args()

    import dataclasses

    from stem_jax.config import StemConfig
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.data.splits import hash_split
    from stem_jax.encoder import get_encoder
    from stem_jax.kg.index import build_index
    from stem_jax.plan.factory import default_planner_path
    from stem_jax.plan.path_ranker import PATHS_FOLDER, PathRankerConfig, train_path_ranker
    from stem_jax.plan.pattern import PatternPlanner
    from stem_jax.plan.training import (
        MIX_WEIGHTS,
        VAL_FRACTION,
        beam_answer_hit,
        masked_question_embedder,
        planner_candidates,
    )

    data = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data")) / "webqsp-r"
    cache = Path(os.environ.get("STEM_CACHE_DIR", ROOT / ".cache" / "stem_jax"))
    config = StemConfig()
    dataset = load_dataset(DatasetSpec(name="files", data_dir=data, split="train"))
    dev = load_dataset(DatasetSpec(name="files", data_dir=data, split="dev")).questions
    train, val = hash_split(dataset.questions, VAL_FRACTION)  # train-planner's held-out questions
    encoder = get_encoder(config.encoder)
    embed = masked_question_embedder(cache, dataset.name, encoder, config)

    shipped = default_planner_path(cache, config, dataset.name)
    templates = PatternPlanner.load(shipped, encoder=encoder, names=dataset.entity_names)
    index = build_index(dataset.triples)
    templates.index = index
    rows, catalog = {}, None
    for variant in args.variants.split(","):
        layers, _, lr = variant.partition("@")
        relations = layers.endswith("+rel")
        layers = int(layers.removesuffix("+rel"))
        name = ("frozen" if layers == 0 else f"tuned-top{layers}" + (f"-lr{lr}" if lr else "")) + \
            ("+relations" if relations else "")
        ranker_config = PathRankerConfig(seed=config.seed, tune_layers=layers, tune_relations=relations)
        if lr:
            ranker_config = dataclasses.replace(ranker_config, tune_learning_rate=float(lr))
        if args.epochs:
            ranker_config = dataclasses.replace(ranker_config, epochs=args.epochs)
        if args.tune_lr:
            ranker_config = dataclasses.replace(ranker_config, tune_learning_rate=args.tune_lr)
        began = time.perf_counter()
        ranker = train_path_ranker(train, val, index, encoder_name=encoder.name, embed=embed,
                                   names=dataset.entity_names, config=ranker_config, catalog=catalog,
                                   encoder=encoder)
        seconds = time.perf_counter() - began
        catalog = ranker.catalog
        planners = planner_candidates(templates, ranker, MIX_WEIGHTS, config.planner.beam)
        held = {k: beam_answer_hit(p, val, index) for k, p in planners.items()}
        dev_proxy = {k: beam_answer_hit(p, dev, index) for k, p in planners.items()}
        row = {"tune_layers": layers, "tune_learning_rate": ranker_config.tune_learning_rate,
               "tune_relations": relations, "relation_l2": ranker_config.relation_l2, "train_seconds": seconds, "val": ranker.report.get("val", {}),
               "held_out_beam_answer_hit": held, "dev_beam_answer_hit": dev_proxy}
        print(name, json.dumps(row, indent=1))
        if args.eval_dev:
            out = args.runs / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            for item in shipped.iterdir():
                if item.is_file() and item.name != ".lock":
                    shutil.copy2(item, out / item.name)
            ranker.save(out / PATHS_FOLDER)
            best_mix = max((k for k in held if k.startswith("both")), key=lambda k: held[k])
            row["dev"] = {}
            for mode, flags in {"paths": ["--planner.paths", "paths"],
                                best_mix: ["--planner.paths", "both", "--planner.mix_weight", best_mix.split("@")[1]]
                                }.items():
                run = args.runs / f"{name}-eval-{mode}"
                command = [sys.executable, "-m", "stem_jax.cli.main", "eval", "--dataset", "files", "--data-dir",
                           str(data), "--split", "dev", "--out", str(run), "--no-progress", "--planner", "pattern",
                           "--planner-path", str(out), *flags, "--overwrite"]
                subprocess.run(command, check=True, env=os.environ.copy())
                metrics = json.loads((run / "metrics.json").read_text())
                every = metrics.get("all_questions") or metrics["overall"]
                row["dev"][mode] = {"n": every["n"], **{k: every["mean"][k] for k in ("hit", "hit_at_1", "f1")}}
                print(name, mode, row["dev"][mode])
        rows[name] = row
    table = []
    for name, r in rows.items():
        for mode in r["held_out_beam_answer_hit"]:
            d = r.get("dev", {}).get(mode)
            table.append([name, mode, f"{100 * r['val'].get('top1_reaches_answer', 0):.1f}",
                          f"{100 * r['held_out_beam_answer_hit'][mode]:.1f}", f"{100 * r['dev_beam_answer_hit'][mode]:.1f}",
                          *([f"{100 * d[k]:.1f}" for k in ("hit", "hit_at_1", "f1")] if d else ["", "", ""]),
                          f"{r['train_seconds']:.0f}"])
    md = (f"webqsp-r: the path ranker's question side frozen or fine-tuned (top k MiniLM layers), {len(train)} training "
          f"questions, {len(val)} held out (train-planner's split), dev 163 ({len(dev)} with a linked topic: the proxy's "
          "denominator); percent. 'held-out top-1 path': "
          "the ranker's top path reaches an answer; 'beam answer hit': train-planner's choice proxy (the beam walked "
          "exactly, best answer right); dev Hit / Hit@1 / F1: `stem-jax eval --split dev` over all questions with the "
          "KG's stored answer scorer (trained for the frozen planner's beams). 'train s': wall seconds of training on the "
          "shared CPU, other jobs running.\n\n"
          + markdown_table(["question side", "planner", "held-out top-1 path", "held-out beam answer hit",
                            "dev beam answer hit", "dev Hit", "dev Hit@1", "dev F1", "train s"], table)
          + "\n\nTuned layers' learning rate: " + ", ".join(f"{k} {r['tune_learning_rate']:g}" for k, r in rows.items()
                                                            if r["tune_layers"]))
    write_report(args.out, args.name, {"meta": run_metadata(), "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

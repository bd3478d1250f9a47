"""``stem-jax``: the command-line entry point.

Every command takes the engine's defaults (the best measured configuration; ``--engine.preset=paper``
gives the paper's literal engine) and lets any field be overridden as ``--section.field=VALUE``;
``stem-jax COMMAND --help-all`` lists the ones a command reads, ``stem-jax config`` every value.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from stem_jax import devices
from stem_jax.cli import commands, distributed, gnn, planning, sweep
from stem_jax.cli.args import (
    STEM_SECTIONS,
    StemParser,
    StemSubParser,
    add_config_flags,
    add_help_all,
    annotate_defaults,
    command_parser,
    disable_abbreviations,
    mark_advanced,
    non_negative_int,
    positive_int,
)
from stem_jax.cli.bench import add_bench_stages_parser
from stem_jax.cli.calibrate import add_calibrate_parser
from stem_jax.cli.scr import add_train_scr_parser
from stem_jax.cli.serve import add_bench_serve_parser, add_serve_parser
from stem_jax.errors import UNWRITABLE, StemError, unwritable_message
from stem_jax.methods import METHODS


def add_method_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("retrieval method")
    group.add_argument("--method", choices=tuple(METHODS), default="stem",
                       help="stem (default), or a peer: safe (schema-aware subgraph matching), scr (stepwise "
                       "contrastive reasoning)")
    group.add_argument("--scr-checkpoint", type=Path, default=None, metavar="DIR",
                       help="--method scr: run folder of `stem-jax train-scr`")


EXAMPLES = """examples:
  stem-jax demo                                   # generated KG, offline, end to end
  stem-jax data-stats --dataset metaqa --hops 1,2 # needs STEM_DATA_DIR (folder holding metaqa/)
  stem-jax index --dataset metaqa                 # encode the MetaQA KB once (resumable)
  stem-jax eval --dataset metaqa --planner oracle # full test split, resumable, predictions.jsonl
  stem-jax train-planner --dataset metaqa         # learn the CPU `pattern` planner (MetaQA dev split)
  stem-jax plan --dataset metaqa --planner pattern # plans -> TensorStore store (resumable)
  stem-jax eval --dataset metaqa --planner pattern # or --plans STORE to read a plan store
  stem-jax train-gnn --dataset metaqa             # Triple-GNN for the guidance graph (resumable)
  stem-jax eval --dataset metaqa --guidance gnn --gnn-checkpoint runs/gnn-metaqa
  stem-jax ablate-guidance --dataset metaqa --gnn-checkpoint runs/gnn-metaqa  # Table 7/12 rows
  stem-jax ask "what films did [Tom Hanks] star in" --dataset metaqa   # one question, loaded engine
  stem-jax eval --dataset metaqa --method safe     # a peer method on the same data (stem, safe, scr)
  stem-jax calibrate --dataset metaqa --split dev # choose θ on dev, store it beside the embeddings
  stem-jax config --tracer.lam=1.2                # show every option and its value
"""


# The config sections each command reads, for --help-all (all stay accepted everywhere). eval, ask and
# serve follow --method instead; a command not named here reads STEM's sections.
CONFIG_SECTIONS = {
    "demo": ("tracer", "guidance", "planner", "subgraph", "encoder", "engine", "seed"),
    "index": ("encoder", "seed"),
    "data-stats": ("subgraph", "engine", "seed"),
    "train-planner": ("planner", "encoder", "seed"),
    "plan": ("planner", "encoder", "seed"),
    "train-gnn": ("gnn", "guidance", "subgraph", "encoder", "seed"),
    "train-scr": ("scr", "subgraph", "encoder", "seed"),
    "config": None,  # every section
}
METHOD_COMMANDS = ("eval", "ask", "serve")


# Groups whose flags --help leaves to --help-all but for the ones named here: the planner's model,
# server and scorer flags only matter for one planner, the multi-host flags for a cluster job.
ADVANCED_GROUPS = {"planner": ("--planner", "--plans"), "several processes": ()}


def mark_advanced_groups(parser: argparse.ArgumentParser) -> None:
    """Mark the rarely needed flags of :data:`ADVANCED_GROUPS` in every subcommand (see mark_advanced)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                mark_advanced_groups(sub)
    for group in parser._action_groups:
        for title, keep in ADVANCED_GROUPS.items():
            if (group.title or "").startswith(title):
                mark_advanced(*[a for a in group._group_actions if not set(a.option_strings) & set(keep)])


def set_config_sections(parser: argparse.ArgumentParser) -> None:
    """Tell every subcommand's :class:`StemParser` which config sections its --help-all lists."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if isinstance(sub, StemParser):
                    sub.method_sections = name in METHOD_COMMANDS
                    sub.config_sections = CONFIG_SECTIONS.get(name, STEM_SECTIONS)
                add_help_all(sub)  # every command takes it, also those with nothing more to show
                set_config_sections(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = StemParser(
        prog="stem-jax",
        description="Structure-Tracing Evidence Mining (STEM) over knowledge graphs, in JAX.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--cpu-devices", default=None, metavar="N",
                        help="XLA CPU devices to split traced batches over: a count or 'auto', one per core "
                        f"(default ${devices.ENV}, else {devices.DEFAULT}). Accepted before or after the command. "
                        "Ignored on a GPU or when XLA_FLAGS already sets --xla_force_host_platform_device_count")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=StemSubParser)

    demo = command_parser(sub, "demo", help="run the pipeline on the generated demo KG (offline)",
                          description="Generate the demo KG, index it, encode it, and print a result table.")
    demo.add_argument("--out", type=Path, default=None, help="where to write demo.json/.md (default runs/demo)")
    demo.set_defaults(func=commands.cmd_demo)

    index = command_parser(sub, "index", dataset="metaqa", help="build the embedding caches of a dataset's KG",
                           description="Encode entities, relations and serialized triples once into TensorStore; "
                           "a rerun is a no-op and a killed run resumes.")
    index.set_defaults(func=commands.cmd_index)

    stats = command_parser(sub, "data-stats", cache=False, help="question counts, subgraph sizes and answer coverage",
                           description="Load a dataset, report skipped records, per-question subgraph sizes, "
                           "the share of questions whose answers are inside, and the gold-path upper bound.")
    stats.add_argument("--out", type=Path, default=None, help="write JSON + Markdown here")
    stats.add_argument("--no-progress", action="store_true", help="hide progress bars")
    stats.set_defaults(func=commands.cmd_data_stats)

    evaluate = command_parser(sub, "eval", help="trace a whole split and score it (resumable)",
                              description="Plan, anchor and trace every question of a split, write predictions.jsonl "
                              "(resumable: a rerun skips finished questions), metrics.json and metrics.md.")
    planning.add_planner_flags(evaluate, plans=True)
    gnn.add_guidance_flags(evaluate)
    add_method_flags(evaluate)
    distributed.add_distributed_flags(evaluate)
    evaluate.add_argument("--out", type=Path, default=None, metavar="DIR",
                          help="run folder (default runs/<dataset>-<split>-<planner>-<hash of the settings>)")
    evaluate.add_argument("--overlap", type=non_negative_int, default=1, metavar="N",
                          help="chunks traced ahead on a background thread while the one before is ranked and "
                          "written (0: one chunk after the other; the predictions are the same)")
    evaluate.add_argument("--workers", default="1", metavar="N",
                          help="local processes, each scoring every N-th question into --out/shard-<i>-of-<N>/, "
                          "merged and scored when all finish (auto: one per core; default 1: this process alone). "
                          "Planning and ranking are Python, so processes, not threads, use every core; each holds "
                          "its own engine (memory N-fold)")
    evaluate.add_argument("--overwrite", action="store_true",
                          help="drop the predictions of a different run in --out instead of refusing to mix them")
    evaluate.set_defaults(func=commands.cmd_eval)

    ask = command_parser(sub, "ask", help="answer a question with a loaded engine (answers, evidence chains, timing)",
                         description="Load the dataset's KG, caches and planner once and answer the given question(s). "
                         "Name the topic entity in [brackets], or the entity linker finds it (exact, case-insensitive, "
                         "then fuzzy n-gram match).")
    ask.add_argument("question", nargs="+", metavar="QUESTION", help="e.g. 'what films did [Tom Hanks] star in'")
    planning.add_planner_flags(ask, default="pattern")
    gnn.add_guidance_flags(ask)
    add_method_flags(ask)
    ask.add_argument("--top", type=positive_int, default=10, metavar="N", help="answers and chains to print (default 10)")
    ask.add_argument("--warm", action="store_true", help="answer once to compile, then time a second call")
    ask.set_defaults(func=commands.cmd_ask)
    ask.description += f" Default planner: {ask.get_default('planner')} (--planner picks another)."
    planning.add_train_planner_parser(sub)
    planning.add_plan_parser(sub)
    gnn.add_train_gnn_parser(sub)
    add_train_scr_parser(sub)
    gnn.add_ablate_parser(sub)
    sweep.add_sweep_parser(sub)
    add_calibrate_parser(sub)
    distributed.add_score_parser(sub)
    add_serve_parser(sub, add_method_flags)

    bench = sub.add_parser("bench", help="benchmarks (tables + JSON under experiments/results/)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH")
    bench_trace = command_parser(bench_sub, "trace", dataset="metaqa", help="jit tracer vs reference tracer on the same runs",
                                 description="Trace the same oracle-planned questions with the JAX tracer and the "
                                 "reference tracer; report the speed ratio, compiles, memory and agreement.")
    bench_trace.set_defaults(hops=(2,))
    bench_trace.add_argument("--num-questions", dest="num_questions", type=int, default=256, help="questions to trace (default 256)")
    bench_trace.add_argument("--repeats", type=int, default=3, help="timed JAX repeats after the compile call")
    bench_trace.add_argument("--out", type=Path, default=None, help="where to write results (default runs/bench)")
    bench_trace.add_argument("--record", action="store_true",
                             help="write into experiments/results/ (the committed results) instead of --out")
    bench_trace.set_defaults(func=commands.cmd_bench_trace)

    add_bench_stages_parser(bench_sub)
    add_bench_serve_parser(bench_sub)

    config = sub.add_parser("config", help="print every config option with its value")
    add_config_flags(config)
    config.set_defaults(func=commands.cmd_config)
    disable_abbreviations(parser)
    annotate_defaults(parser)
    mark_advanced_groups(parser)
    set_config_sections(parser)
    return parser


def _version() -> str:
    import platform

    import stem_jax

    try:
        from importlib.metadata import version

        jax = version("jax")
    except Exception:  # noqa: BLE001 - a version line must not fail
        jax = "not installed"
    return f"stem-jax {stem_jax.__version__} (jax {jax}, python {platform.python_version()})"


_TRAIN_FIX = re.compile(r"`stem-jax train-planner[^`]*`( first)?( \(--out this folder\))?")
_NO_PLANNER_AT = re.compile(r"(?:no trained pattern planner at (\S+)|^(\S+): no trained pattern planner here)", re.M)
# flags of this command that say which KG, cache and encoder a trained planner belongs to
_SAME_KG_FLAGS = ("--dataset", "--data-dir", "--triples", "--delimiter", "--entity-names", "--relation-names",
                  "--cache-dir")


def _train_command(args: argparse.Namespace, out: str | None) -> str:
    """``stem-jax train-planner`` with this command's KG, cache and config flags: a command to paste."""
    argv, kept, i = list(getattr(args, "argv", []) or []), [], 0
    while i < len(argv):
        token = argv[i]
        name = token.split("=", 1)[0]
        takes_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if name in _SAME_KG_FLAGS or name.startswith(("--encoder.", "--planner.")):
            kept += [token] + ([argv[i + 1]] if takes_value else [])
        i += 2 if takes_value else 1
    if "--dataset" not in [t.split("=", 1)[0] for t in kept] and getattr(args, "dataset", None):
        kept = ["--dataset", str(args.dataset)] + kept
    if out:
        kept += ["--out", out]
    return shlex.join(["stem-jax", "train-planner", *kept])


def pasteable(message: str, args: argparse.Namespace) -> str:
    """``message`` with its "run `stem-jax train-planner ...` first" fix made a command to paste: this command's
    own dataset, cache and config flags (and ``--out`` the folder it looked in), not a description of them."""
    if not _TRAIN_FIX.search(message):
        return message
    where = _NO_PLANNER_AT.search(message)
    folder = (where.group(1) or where.group(2)) if where else None
    command = _train_command(args, folder)
    return _TRAIN_FIX.sub(lambda _: f"`{command}` first", message, count=1)


_SPLIT_OF = {"train-planner": "train", "calibrate": "dev"}  # commands that cannot run without their split's file


def _check_question_file(args: argparse.Namespace) -> None:
    """``train-planner`` and ``calibrate`` on a files KG: the split's question file must exist (else the run
    loads 0 questions and fails later without naming the file)."""
    if args.command not in _SPLIT_OF or getattr(args, "dataset", None) != "files":
        return
    if getattr(args, "questions", None) is not None:
        return
    from stem_jax.data.files import find_questions

    split = getattr(args, "split", None)
    if args.command == "train-planner" and split is None:
        split = getattr(args, "train_split", None) or _SPLIT_OF["train-planner"]
    split = split or _SPLIT_OF[args.command]
    triples = getattr(args, "triples", None)
    folder = getattr(args, "data_dir", None) or (Path(triples).parent if triples is not None else None)
    if folder is None or not Path(folder).is_dir() or find_questions(Path(folder), split) is not None:
        return
    needs = "training questions" if args.command == "train-planner" else "dev questions to choose its settings on"
    raise StemError(f"{args.command} needs {needs}: no {split}.jsonl (or {split}.txt) in {folder}\n  how to fix: "
                    f"write {Path(folder) / f'{split}.jsonl'} (one question per line, as test.jsonl; "
                    "docs/your-own-kg.md), or pass --split with a split that has a file, or --questions FILE")


def take_cpu_devices(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without its ``--cpu-devices N`` / ``--cpu-devices=N`` (wherever it stands), and N (None: absent).

    Read before the command line is parsed, so it can stand after the command too, and before anything
    starts JAX's backend (the device count is fixed then)."""
    rest, value, i = [], None, 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            rest += argv[i:]
            break
        if token == "--cpu-devices":
            if i + 1 >= len(argv):
                raise StemError("--cpu-devices needs a value\n  how to fix: --cpu-devices N (1 = one device) or "
                                "--cpu-devices auto")
            value, i = argv[i + 1], i + 2
            continue
        if token.startswith("--cpu-devices="):
            value, i = token.split("=", 1)[1], i + 1
            continue
        rest.append(token)
        i += 1
    return rest, value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    full = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, cpu_devices = take_cpu_devices(full)
        devices.configure_cpu_devices(cpu_devices)
    except StemError as err:
        print(f"stem-jax: error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.argv = full
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _check_question_file(args)
        return args.func(args)
    except StemError as err:
        print(f"stem-jax {args.command}: error: {pasteable(str(err), args)}", file=sys.stderr)
        return 2
    except ValueError as err:  # bad option values from config overrides
        if "--" in str(err):
            print(f"stem-jax {args.command}: error: {err}", file=sys.stderr)
            return 2
        raise
    except OSError as err:
        if err.errno not in UNWRITABLE:
            raise
        print(f"stem-jax {args.command}: error: {unwritable_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nstem-jax {args.command}: interrupted; finished work is kept, rerun to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""Shared command-line flags: dataset selection and dotted config overrides."""

from __future__ import annotations

import argparse
from pathlib import Path

from stem_jax import validation
from stem_jax.config import StemConfig, apply_overrides, config_fields, default_cache_dir
from stem_jax.data.registry import DATASETS, DatasetSpec
from stem_jax.errors import StemError


def parse_hops(text: str) -> tuple[int, ...]:
    """``--hops 1,2``: :func:`stem_jax.validation.parse_hops` (the Python API's check) as an argparse type."""
    try:
        return validation.parse_hops(text, flag="--hops")
    except StemError as err:
        raise argparse.ArgumentTypeError(str(err).split("\n")[0]) from None


def positive_int(text: str) -> int:
    """A flag taking a positive whole number (``--limit``, ``--top``): :func:`stem_jax.validation.parse_limit`."""
    try:
        return validation.parse_limit(text, flag="expected")  # type: ignore[return-value]
    except StemError as err:
        raise argparse.ArgumentTypeError(str(err).split("\n")[0].removeprefix("expected: ")) from None


def add_dataset_flags(parser: argparse.ArgumentParser, default: str = "demo") -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", choices=DATASETS, default=default,
                       help=f"which dataset (default: {default}; 'demo' is generated, the others read --data-dir)")
    group.add_argument("--split", default="test", help="split to load: test, dev (demo also: train)")
    group.add_argument("--hops", type=parse_hops, default=(1, 2, 3), help="hop counts to load, e.g. 1,2 (default 1,2,3)")
    group.add_argument("--data-dir", type=Path, default=None,
                       help="folder holding metaqa/ and fb15k-237/ (default: $STEM_DATA_DIR)")
    group.add_argument("--questions", type=Path, default=None,
                       help="your own MetaQA-format question file (question with [topic]<TAB>a1|a2)")
    group.add_argument("--qtypes", type=Path, default=None, help="qtype file matching --questions line by line")
    group.add_argument("--kb", type=Path, default=None, help="MetaQA KB file (default: kb.txt, else the partial KB)")
    group.add_argument("--rog-path", type=Path, default=None, help="RoG .jsonl/.parquet file or dataset folder")
    group.add_argument("--triples", type=Path, default=None,
                       help="files: head,relation,tail file (.tsv/.csv/.jsonl; default <data-dir>/triples.*)")
    group.add_argument("--entity-names", type=Path, default=None, help="files: id<TAB>name file for entities")
    group.add_argument("--relation-names", type=Path, default=None, help="files: id<TAB>name file for relations")
    group.add_argument("--delimiter", default=None, help="files: field separator (e.g. '|' or tab; default by extension)")
    group.add_argument("--limit", type=positive_int, default=None, help="keep the first N questions per hop (quick runs)")
    group.add_argument("--strict", action="store_true", help="stop at the first bad input line instead of skipping it")


def add_cache_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cache")
    group.add_argument("--cache-dir", type=Path, default=None,
                       help="where embeddings live (default: $STEM_CACHE_DIR or ~/.cache/stem_jax)")
    group.add_argument("--rebuild", action="store_true", help="delete and recompute the embedding caches (KG tables and schema-triple texts)")
    group.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("config (paper defaults; any field as --section.field=VALUE)")
    for name, default, _ in config_fields(StemConfig()):
        group.add_argument(f"--{name}", dest=f"cfg:{name}", default=None, metavar=type(default).__name__.upper(),
                           help=f"default {default}")


def config_from_args(args: argparse.Namespace) -> StemConfig:
    overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg:") and v is not None}
    return apply_overrides(StemConfig(), overrides)


def check_dataset_flags(args: argparse.Namespace) -> None:
    """Flags that the chosen dataset would ignore are an error, not a silent no-op (issue 13, rows 11-13)."""
    dataset = args.dataset
    only = {"questions": ("metaqa", "files"), "qtypes": ("metaqa",), "kb": ("metaqa",), "rog_path": ("rog",),
            "triples": ("files",), "entity_names": ("files",), "relation_names": ("files",), "delimiter": ("files",)}
    for dest, owners in only.items():
        if getattr(args, dest, None) is not None and dataset not in owners:
            flag = "--" + dest.replace("_", "-")
            raise StemError(f"{flag} is only read with --dataset {' or '.join(owners)}, not --dataset {dataset}\n"
                            f"  how to fix: add --dataset {owners[0]}, or drop {flag}")
    if getattr(args, "qtypes", None) is not None and getattr(args, "questions", None) is None:
        raise StemError("--qtypes describes the lines of --questions, which is missing\n"
                        "  how to fix: pass --questions FILE too, or drop --qtypes")
    if getattr(args, "questions", None) is None:
        validation.check_hops_for(dataset, getattr(args, "hops", None), flag="--hops")
    plans_given = getattr(args, "plans", None) is not None
    if (getattr(args, "planner", None) == "oracle" and not plans_given and dataset == "metaqa"
            and getattr(args, "questions", None) is not None and getattr(args, "qtypes", None) is None):
        raise StemError("the oracle planner follows each question's gold relation path, which --questions without "
                        "--qtypes does not give\n"
                        "  how to fix: pass --qtypes FILE (line i = relation-path type of question i), "
                        "or use --planner pattern")


def dataset_spec(args: argparse.Namespace, config: StemConfig) -> DatasetSpec:
    check_dataset_flags(args)
    return DatasetSpec(
        name=args.dataset, split=args.split, hops=args.hops, data_dir=args.data_dir,
        questions=args.questions, qtypes=args.qtypes, kb=args.kb, rog_path=args.rog_path,
        strict=args.strict, limit=args.limit, seed=config.seed,
        triples=getattr(args, "triples", None), entity_names=getattr(args, "entity_names", None),
        relation_names=getattr(args, "relation_names", None), delimiter=getattr(args, "delimiter", None),
    )


def cache_root(args: argparse.Namespace) -> Path:
    return validation.checked_cache_dir(args.cache_dir) if args.cache_dir else default_cache_dir()


def disable_abbreviations(parser: argparse.ArgumentParser) -> None:
    """No prefix matching anywhere (``--tracer.la=2`` must not mean ``--tracer.lam``): this parser and every
    subparser below it, however deep."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                disable_abbreviations(sub)


def check_out_path(path: Path | None) -> None:
    """An ``--out`` that names an existing file is an error before any loading work."""
    if path is not None and path.exists() and not path.is_dir():
        raise StemError(f"--out {path} is a file, not a folder\n"
                        "  how to fix: pass --out a folder path (it is created if missing)")

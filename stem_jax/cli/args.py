"""Shared command-line flags: dataset selection and dotted config overrides."""

from __future__ import annotations

import argparse
from pathlib import Path

from stem_jax.config import StemConfig, apply_overrides, config_fields, default_cache_dir
from stem_jax.data.registry import DATASETS, DatasetSpec


def parse_hops(text: str) -> tuple[int, ...]:
    try:
        hops = tuple(sorted({int(h) for h in text.split(",") if h.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hops expects numbers like 1,2,3, got {text!r}") from None
    if not hops or any(h < 1 for h in hops):
        raise argparse.ArgumentTypeError(f"--hops expects positive numbers like 1,2,3, got {text!r}")
    return hops


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
    group.add_argument("--limit", type=int, default=None, help="keep the first N questions per hop (quick runs)")
    group.add_argument("--strict", action="store_true", help="stop at the first bad input line instead of skipping it")


def add_cache_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cache")
    group.add_argument("--cache-dir", type=Path, default=None,
                       help="where embeddings live (default: $STEM_CACHE_DIR or ~/.cache/stem_jax)")
    group.add_argument("--rebuild", action="store_true", help="delete and recompute the embedding caches")
    group.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("config (paper defaults; any field as --section.field=VALUE)")
    for name, default, _ in config_fields(StemConfig()):
        group.add_argument(f"--{name}", dest=f"cfg:{name}", default=None, metavar=type(default).__name__.upper(),
                           help=f"default {default}")


def config_from_args(args: argparse.Namespace) -> StemConfig:
    overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("cfg:") and v is not None}
    return apply_overrides(StemConfig(), overrides)


def dataset_spec(args: argparse.Namespace, config: StemConfig) -> DatasetSpec:
    return DatasetSpec(
        name=args.dataset, split=args.split, hops=args.hops, data_dir=args.data_dir,
        questions=args.questions, qtypes=args.qtypes, kb=args.kb, rog_path=args.rog_path,
        strict=args.strict, limit=args.limit, seed=config.seed,
    )


def cache_root(args: argparse.Namespace) -> Path:
    return args.cache_dir or default_cache_dir()

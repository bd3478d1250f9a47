"""One entry point that loads any supported dataset by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from stem_jax.config import default_data_dir
from stem_jax.data.demo_kg import load_demo
from stem_jax.data.fb15k import load_fb15k237
from stem_jax.data.files import load_files
from stem_jax.data.metaqa import load_metaqa
from stem_jax.data.rog import load_rog
from stem_jax.data.sampling import sample_per_hop
from stem_jax.data.types import Dataset
from stem_jax.data.wc2014 import load_wc2014
from stem_jax.errors import DataError

DATASETS = ("demo", "metaqa", "fb15k-237", "rog", "files", "wc2014", "wc2014-p1", "wc2014-p2", "wc2014-c")
# WorldCup2014: every file, or one (they share one KB, hence one index, embedding cache and calibration)
WC2014_SUBSETS = {"wc2014": ("P1", "P2", "C"), "wc2014-p1": ("P1",), "wc2014-p2": ("P2",), "wc2014-c": ("C",)}
# Names users try that a loader above serves under another name: the CLI and load_dataset point there.
DATASET_ALIASES = {
    "webqsp": "WebQSP comes in through --dataset rog --rog-path PATH (RoG-format WebQSP: a .jsonl file, or a "
              "folder with <split>.jsonl or data/<split>-*.parquet)",
    "cwq": "CWQ comes in through --dataset rog --rog-path PATH (RoG-format CWQ: a .jsonl file, or a folder "
           "with <split>.jsonl or data/<split>-*.parquet)",
    "fb15k237": "use --dataset fb15k-237",
    "fb15k": "only FB15k-237 is loaded here: use --dataset fb15k-237",
    "worldcup2014": "use --dataset wc2014 (or wc2014-p1, wc2014-p2, wc2014-c for one file)",
    "worldcup": "use --dataset wc2014 (or wc2014-p1, wc2014-p2, wc2014-c for one file)",
}


def dataset_hint(name: str) -> str | None:
    """How to load ``name`` when it is not a dataset name but a user would reasonably try it
    (``webqsp`` -> ``--dataset rog``), else None."""
    return DATASET_ALIASES.get(name.strip().lower().replace("_", "").replace("-", ""))


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """What to load; mirrors the CLI's data flags."""

    name: str = "demo"
    split: str = "test"
    hops: tuple[int, ...] = (1, 2, 3)
    data_dir: Path | None = None  # defaults to $STEM_DATA_DIR
    questions: Path | None = None  # a user's own MetaQA-format question file; for `files`: JSONL or text
    qtypes: Path | None = None
    kb: Path | None = None
    rog_path: Path | None = None
    strict: bool = False
    limit: int | None = None  # first N questions per hop, for quick runs
    seed: int = 0
    # `files` (your own KG, see stem_jax.data.files): data_dir is the KG folder; these override its files.
    triples: Path | None = None
    entity_names: Path | None = None
    relation_names: Path | None = None
    delimiter: str | None = None  # triples/name files; default from the extension


def _data_root(spec: DatasetSpec, folder: str) -> Path:
    root = spec.data_dir or default_data_dir()
    if root is None:
        raise DataError(
            f"no data folder for {spec.name}",
            fix=f"set STEM_DATA_DIR (the folder holding {folder}/) or pass --data-dir",
        )
    return Path(root) / folder


def load_dataset(spec: DatasetSpec) -> Dataset:
    """Load the questions and KG ``spec`` names; raises :class:`DataError` with a fix on bad input."""
    if spec.name == "demo":
        dataset = load_demo(split=spec.split, seed=spec.seed)
        dataset.questions = [q for q in dataset.questions if q.hops in spec.hops]
    elif spec.name == "metaqa":
        files: Sequence[tuple[Path, Path | None]] = [(spec.questions, spec.qtypes)] if spec.questions else []
        dataset = load_metaqa(
            _data_root(spec, "metaqa") if not (spec.questions and spec.kb) else spec.kb.parent,
            split=spec.split, hops=spec.hops, kb_path=spec.kb, question_files=files, strict=spec.strict,
        )
    elif spec.name == "fb15k-237":
        dataset = load_fb15k237(_data_root(spec, "fb15k-237"), split=spec.split, strict=spec.strict)
    elif spec.name == "rog":
        if spec.rog_path is None:
            raise DataError("--dataset rog needs --rog-path", fix="pass a RoG .jsonl/.parquet file or dataset folder")
        dataset = load_rog(spec.rog_path, split=spec.split, strict=spec.strict)
    elif spec.name == "files":
        if spec.data_dir is None and spec.triples is None:
            raise DataError("--dataset files needs --data-dir FOLDER (holding triples.tsv) or --triples FILE",
                            fix="see `stem-jax index --help` and the README section 'Your own KG'")
        dataset = load_files(
            folder=spec.data_dir, triples=spec.triples, questions=spec.questions, entity_names=spec.entity_names,
            relation_names=spec.relation_names, delimiter=spec.delimiter, split=spec.split, strict=spec.strict,
        )
    elif spec.name in WC2014_SUBSETS:
        dataset = load_wc2014(_data_root(spec, "wc2014"), split=spec.split, subsets=WC2014_SUBSETS[spec.name],
                              seed=spec.seed, strict=spec.strict)
        dataset.questions = [q for q in dataset.questions if q.hops in spec.hops]
    else:
        raise DataError(f"unknown dataset {spec.name!r}",
                        fix=dataset_hint(spec.name) or f"choose one of {', '.join(DATASETS)}")
    if spec.limit is not None:
        dataset.questions = sample_per_hop(dataset.questions, spec.limit, rule="first")
        dataset.dropped = []  # a sample of the split: its metrics are over the questions kept
    return dataset

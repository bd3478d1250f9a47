"""Write MetaQA (or the generated demo KG) in the generic `files` format (triples.tsv + <split>.jsonl).

Command (from the repo root):

    STEM_DATA_DIR=../shared/data python experiments/export_metaqa_generic.py --out runs/metaqa-generic
    python experiments/export_metaqa_generic.py --dataset demo --out runs/demo-kg --plain-text

Options: --hops 1,2,3 (default), --splits dev,test (default; demo: train,dev,test), --limit N (first N questions per hop),
--plain-text (also <split>.txt: one question per line without brackets, answers after a tab, for the
entity linker). Cost: a few seconds. The folder is then a `--dataset files --data-dir` KG:

    stem-jax index --dataset files --data-dir runs/metaqa-generic
    stem-jax eval --dataset files --data-dir runs/metaqa-generic --planner oracle

Each question's gold path is MetaQA's qtype composed into relations (stem_jax.plan.oracle.metaqa_gold_path),
so the oracle plans the exported questions exactly as it plans MetaQA's own (tests/data/test_files_dataset.py
checks the same index and the same metrics). Never write the export into the repository: the data is
CC BY 3.0 and lives in $STEM_DATA_DIR.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from stem_jax.data.files import write_files
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.errors import StemError
from stem_jax.plan.oracle import metaqa_gold_path


def export(data_root: Path | None, folder: Path, *, hops: Sequence[int] = (1, 2, 3),
           splits: Sequence[str] = ("dev", "test"), limit: int | None = None, plain_text: bool = False,
           dataset: str = "metaqa") -> dict[str, int]:
    """Export MetaQA under ``data_root`` (the folder holding metaqa/), or the demo KG, into ``folder``."""
    per_split = {}
    triples = None
    for split in splits:
        data = load_dataset(DatasetSpec(name=dataset, data_dir=Path(data_root) if data_root else None, split=split,
                                        hops=tuple(hops), limit=limit))
        triples = data.triples
        questions = []
        for q in data.questions:
            try:
                path = q.gold_path or (metaqa_gold_path(q.qtype) if q.qtype else None)
            except StemError:
                path = None  # the qtype stays in the record; the oracle reports it as unplannable, as for MetaQA
            questions.append(dataclasses.replace(q, gold_path=path))
        per_split[split] = questions
    if triples is None:
        raise StemError("nothing to export: pass at least one split")
    write_files(folder, triples, per_split)
    if plain_text:
        for split, questions in per_split.items():
            lines = [f"{q.text}\t{'|'.join(q.answers)}\n" for q in questions]
            (Path(folder) / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
    return {split: len(qs) for split, qs in per_split.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write (outside the repository)")
    parser.add_argument("--dataset", choices=("metaqa", "demo"), default="metaqa")
    parser.add_argument("--data-dir", type=Path, default=os.environ.get("STEM_DATA_DIR"),
                        help="folder holding metaqa/ (default $STEM_DATA_DIR)")
    parser.add_argument("--hops", default="1,2,3")
    parser.add_argument("--splits", default=None, help="default dev,test (demo: train,dev,test)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--plain-text", action="store_true")
    args = parser.parse_args(argv)
    if args.data_dir is None and args.dataset == "metaqa":
        parser.error("set STEM_DATA_DIR or pass --data-dir")
    splits = args.splits or ("train,dev,test" if args.dataset == "demo" else "dev,test")
    counts = export(args.data_dir, args.out, hops=tuple(int(h) for h in args.hops.split(",")),
                    splits=tuple(splits.split(",")), limit=args.limit, plain_text=args.plain_text,
                    dataset=args.dataset)
    print(f"wrote {args.out}: triples.tsv, " + ", ".join(f"{s}.jsonl ({n} questions)" for s, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""FB15k-237 loader: Freebase-mid triples plus ``entity2text`` / ``relation2text`` names.

FB15k-237 has no questions. Each distinct ``(head, relation)`` of the evaluation split becomes a
1-hop question ("what is the film genre of Jeremy Irons?"). STEM retrieves evidence rather than
predicting missing links, so the KG is the union of all three splits and the answers are every
tail of that pair in it: the fact asked about is in the graph, as in KGQA benchmarks. Entity ids
stay Freebase mids; readable names live in ``Dataset.entity_names``.
"""

from __future__ import annotations

from pathlib import Path

from stem_jax.data.types import Dataset, PathStep, Question, SkipReport, Triple, read_lines
from stem_jax.errors import DataError


def _resolve(root: Path, name: str) -> Path:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise DataError(f"{name} not found", path=str(root), fix="set STEM_DATA_DIR to the folder holding fb15k-237/")


def read_tsv_triples(path: Path, skips: SkipReport, *, strict: bool = False) -> list[Triple]:
    triples: list[Triple] = []
    for lineno, line in read_lines(path, skips, strict=strict):
        parts = line.split("\t")
        if len(parts) != 3 or not all(parts):
            if not line.strip():
                continue
            if strict:
                raise DataError("malformed triple line (expected head<TAB>relation<TAB>tail)", path=str(path),
                                line=lineno, fix="fix or delete the line, or drop --strict to skip it")
            skips.skip("malformed triple line", f"{path}:{lineno}")
            continue
        triples.append((parts[0], parts[1], parts[2]))
    return triples


def read_names(path: Path, skips: SkipReport | None = None, *, strict: bool = False) -> dict[str, str]:
    """``id<TAB>name`` lines; malformed or undecodable lines are counted skips (errors with ``strict``)."""
    skips = SkipReport() if skips is None else skips
    names: dict[str, str] = {}
    for lineno, line in read_lines(path, skips, strict=strict):
        if not line.strip():
            continue
        key, sep, value = line.partition("\t")
        if not sep or not key:
            if strict:
                raise DataError("malformed name line (expected id<TAB>name)", path=str(path), line=lineno,
                                fix="fix or delete the line, or drop --strict to skip it")
            skips.skip("malformed name line (expected id<TAB>name)", f"{path}:{lineno}")
            continue
        names[key] = value.strip()
    return names


def relation_phrase(relation: str, relation_names: dict[str, str]) -> str:
    """``/film/film/genre`` -> the last readable segment ("film genre")."""
    text = relation_names.get(relation, relation)
    return text.split(".")[-1].strip() if "." in text else text


def load_fb15k237(root: Path, *, split: str = "test", strict: bool = False) -> Dataset:
    if not root.is_dir():
        raise DataError("FB15k-237 folder not found", path=str(root), fix="set STEM_DATA_DIR to the folder holding fb15k-237/")
    split_file = {"test": "test.txt", "dev": "valid.txt", "valid": "valid.txt"}.get(split)
    if split_file is None:
        raise DataError(f"unknown FB15k-237 split {split!r}", fix="use --split test or --split dev")
    skips = SkipReport()
    eval_path = _resolve(root, split_file)
    eval_triples = read_tsv_triples(eval_path, skips, strict=strict)
    kg = read_tsv_triples(_resolve(root, "train.txt"), skips, strict=strict)
    kg += read_tsv_triples(_resolve(root, "valid.txt"), skips, strict=strict)
    kg += read_tsv_triples(_resolve(root, "test.txt"), skips, strict=strict)
    kg = list(dict.fromkeys(kg))
    tails: dict[tuple[str, str], list[str]] = {}
    for head, relation, tail in kg:
        tails.setdefault((head, relation), []).append(tail)
    names = read_names(_resolve(root, "entity2text.txt"), skips, strict=strict)
    relation_names = read_names(_resolve(root, "relation2text.txt"), skips, strict=strict)
    first_line: dict[tuple[str, str], int] = {}
    for lineno, (head, relation, _) in enumerate(eval_triples, start=1):
        first_line.setdefault((head, relation), lineno)
    questions = []
    for (head, relation), line in first_line.items():
        text = f"what is the {relation_phrase(relation, relation_names)} of {names.get(head, head)}?"
        questions.append(
            Question(
                qid=f"fb15k-237/{split}/{line}",
                text=text,
                topic_entities=(head,),
                answers=tuple(dict.fromkeys(tails[(head, relation)])),
                hops=1,
                gold_path=(PathStep(relation, True),),
                source=f"{eval_path}:{line}",
            )
        )
    if not questions:
        raise DataError(f"no usable triples in the {split} split", path=str(eval_path),
                        fix="see why: " + ("; ".join(skips.lines()) or "the file is empty"))
    return Dataset(name="fb15k-237", questions=questions, triples=kg, skips=skips, entity_names=names)

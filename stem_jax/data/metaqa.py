"""MetaQA loader: ``kb.txt`` (``head|relation|tail``) plus vanilla QA files and their qtypes.

QA lines look like ``which films did [Ang Lee] direct<TAB>Lust, Caution|Hulk``; the topic entity is
the bracketed mention, answers are split on ``|``, and line *i* of ``qa_{split}_qtype.txt`` is the
relation-path type of QA line *i*.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from stem_jax.data.types import (
    UNDECODABLE,
    Dataset,
    Question,
    SkipReport,
    Triple,
    file_lines,
    read_lines,
)
from stem_jax.errors import DataError

KB_CANDIDATES = ("kb.txt", "kb_PARTIAL_keallm_reconstruction.txt")
_TOPIC = re.compile(r"\[([^\[\]]+)\]")


def find_kb(root: Path) -> Path:
    """The complete ``kb.txt`` when present, else the partial reconstruction shipped in shared data."""
    for name in KB_CANDIDATES:
        if (root / name).is_file():
            return root / name
    raise DataError(
        f"no MetaQA KB found (looked for {', '.join(KB_CANDIDATES)})",
        path=str(root),
        fix="set STEM_DATA_DIR to the folder holding metaqa/, or pass --kb PATH",
    )


def read_kb(path: Path, skips: SkipReport, *, strict: bool = False) -> list[Triple]:
    """Read ``head|relation|tail`` lines; malformed lines are counted skips (or errors when strict)."""
    if not path.is_file():
        raise DataError("KB file not found", path=str(path), fix="check the path or STEM_DATA_DIR")
    triples: list[Triple] = []
    seen: set[Triple] = set()
    for lineno, line in read_lines(path, skips, strict=strict):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) == 3:
            triple = (parts[0].strip(), parts[1].strip(), parts[2].strip())
        if len(parts) != 3 or not (triple[0] and triple[1] and triple[2]):
            if strict:
                raise DataError(
                    f"malformed KB line {line[:80]!r}: expected head|relation|tail",
                    path=str(path), line=lineno, fix="fix or delete the line, or drop --strict to skip it",
                )
            skips.skip("malformed KB line (expected head|relation|tail)", f"{path}:{lineno}")
            continue
        if triple in seen:
            skips.skip("duplicate KB triple", f"{path}:{lineno}")
            continue
        seen.add(triple)
        triples.append(triple)
    if not triples:
        raise DataError("KB has no triples", path=str(path), fix="point --kb at a non-empty head|relation|tail file")
    return triples


def read_questions(
    qa_path: Path,
    *,
    entities: set[str],
    skips: SkipReport,
    qtype_path: Path | None = None,
    hops: int | None = None,
    qid_prefix: str | None = None,
    strict: bool = False,
    dropped: list | None = None,
) -> list[Question]:
    """Read a MetaQA-format question file (a user's own questions work too, with or without qtypes).

    ``dropped`` collects (qid, reason, hops) of questions skipped for a topic the KB lacks: misses in the
    metrics over every question of the split."""
    if not qa_path.is_file():
        raise DataError("question file not found", path=str(qa_path), fix="check the path or STEM_DATA_DIR")
    lines = file_lines(qa_path)
    qtypes: list[str | DataError] | None = None
    if qtype_path is not None:
        if not qtype_path.is_file():
            raise DataError("qtype file not found", path=str(qtype_path), fix="pass the matching qa_*_qtype.txt or none")
        qtypes = file_lines(qtype_path)
        if len(qtypes) != len(lines):
            raise DataError(
                f"{len(qtypes)} qtype lines for {len(lines)} questions in {qa_path}",
                path=str(qtype_path),
                fix="line i of the qtype file must describe line i of the question file",
            )
    prefix = qid_prefix if qid_prefix is not None else qa_path.stem
    questions: list[Question] = []
    for lineno, line in enumerate(lines, start=1):
        where = f"{qa_path}:{lineno}"

        def bad(reason: str, fix: str, detail: str = "", lineno: int = lineno, where: str = where) -> None:
            if strict:
                raise DataError(f"{reason} {detail}".strip(), path=str(qa_path), line=lineno, fix=fix)
            skips.skip(reason, f"{where} {detail}".strip())

        if isinstance(line, DataError):
            if strict:
                raise line
            skips.skip(UNDECODABLE, where)
            continue
        if not line.strip():
            continue
        qtype = qtypes[lineno - 1] if qtypes is not None else None
        if isinstance(qtype, DataError):
            if strict:
                raise qtype
            skips.skip(UNDECODABLE, f"{qtype_path}:{lineno}")
            continue
        if "\t" not in line:
            bad("malformed question line (expected question<TAB>answer1|answer2)", "separate the answers with a tab")
            continue
        text, answer_field = line.split("\t", 1)
        mentions = _TOPIC.findall(text)
        if not mentions:
            bad("no [topic entity] in question", "mark the topic entity with [brackets]")
            continue
        topics = tuple(m.strip() for m in mentions)
        unknown = [t for t in topics if t not in entities]
        if unknown:
            bad("unknown topic entity (not in the KB)", "use an entity name exactly as it appears in the KB", repr(unknown[0]))
            if dropped is not None:
                dropped.append((f"{prefix}/{lineno}", "topic entity not in the KB", hops))
            continue
        answers = tuple(dict.fromkeys(a for a in map(str.strip, answer_field.split("|")) if a))
        if not answers:
            bad("question without answers", "list the answers after the tab, separated by |")
            continue
        qtype = qtype.strip() or None if qtype is not None else None
        n_hops = hops if hops is not None else (qtype.count("_to_") if qtype else None)
        questions.append(
            Question(
                qid=f"{prefix}/{lineno}",
                text=_TOPIC.sub(lambda m: m.group(1), text).strip(),
                topic_entities=topics,
                answers=answers,
                hops=n_hops,
                qtype=qtype,
                source=where,
            )
        )
    return questions


def load_metaqa(
    root: Path,
    *,
    split: str = "test",
    hops: Sequence[int] = (1, 2, 3),
    kb_path: Path | None = None,
    question_files: Iterable[tuple[Path, Path | None]] = (),
    strict: bool = False,
) -> Dataset:
    """Load the MetaQA KB and the vanilla questions of ``split`` for each hop count.

    ``question_files`` replaces the official files with a user's own ``(qa_path, qtype_path)`` pairs.
    """
    if not root.is_dir():
        raise DataError(
            "MetaQA folder not found", path=str(root),
            fix="set STEM_DATA_DIR to the folder that holds metaqa/ (the repo's CI uses ../shared/data)",
        )
    skips = SkipReport()
    triples = read_kb(kb_path or find_kb(root), skips, strict=strict)
    entities = {h for h, _, _ in triples} | {t for _, _, t in triples}
    questions: list[Question] = []
    dropped: list[tuple[str, str, int | None]] = []
    files = list(question_files)
    if files:
        for qa_path, qtype_path in files:
            questions += read_questions(qa_path, entities=entities, skips=skips, qtype_path=qtype_path, strict=strict,
                                        dropped=dropped)
    else:
        for hop in hops:
            if hop not in (1, 2, 3):
                raise DataError(f"MetaQA has 1-, 2- and 3-hop questions, not {hop}-hop", fix="use --hops 1,2,3")
            questions += read_questions(
                root / f"{hop}-hop" / "vanilla" / f"qa_{split}.txt",
                entities=entities,
                skips=skips,
                qtype_path=root / f"{hop}-hop" / f"qa_{split}_qtype.txt",
                hops=hop,
                qid_prefix=f"{hop}-hop/{split}",
                strict=strict,
                dropped=dropped,
            )
    if not questions:
        sources = ", ".join(str(qa) for qa, _ in files) or f"{root}/<hop>-hop/vanilla/qa_{split}.txt"
        reasons = "; ".join(skips.lines()) or "the file has no question lines"
        raise DataError(f"no usable questions in {sources}", fix=f"see why: {reasons}")
    return Dataset(name="metaqa", questions=questions, triples=triples, skips=skips, excludes_topic=True,
                   dropped=dropped)

"""WorldCup2014 (IRN, Zhou et al. 2018): a football KG with paired inverse relations and conjunctive questions.

Folder ``wc2014/`` (see ``SOURCES.md`` of the shared data)::

    kb.txt      subject<TAB>relation<TAB>object (both directions of four relations are stored:
                plays_in_club / plays_in_club_inverse, ...; is_aged and wears_number are one-way)
    WC-P1.txt   one-hop questions       path  topic#r#answer#<end>#answer
    WC-P2.txt   two-hop questions       path  topic#r1#mid#r2#answer
    WC-C.txt    conjunctive questions   path  topic1#r1#ans#<end>#ans*topic2#r2#ans#<end>#ans

A question line is ``question<TAB>answer<TAB>path<TAB>answer set (a/b/)<TAB>context`` (``WC-C`` adds a
sixth column naming its two topic entities). The answer set lists every entity that satisfies the
path (or both constraints), so it is the gold answer set. Every relation of a path is a KB relation
walked head to tail (the ``*_inverse`` relations are stored triples), so gold paths are all forward.

There is no official split: IRN splits each file 8:1:1 at random. :func:`split_lines` does that with
a seeded permutation per file (``seed`` from ``StemConfig.seed``, default 0): the first 80% of the
permuted lines are ``train``, the next 10% ``dev``, the rest ``test``. A question's id is
``WC-P2/<line>``, whatever its split.

``WC-C`` questions keep one gold path per topic entity in ``Question.constraints`` (both end at the
answer); their topic entities are ordered by where the question text names them, so a template's
slot ``{0}`` is the first entity the wording mentions. ``gold_path`` holds the first constraint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from stem_jax.data.types import Dataset, PathStep, Question, SkipReport, Triple, read_lines
from stem_jax.errors import DataError

SUBSETS = {"P1": "WC-P1.txt", "P2": "WC-P2.txt", "C": "WC-C.txt"}
SPLITS = ("train", "dev", "test")
END = "<end>"


def read_kb(path: Path, skips: SkipReport, *, strict: bool = False) -> list[Triple]:
    """``subject<TAB>relation<TAB>object`` lines; malformed ones are counted skips (errors when strict)."""
    if not path.is_file():
        raise DataError("WorldCup2014 KB not found", path=str(path),
                        fix="set STEM_DATA_DIR to the folder holding wc2014/ (kb.txt, WC-P1.txt, ...)")
    triples: list[Triple] = []
    seen: set[Triple] = set()
    for lineno, line in read_lines(path, skips, strict=strict):
        parts = [p.strip() for p in line.split("\t")]
        if not line.strip():
            continue
        if len(parts) != 3 or not all(parts):
            if strict:
                raise DataError("malformed KB line: expected subject<TAB>relation<TAB>object", path=str(path),
                                line=lineno, fix="fix or delete the line, or drop --strict to skip it")
            skips.skip("malformed KB line (expected subject<TAB>relation<TAB>object)", f"{path}:{lineno}")
            continue
        triple = (parts[0], parts[1], parts[2])
        if triple not in seen:
            seen.add(triple)
            triples.append(triple)
    return triples


def parse_path(text: str) -> tuple[tuple[str, tuple[PathStep, ...], str], ...] | None:
    """``topic#r1#mid#r2#answer`` (``<end>`` closes a one-hop path), constraints joined by ``*``:
    one (topic, forward relation path, answer) per constraint; None when malformed."""
    constraints = []
    for part in text.strip().split("*"):
        fields = part.split("#")
        if len(fields) != 5 or not all(f.strip() for f in fields):
            return None
        topic, r1, mid, r2, answer = (f.strip() for f in fields)
        if r2 == END:
            if mid != answer:
                return None
            constraints.append((topic, (PathStep(r1, True),), answer))
        else:
            constraints.append((topic, (PathStep(r1, True), PathStep(r2, True)), answer))
    return tuple(constraints)


def split_lines(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """IRN's 8:1:1 split of ``n`` lines: sorted 0-based line indices per split, from a seeded permutation."""
    order = np.random.default_rng(seed).permutation(n)
    n_train, n_dev = (8 * n) // 10, n // 10
    return {"train": np.sort(order[:n_train]), "dev": np.sort(order[n_train:n_train + n_dev]),
            "test": np.sort(order[n_train + n_dev:])}


def _by_mention(text: str, topics: Sequence[str]) -> list[int]:
    """Constraint order by where ``text`` names each topic (unnamed ones last, in file order)."""
    lowered = text.lower()
    position = [lowered.find(t.lower()) for t in topics]
    return sorted(range(len(topics)), key=lambda i: (position[i] < 0, position[i] if position[i] >= 0 else i, i))


def read_questions(path: Path, subset: str, entities: set[str], relations: set[str], skips: SkipReport, *,
                   split: str, seed: int = 0, strict: bool = False) -> list[Question]:
    """The ``split`` questions of one WorldCup2014 file (see the module docstring)."""
    if not path.is_file():
        raise DataError(f"WorldCup2014 question file {path.name} not found", path=str(path),
                        fix="check STEM_DATA_DIR/wc2014 holds WC-P1.txt, WC-P2.txt and WC-C.txt")
    lines = list(read_lines(path, skips, strict=strict))
    chosen = set(split_lines(len(lines), seed)[split].tolist())
    questions = []
    for i, (lineno, line) in enumerate(lines):
        if i not in chosen:
            continue
        where = f"{path}:{lineno}"

        def bad(reason: str, where: str = where, lineno: int = lineno) -> None:
            if strict:
                raise DataError(reason, path=str(path), line=lineno, fix="fix the line, or drop --strict to skip it")
            skips.skip(reason, where)

        fields = line.split("\t")
        if len(fields) < 4:
            bad("malformed WorldCup2014 line (expected question, answer, path, answer set)")
            continue
        constraints = parse_path(fields[2])
        if constraints is None:
            bad("malformed WorldCup2014 path (expected topic#r1#mid#r2#answer, constraints joined by *)")
            continue
        answers = tuple(dict.fromkeys(a.strip() for a in fields[3].split("/") if a.strip()))
        if not answers:
            bad("no answers")
            continue
        topics = [c[0] for c in constraints]
        if any(t not in entities for t in topics):
            bad("topic entity not in the KB")
            continue
        if any(s.relation not in relations for c in constraints for s in c[1]):
            bad("unknown relation in the path")
            continue
        text = fields[0].strip()
        order = _by_mention(text, topics)
        ordered = [constraints[j] for j in order]
        hops = max(len(c[1]) for c in constraints)
        questions.append(Question(
            qid=f"WC-{subset}/{lineno}", text=text, topic_entities=tuple(c[0] for c in ordered), answers=answers,
            hops=hops, qtype=f"WC-{subset}", gold_path=ordered[0][1], source=where,
            constraints=tuple((c[0], c[1]) for c in ordered) if len(ordered) > 1 else None,
        ))
    return questions


def load_wc2014(root: Path, *, split: str = "test", subsets: Sequence[str] = ("P1", "P2", "C"), seed: int = 0,
                strict: bool = False) -> Dataset:
    """The WorldCup2014 KB and the ``split`` questions of ``subsets`` (``P1``, ``P2``, ``C``)."""
    if split not in SPLITS:
        raise DataError(f"WorldCup2014 has no {split!r} split", fix=f"use --split {', '.join(SPLITS)} (IRN's 8:1:1)")
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown:
        raise DataError(f"unknown WorldCup2014 subset {unknown[0]!r}", fix=f"use one of {', '.join(SUBSETS)}")
    if not root.is_dir():
        raise DataError("WorldCup2014 folder not found", path=str(root),
                        fix="set STEM_DATA_DIR to the folder that holds wc2014/, or pass --data-dir")
    skips = SkipReport()
    triples = read_kb(root / "kb.txt", skips, strict=strict)
    entities = {h for h, _, _ in triples} | {t for _, _, t in triples}
    relations = {r for _, r, _ in triples}
    questions: list[Question] = []
    for subset in subsets:
        questions += read_questions(root / SUBSETS[subset], subset, entities, relations, skips, split=split,
                                    seed=seed, strict=strict)
    # One name for every subset: they share the KB, so its embeddings, calibration and planners.
    return Dataset(name="wc2014", questions=questions, triples=triples, skips=skips)

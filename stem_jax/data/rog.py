"""RoG-format WebQSP / CWQ loader: jsonl files or the Hugging Face parquet layout.

Each record carries ``id, question, answer, q_entity, a_entity, graph`` where ``graph`` is the
question's own subgraph as ``[[head, relation, tail], ...]``; an optional ``gold_path`` (relation ids, ``^r``
backward, as in the ``files`` format) gives the oracle planner its plan. :func:`stem_jax.kg.subgraph.write_rog`
writes any loaded dataset in this format, each question's graph its topics' k-hop neighbourhood in the KG.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stem_jax.data.files import parse_gold_path
from stem_jax.data.types import UNDECODABLE, Dataset, Question, SkipReport, Triple, decode_line, raw_lines
from stem_jax.errors import DataError

REQUIRED_FIELDS = ("id", "question", "answer", "q_entity", "graph")


def _records_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    for lineno, raw in raw_lines(path):
        where = f"{path}:{lineno}"
        line = decode_line(raw, path, lineno)
        if isinstance(line, DataError):
            yield where, line
            continue
        if not line.strip():
            continue
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as err:
            yield where, DataError(f"invalid JSON ({err.msg} at column {err.colno})", path=str(path), line=lineno)
        except RecursionError:
            yield where, DataError("invalid JSON (nested too deeply)", path=str(path), line=lineno)


def _records_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several unrelated types for unreadable files
        raise DataError(f"cannot read parquet file: {err}", path=str(path), fix="re-download the split") from None
    for row, record in enumerate(table.to_pylist()):
        yield f"{path}:row {row}", record


def rog_files(path: Path, split: str) -> list[Path]:
    """Resolve a file, or a folder in either layout (``{split}.jsonl`` or ``data/{split}-*.parquet``)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DataError("RoG data not found", path=str(path), fix="pass a .jsonl/.parquet file or a dataset folder")
    candidates = sorted(path.glob(f"data/{split}-*.parquet")) or sorted(path.glob(f"{split}-*.parquet"))
    if not candidates and (path / f"{split}.jsonl").is_file():
        candidates = [path / f"{split}.jsonl"]
    if not candidates:
        raise DataError(
            f"no {split} split found", path=str(path),
            fix=f"expected {split}.jsonl or data/{split}-*.parquet inside the folder",
        )
    return candidates


def _as_triples(graph: Any) -> list[Triple] | None:
    if not isinstance(graph, list):
        return None
    triples = []
    for item in graph:
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            return None
        triples.append((str(item[0]), str(item[1]), str(item[2])))
    return triples


def _as_names(value: Any) -> tuple[str, ...] | None:
    """A list of names (or one name) as strings; None when the field holds something else."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return tuple(str(v) for v in value)
    return None


def _answer_names(record: dict[str, Any]) -> tuple[str, ...] | None:
    """``answer``, or ``a_entity`` where ``answer`` is empty (some RoG records fill only one of them)."""
    answers = _as_names(record["answer"])
    return _as_names(record.get("a_entity")) if answers == () else answers


# The list fields a record needs: how each is read (None: it holds something else), and the skip reason and
# fix when it holds something else, then when it is empty.
LIST_FIELDS: dict[str, tuple[Callable[[dict[str, Any]], Any], tuple[str, str], tuple[str, str]]] = {
    "graph": (lambda record: _as_triples(record["graph"]),
              ("graph is not a list of [head, relation, tail]", "store the graph as a list of 3-item lists"),
              ("empty graph", "the question needs a non-empty subgraph")),
    "q_entity": (lambda record: _as_names(record["q_entity"]),
                 ("q_entity is not a list of names", "list the topic entities as strings in q_entity"),
                 ("no question entity (q_entity is empty)", "list the topic entities in q_entity")),
    "answer": (_answer_names,
               ("answer is not a list of names", "list the answers as strings in answer"),
               ("question without answers", "fill the answer field")),
}


def _list_field(record: dict[str, Any], field: str) -> tuple[Any, tuple[str, str] | None]:
    """``(value, None)`` for a non-empty list field of ``record``, else ``(None, (reason, fix))`` to skip it."""
    read, wrong, empty = LIST_FIELDS[field]
    value = read(record)
    if value is None:
        return None, wrong
    return (value, None) if value else (None, empty)


def load_rog(path: Path, *, split: str = "test", name: str = "rog", strict: bool = False) -> Dataset:
    """Load RoG-format questions with their per-question graphs.

    Records with an empty graph, a missing field or a topic entity absent from their graph are
    counted skips (or :class:`DataError` with ``strict``).
    """
    skips = SkipReport()
    questions: list[Question] = []
    union: dict[Triple, None] = {}
    for file in rog_files(path, split):
        records = _records_parquet(file) if file.suffix == ".parquet" else _records_jsonl(file)
        for where, record in records:

            def bad(reason: str, fix: str, where: str = where) -> None:
                if strict:
                    raise DataError(f"{where}: {reason}", fix=fix)
                skips.skip(reason, where)

            if isinstance(record, DataError):
                if strict:
                    raise record
                skips.skip(UNDECODABLE if record.what.startswith(UNDECODABLE) else record.what, where)
                continue
            if not isinstance(record, dict):
                bad(f"record is a JSON {type(record).__name__}, not an object", "write one JSON object per line")
                continue
            missing = [f for f in REQUIRED_FIELDS if f not in record]
            if missing:
                bad(f"record without field(s) {', '.join(missing)}", "RoG records need " + ", ".join(REQUIRED_FIELDS))
                continue
            graph, problem = _list_field(record, "graph")
            if problem:
                bad(*problem)
                continue
            nodes = {h for h, _, _ in graph} | {t for _, _, t in graph}
            topics, problem = _list_field(record, "q_entity")
            if problem:
                bad(*problem)
                continue
            if not any(t in nodes for t in topics):
                bad("topic entity not in its graph", "q_entity must name nodes of the question's graph")
                continue
            answers, problem = _list_field(record, "answer")
            if problem:
                bad(*problem)
                continue
            gold_path = None
            if record.get("gold_path") is not None:  # optional; written by write_rog, absent from RoG's own files
                gold_path = parse_gold_path(record["gold_path"])
                if gold_path is None:
                    bad("malformed gold_path", 'write a list like ["film.film.directed_by", "^film.film.directed_by"]')
                    continue
                relations = {r for _, r, _ in graph}
                if any(step.relation not in relations for step in gold_path):
                    gold_path = None  # as the files loader: only the oracle planner needs it
            for triple in graph:
                union.setdefault(triple, None)
            questions.append(
                Question(
                    qid=str(record["id"]),
                    text=str(record["question"]),
                    topic_entities=tuple(t for t in topics if t in nodes),
                    answers=answers,
                    gold_path=gold_path,
                    graph=tuple(graph),
                    source=where,
                )
            )
    if not questions:
        raise DataError("no usable questions", path=str(path), fix="see the skip reasons above: " + "; ".join(skips.lines()))
    return Dataset(name=name, questions=questions, triples=list(union), skips=skips)

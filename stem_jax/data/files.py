"""Your own KG from plain files: triples (TSV, CSV, JSONL), optional names, questions (JSONL or text).

Layout (every file but the triples is optional; a folder passed as ``--data-dir`` is searched for
these names, explicit ``--triples`` / ``--questions`` / ``--entity-names`` / ``--relation-names`` win)::

    triples.tsv | triples.csv | triples.jsonl | triples.txt   (.gz allowed)
    entity_names.tsv       id<TAB>readable name   (CSV / JSONL {"id", "name"} too)
    relation_names.tsv     id<TAB>readable name
    train.jsonl, dev.jsonl, test.jsonl   (or train.txt ...: one question per line), chosen by --split

Triples: one ``head, relation, tail`` per line. The format follows the extension (``.tsv`` tab,
``.csv`` comma with CSV quoting, read by the csv module, so a quoted field may hold the delimiter or a
newline, ``.jsonl`` objects ``{"head", "relation", "tail"}`` or 3-item lists of strings or numbers,
anything else: the first of tab, ``|`` or comma that splits the first line into three); ``--delimiter``
overrides it. A first line ``head<TAB>relation<TAB>tail`` (or subject/predicate/object, h/r/t,
source/relation/target) is a header and skipped.

Entity names are display names: entities keep their ids in the KG (two entities may share a name)
and the encoder, the linker and the answers read the names. A relation name replaces the relation's
id everywhere (KG, gold paths, evidence chains), as MetaQA's relations are words already; two
relations that would end up with one label (two ids with one name, or a name that is the id of an
unnamed relation) are an error, as the two would merge. Without a name, the text of a relation is derived from its id by
:func:`stem_jax.data.types.relation_text` (``film.film.directed_by`` -> "film directed by").

Questions, JSONL: one object per line::

    {"id": "q1", "question": "who directed Kismet", "topic_entities": ["Kismet"],
     "answers": ["William Dieterle"], "gold_path": ["directed_by"]}

``id`` (a string or an integer; default ``<file>/<line>``) must be unique: a resumed ``eval`` finds
its finished questions by it. ``topic_entities`` are entity ids or (unique) names; without them the entity linker finds
the topic in the text (``[brackets]`` mark it explicitly). ``answers`` may be empty (no metrics
then). ``gold_path`` lists the relations from the first topic entity to the answers; a relation
walked backwards (tail to head) is written ``"^directed_by"`` or ``{"relation": "directed_by",
"forward": false}``. ``gold_path: []`` (the answer is the topic itself, as RoG writes it) keeps the question without a gold path,
noted. A question with several topic entities may give one path per entity instead: ``"constraints":
[["Club_X", ["^plays_in_club"]], ["Forward", ["^plays_position"]]]``, every path ending at the answer; the
entities become the topics (the first constraint's first) and the oracle plans the tree that joins them.
``hops`` (default: the gold path's length, the longest constraint's) groups the metrics; ``qtype`` is
an optional free label (a MetaQA qtype still plans with the oracle when there is no gold path).

Questions, plain text: one question per line, optionally ``<TAB>answer1|answer2``; the topic is
found by the entity linker; blank lines and lines starting with ``#`` are ignored.

``--limit N`` keeps the first N questions per hop count; ``--hops`` does not filter these questions
(their hop counts are the user's, not MetaQA's 1-3).

Every bad line (malformed, undecodable bytes, unknown entity or relation, duplicate, a JSON field of
the wrong type such as ``"hops": true`` or ``"id": null``) is a counted skip naming ``file:line``, or a
:class:`DataError` naming them with ``strict``. A file that cannot be read (permissions, a damaged
``.gz``, a folder where a file should be) is a :class:`DataError` naming it.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stem_jax.data.linker import EntityLinker
from stem_jax.data.types import Dataset, PathStep, Question, SkipReport, Triple, read_lines
from stem_jax.errors import DataError

TRIPLE_NAMES = ("triples.tsv", "triples.csv", "triples.jsonl", "triples.txt")
ENTITY_NAME_FILES = ("entity_names.tsv", "entity_names.csv", "entity_names.jsonl", "entity_names.txt")
RELATION_NAME_FILES = ("relation_names.tsv", "relation_names.csv", "relation_names.jsonl", "relation_names.txt")
_JSONL = (".jsonl", ".json", ".ndjson")
_HEADERS = {("head", "relation", "tail"), ("subject", "predicate", "object"), ("h", "r", "t"),
            ("source", "relation", "target"), ("id", "name"), ("entity", "name"), ("relation", "name")}


class _Reader:
    """Counted skips or strict errors for one file, located by line."""

    def __init__(self, path: Path, skips: SkipReport, strict: bool):
        self.path, self.skips, self.strict = path, skips, strict
        self.sep = "\t"  # the field separator in use (sniffed or given), for messages

    def bad(self, lineno: int, reason: str, fix: str, detail: str = "") -> None:
        if self.strict:
            raise DataError(f"{reason} {detail}".strip(), path=str(self.path), line=lineno,
                            fix=f"{fix}, or drop --strict to skip such lines")
        self.skips.skip(reason, f"{self.path}:{lineno} {detail}".strip())

    def lines(self, blank: bool = False) -> Iterator[tuple[int, str]]:
        """Decoded lines with their numbers (blank ones only with ``blank``); undecodable bytes are a counted skip."""
        if self.path.is_dir():
            raise DataError("a folder, not a file", path=str(self.path), fix="name the file itself")
        if not self.path.is_file():
            raise DataError("file not found", path=str(self.path), fix="check the path")
        for lineno, line in read_lines(self.path, self.skips, strict=self.strict):
            if blank or line.strip():
                yield lineno, line


def _scalar(value: Any) -> bool:
    """A JSON value usable as an id or a name: a string or a number (``true`` is no id, ``null`` no name)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _base_suffix(path: Path) -> str:
    return Path(path.stem).suffix.lower() if path.suffix == ".gz" else path.suffix.lower()


def _split_rows(reader: _Reader, width: int, delimiter: str | None, what: str) -> Iterator[tuple[int, list[str]]]:
    """Rows of ``width`` stripped fields from a delimited or JSONL file; malformed rows are skips."""
    if delimiter is not None and (not delimiter or "\n" in delimiter or "\r" in delimiter):
        raise DataError(f"--delimiter {delimiter!r}: the field separator must be a character (or several) within a line",
                        fix="pass e.g. --delimiter ',' or --delimiter '|' or --delimiter tab")
    suffix = _base_suffix(reader.path)
    keys = {3: (("head", "relation", "tail"), ("subject", "predicate", "object")), 2: (("id", "name"),)}[width]
    if suffix in _JSONL and delimiter is None:
        for lineno, line in reader.lines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                reader.bad(lineno, "invalid JSON", "write one JSON object or list per line",
                           f"({err.msg} at column {err.colno})")
                continue
            fields = None
            if isinstance(record, list) and len(record) == width:
                fields = record
            elif isinstance(record, dict):
                for names in keys:
                    if all(k in record for k in names):
                        fields = [record[k] for k in names]
                        break
            if fields is None or not all(_scalar(f) for f in fields):
                reader.bad(lineno, f"malformed {what} record", f"write {{{', '.join(map(repr, keys[0]))}}} "
                           f"or a {width}-item list")
                continue
            yield lineno, [str(f).strip() for f in fields]
        return
    use_csv = suffix == ".csv"
    if use_csv and delimiter is not None and len(delimiter) != 1:
        raise DataError(f"--delimiter {delimiter!r}: a CSV file's separator is one character", path=str(reader.path),
                        fix="pass one character such as ';', or rename the file to .txt to split on a longer one")
    sep = delimiter if delimiter is not None else ("," if use_csv else "\t" if suffix == ".tsv" else None)
    first = True
    records = _csv_records(reader, sep) if use_csv else _plain_records(reader, sep, width)
    for lineno, last, fields, problem, raw in records:
        span = f"lines {lineno}-{last}: " if last != lineno else ""
        if fields is None:
            reader.bad(lineno, f"malformed CSV record ({problem})",
                       "close every quoted field (a quote inside one is written twice)", f"{span}".rstrip(": "))
            continue
        fields = [f.strip() for f in fields]
        if first:
            first = False
            if tuple(f.lower() for f in fields) in _HEADERS:
                continue
        if len(fields) != width or not all(fields):
            shown = {"\t": "<TAB>"}.get(reader.sep or "", reader.sep)
            reader.bad(lineno, f"malformed {what} line (expected {width} non-empty fields separated by {shown!r})",
                       "fix the line or pass --delimiter", span + repr(raw[:80]))
            continue
        yield lineno, fields


def _plain_records(reader: _Reader, sep: str | None, width: int) -> Iterator[tuple[int, int, list[str], str, str]]:
    """(line, line, fields, "", line text) per non-blank line split on ``sep`` (sniffed from the first line when None)."""
    for lineno, line in reader.lines():
        if sep is None:  # sniff: the first separator that splits the first line into `width` fields
            sep = next((s for s in ("\t", "|", ",") if len(line.split(s)) == width), "\t")
        reader.sep = sep
        yield lineno, lineno, (line.split(sep) if width == 3 else line.split(sep, 1)), "", line


def _csv_records(reader: _Reader, sep: str) -> Iterator[tuple[int, int, list[str] | None, str, str]]:
    """(first line, last line, fields or None, problem, text) per CSV record, parsed by the csv module.

    A quoted field may hold the delimiter or a newline, so a record may span lines (read line by
    line, such a field became a bogus triple of its first line and another of the rest). A quote
    that never closes is one malformed record naming the lines it took, not a silent swallow.
    """
    reader.sep = sep
    numbers: list[int] = []
    texts: list[str] = []

    def feed() -> Iterator[str]:
        for lineno, text in reader.lines(blank=True):
            numbers.append(lineno)
            texts.append(text)
            yield text + "\n"

    rows = csv.reader(feed(), delimiter=sep, strict=True)
    used = 0
    while True:
        try:
            fields, problem = next(rows), ""
        except StopIteration:
            return
        except csv.Error as err:
            fields, problem = None, str(err)
        if len(numbers) == used:  # nothing consumed: the input is exhausted
            return
        first, last, raw = numbers[used], numbers[-1], "\n".join(texts[used:])
        used = len(numbers)
        if fields is not None and not any(f.strip() for f in fields):
            continue  # a blank line
        yield first, last, fields, problem, raw


# A relation id in Freebase's dotted form (``location.location.containedby``): what a comma-split name's pieces are
# told apart from when its own relations are not known from another line
_DOTTED_RELATION = re.compile(r"^[a-z_][a-z0-9_]+(\.[a-z0-9_]+)+$")  # not a mid: m.0abc has a one-letter domain


def rejoin_split_names(rows: list[tuple[int, list[str]]]) -> tuple[list[tuple[int, list[str]]], list[int]]:
    """Rows whose entity names were split at a comma put back together; returns (rows, line numbers repaired).

    A triples file written by splitting ``Washington, D.C., location.location.containedby, ...`` at its commas
    carries the name's rest in the relation field (``D.C.`` or ``Elías Piña,location.location.containedby``) and
    the KG gains a bogus relation per such name. Such a row has a comma in a field and a relation field that is
    no relation: when most relations are dotted ids (Freebase), one not written as a dotted id; else one holding
    a comma. It is repaired only when exactly one comma- or field-separated piece of it is a relation (a dotted
    id; in a KG of other relations, one that a row without a comma in its relation field uses): the pieces before it are the head, those
    after it the tail, each joined by ``", "``. Every other row is kept as read."""
    known = {fields[1] for _, fields in rows if "," not in fields[1]}
    dotted = sum(bool(_DOTTED_RELATION.match(r)) for r in known) * 2 > len(known) > 0

    def relation(piece: str) -> bool:
        return bool(_DOTTED_RELATION.match(piece)) if dotted else piece in known

    out, repaired = [], []
    for lineno, fields in rows:
        broken = (not _DOTTED_RELATION.match(fields[1])) if dotted else "," in fields[1]
        if not broken or not any("," in f for f in fields):
            out.append((lineno, fields))
            continue
        pieces = [p.strip() for f in fields for p in f.split(",")]
        at = [i for i, p in enumerate(pieces) if relation(p)]
        if len(at) != 1 or not 0 < at[0] < len(pieces) - 1 or not all(pieces):
            out.append((lineno, fields))
            continue
        i = at[0]
        out.append((lineno, [", ".join(pieces[:i]), pieces[i], ", ".join(pieces[i + 1:])]))
        repaired.append(lineno)
    return out, repaired


def read_triples(path: Path, skips: SkipReport, *, delimiter: str | None = None, strict: bool = False,
                 notes: SkipReport | None = None) -> list[Triple]:
    """``head, relation, tail`` rows; malformed and duplicate rows are counted skips. Rows whose names were split
    at a comma are put back together (:func:`rejoin_split_names`) and counted in ``notes``."""
    reader = _Reader(path, skips, strict)
    triples: dict[Triple, None] = {}
    rows, repaired = rejoin_split_names(list(_split_rows(reader, 3, delimiter, "triple")))
    if repaired and notes is not None:
        for lineno in repaired:
            notes.skip("triple whose entity name was split at a comma (the name's rest stood in the relation "
                       "field): read with the name joined again", f"{path}:{lineno}")
    for lineno, (head, relation, tail) in rows:
        triple = (head, relation, tail)
        if triple in triples:
            skips.skip("duplicate triple", f"{path}:{lineno}")
            continue
        triples[triple] = None
    if not triples:
        reasons = skips.lines()
        raise DataError("the triples file has no usable triples"
                        + (f" ({'; '.join(reasons)})" if reasons else " (it is empty)"), path=str(path),
                        fix="write one head, relation, tail per line")
    return list(triples)


def read_name_file(path: Path, skips: SkipReport, *, known: set[str], what: str, delimiter: str | None = None,
                   strict: bool = False) -> dict[str, str]:
    """``id, name`` rows for ids in ``known``; other ids and repeated ids are counted skips."""
    reader = _Reader(path, skips, strict)
    names: dict[str, str] = {}
    for lineno, (key, name) in _split_rows(reader, 2, delimiter, f"{what} name"):
        if key not in known:
            skips.skip(f"{what} name for an id not in the KG", f"{path}:{lineno} {key!r}")
        elif key in names:
            skips.skip(f"repeated {what} id in the name file (first name kept)", f"{path}:{lineno} {key!r}")
        else:
            names[key] = name
    return names


def _rename_relations(triples: list[Triple], names: dict[str, str], path: Path) -> list[Triple]:
    """Relation ids replaced by their names; two relations that would end up with one label are an error.

    A label is a relation's name, or its id when it has none: naming ``r1`` ``"r2"`` while ``r2`` keeps
    its id would merge the two relations silently, as two ids with one name would.
    """
    by_label: dict[str, str] = {}
    for relation in dict.fromkeys(r for _, r, _ in triples):
        label = names.get(relation, relation)
        other = by_label.setdefault(label, relation)
        if other != relation:
            first, second = sorted((other, relation), key=lambda r: r not in names)
            clash = (f"relation {first!r} is named {label!r}, the id of relation {second!r}" if second not in names
                     else f"relations {first!r} and {second!r} have the same name {label!r}")
            raise DataError(f"{clash}: the two would merge into one", path=str(path),
                            fix="give every relation its own name (the name replaces the id in the KG)")
    return [(h, names.get(r, r), t) for h, r, t in triples]


def parse_gold_path(value: Any) -> tuple[PathStep, ...] | None:
    """``["r1", "^r2"]`` or ``[{"relation": "r2", "forward": false}]`` -> steps; ``None`` when malformed."""
    if not isinstance(value, list) or not value:
        return None
    steps = []
    for item in value:
        if isinstance(item, str) and item.strip():
            text = item.strip()
            steps.append(PathStep(text[1:], False) if text.startswith("^") else PathStep(text, True))
        elif isinstance(item, dict) and isinstance(item.get("relation"), str) and isinstance(item.get("forward", True), bool):
            steps.append(PathStep(item["relation"], item.get("forward", True)))
        else:
            return None
    return tuple(steps)


def _as_strings(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if _scalar(value):
        value = [value]
    if not isinstance(value, list) or not all(_scalar(v) for v in value):
        return None
    return tuple(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))


class _QuestionBuilder:
    """Resolves topics (ids, names or the linker), answers and gold paths against the KG."""

    def __init__(self, triples: list[Triple], entity_names: dict[str, str], relation_ids: dict[str, str]):
        self.triples = triples
        self.entities = {h for h, _, _ in triples} | {t for _, _, t in triples}
        self.relations = {r for _, r, _ in triples}
        self.relation_ids = relation_ids  # original id -> name, for gold paths written with ids
        self.entity_names = entity_names
        by_name: dict[str, list[str]] = {}
        for key, name in entity_names.items():
            by_name.setdefault(name, []).append(key)
        self.unique_names = {name: keys[0] for name, keys in by_name.items() if len(keys) == 1}
        self._linker = None

    @property
    def linker(self):
        if self._linker is None:
            self._linker = EntityLinker.from_triples(self.triples, self.entity_names)
        return self._linker

    def topics(self, given: tuple[str, ...], text: str) -> tuple[tuple[str, ...] | None, str]:
        """(entity ids, problem): resolved topics, or None and the reason."""
        if given:
            resolved = []
            for topic in given:
                if topic in self.entities:
                    resolved.append(topic)
                elif topic in self.unique_names:
                    resolved.append(self.unique_names[topic])
                else:
                    return None, topic
            return tuple(resolved), ""
        links = self.linker.link(text, max_links=1)
        if not links:
            return None, "no topic entity found in the question (entity linker)"
        return (links[0].entity,), ""

    def constraints(self, value: Any) -> tuple[tuple[tuple[str, tuple[PathStep, ...]], ...] | None, str]:
        """(constraints, problem): ``[[entity, path], ...]`` resolved to entity ids and KG relations, in the
        file's order (the first is traced from), or None and what is wrong."""
        if not isinstance(value, list) or not value:
            return None, "(expected a non-empty list of [entity, path] pairs)"
        resolved = []
        for n, item in enumerate(value, start=1):
            pair = (item.get("entity"), item.get("path")) if isinstance(item, dict) else item
            if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not _scalar(pair[0]):
                return None, f"(constraint {n} is not an [entity, path] pair)"
            entity = str(pair[0]).strip()
            entity = entity if entity in self.entities else self.unique_names.get(entity)
            if entity is None:
                return None, f"(constraint {n}: unknown entity {str(pair[0])!r}, not an entity id or a unique name)"
            steps = parse_gold_path(pair[1])
            if steps is None:
                return None, f"(constraint {n}: malformed path {json.dumps(pair[1])})"
            gold, problem = self.gold_path(steps)
            if gold is None:
                return None, f"(constraint {n}: {problem})"
            resolved.append((entity, gold))
        if len({entity for entity, _ in resolved}) != len(resolved):
            return None, "(two constraints start at the same entity)"
        return tuple(resolved), ""

    def gold_path(self, steps: tuple[PathStep, ...]) -> tuple[tuple[PathStep, ...] | None, str]:
        resolved = []
        for step in steps:
            relation = self.relation_ids.get(step.relation, step.relation)
            if relation not in self.relations:
                return None, f"unknown relation {step.relation!r} in gold_path"
            resolved.append(PathStep(relation, step.forward))
        return tuple(resolved), ""


_MOJIBAKE = re.compile("[\u00c2-\u00c3][\u0080-\u00bf]")  # UTF-8 bytes of é, ñ, ø... read back as Latin-1: Ã©


def undo_mojibake(text: str) -> str:
    """``text`` with UTF-8 that was decoded as Latin-1 (or Windows-1252) decoded again: ``Pi\u00c3\u00b1a`` ->
    ``Piña``; text without such pairs, or that does not decode, is returned as it is."""
    if not _MOJIBAKE.search(text):
        return text
    for encoding in ("latin-1", "cp1252"):
        try:
            return text.encode(encoding).decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            continue
    return text


def _strip_brackets(text: str) -> str:
    return re.sub(r"\[([^\[\]]+)\]", r"\1", text).strip()


def read_questions_jsonl(path: Path, builder: _QuestionBuilder, skips: SkipReport, *,
                         strict: bool = False, dropped: list | None = None,
                         notes: SkipReport | None = None) -> list[Question]:
    """Questions of a JSONL file; ``dropped`` collects (qid, reason, hops) of questions with answers but no
    usable topic (misses in the metrics over every question), ``notes`` what was kept with a change."""
    dropped = [] if dropped is None else dropped
    notes = SkipReport() if notes is None else notes
    reader = _Reader(path, skips, strict)
    questions: list[Question] = []
    seen: set[str] = set()
    for lineno, line in reader.lines():
        def bad(reason: str, fix: str, detail: str = "", lineno: int = lineno) -> None:
            reader.bad(lineno, reason, fix, detail)

        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            bad("invalid JSON", "write one JSON object per line", f"({err.msg} at column {err.colno})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("question"), str) or not record["question"].strip():
            bad("question record without a 'question' string", 'write {"id": ..., "question": "..."}')
            continue
        if undo_mojibake(record["question"]) != record["question"]:
            # the entity linker and the encoder read names as the KG writes them (Piña, not PiÃ±a)
            record["question"] = undo_mojibake(record["question"])
            notes.skip("question text in UTF-8 read as Latin-1 (Ã© for é): read with its characters decoded",
                       f"{path}:{lineno}")
        qid = record.get("id", f"{path.stem}/{lineno}")
        if not _scalar(qid) or isinstance(qid, float) or not str(qid).strip():
            bad("id must be a non-empty string or an integer", "fix the id, or drop it for <file>/<line>",
                f"(got {json.dumps(qid)})")
            continue
        qid = str(qid).strip()
        if qid in seen:
            bad("duplicate question id", "give every question its own id", repr(qid))
            continue
        given, answers = _as_strings(record.get("topic_entities")), _as_strings(record.get("answers"))
        if given is None or answers is None:
            bad("topic_entities / answers must be a string or a list of strings", "fix the field")
            continue
        constraints = None
        if record.get("constraints") is not None:
            constraints, problem = builder.constraints(record["constraints"])
            if constraints is None:
                bad("malformed constraints", 'write [["topic", ["relation", "^relation"]], ...], one per topic '
                    "entity, each path ending at the answer", problem)
                continue
        # a constraint's entity is a topic; the first constraint's is the one the tree is traced from
        leading = tuple(entity for entity, _ in constraints or ())
        topics, problem = builder.topics(given, record["question"]) if given or not leading else (leading, "")
        if topics is None:
            if answers and not strict:
                dropped.append((qid, "no topic entity" if not given else "unknown topic entity",
                                record.get("hops") if isinstance(record.get("hops"), int) else None))
            if given:
                bad("unknown topic entity (not an entity id or a unique name)",
                    "name the topic by its entity id or by a name only one entity has", repr(problem))
            else:
                bad(problem, "add topic_entities, or write the topic as the KG names it", repr(record["question"][:80]))
            continue
        gold = None
        if record.get("gold_path") == []:
            # RoG writes [] when the answer is the topic itself: no relation path to plan or trace.
            notes.skip("empty gold_path (the answer is the topic itself): kept without a gold path; the oracle "
                       "plans nothing for it, so it counts as a miss there", f"{path}:{lineno}")
        elif record.get("gold_path") is not None:
            steps = parse_gold_path(record["gold_path"])
            if steps is None:
                bad("malformed gold_path", 'write a list like ["directed_by", "^directed_by"]')
                continue
            gold, problem = builder.gold_path(steps)
            if gold is None and strict:
                bad("unknown relation in gold_path", "use relation ids or names of the KG", problem)
            if gold is None:
                # only the oracle needs the gold path: the question stays, planned by every other planner
                notes.skip("gold_path names a relation that is not in the KG: kept without its gold path "
                           "(only the oracle planner is affected)", f"{path}:{lineno} {problem}")
        if constraints:
            topics = tuple(dict.fromkeys((*leading, *topics)))
            gold = gold if gold is not None else constraints[0][1]
            if len(constraints) == 1:  # one path: a plain gold path from its topic
                constraints = None
        hops = record.get("hops")
        if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int) or hops < 1):
            bad("hops must be a positive integer", "fix or drop the field", f"(got {json.dumps(hops)})")
            continue
        qtype = record.get("qtype")
        if qtype is not None and (not isinstance(qtype, str) or not qtype.strip()):
            bad("qtype must be a non-empty string", "fix or drop the field", f"(got {json.dumps(qtype)})")
            continue
        seen.add(qid)
        questions.append(Question(
            qid=qid, text=_strip_brackets(record["question"]), topic_entities=topics, answers=answers,
            hops=hops if hops is not None else (max(len(p) for _, p in constraints) if constraints
                                                else len(gold) if gold else None),
            qtype=str(qtype) if qtype is not None else None, gold_path=gold, source=f"{path}:{lineno}",
            constraints=constraints,
        ))
    return questions


def read_questions_text(path: Path, builder: _QuestionBuilder, skips: SkipReport, *,
                        strict: bool = False, dropped: list | None = None,
                        notes: SkipReport | None = None) -> list[Question]:
    """Questions of a plain-text file (one per line, optionally ``<TAB>answers``); see
    :func:`read_questions_jsonl` for ``dropped`` and ``notes``."""
    dropped = [] if dropped is None else dropped
    reader = _Reader(path, skips, strict)
    questions: list[Question] = []
    for lineno, line in reader.lines():
        if line.lstrip().startswith("#"):
            continue
        text, _, answer_field = line.partition("\t")
        answers = tuple(dict.fromkeys(a.strip() for a in answer_field.split("|") if a.strip()))
        topics, problem = builder.topics((), text)
        if topics is None:
            if answers and not strict:
                dropped.append((f"{path.stem}/{lineno}", "no topic entity", None))
            reader.bad(lineno, problem, "write the topic as the KG names it, or mark it with [brackets]",
                       repr(text[:80]))
            continue
        questions.append(Question(qid=f"{path.stem}/{lineno}", text=_strip_brackets(text), topic_entities=topics,
                                  answers=answers, source=f"{path}:{lineno}"))
    return questions


def _first(folder: Path | None, candidates: tuple[str, ...]) -> Path | None:
    """The first of ``candidates`` (or its ``.gz``) in ``folder``; one of those names that is not a file
    is an error (a folder named ``test.jsonl`` read as "no questions" gave a 0-question run)."""
    if folder is None:
        return None
    for name in candidates:
        for path in (folder / name, folder / f"{name}.gz"):
            if path.is_file():
                return path
            if path.exists():
                raise DataError("expected a file, found a folder or another non-file", path=str(path),
                                fix="rename it, or pass the file to read explicitly")
    return None


def find_questions(folder: Path | None, split: str) -> Path | None:
    """``<folder>/<split>.jsonl`` or ``<folder>/<split>.txt`` (``.gz`` too)."""
    return _first(folder, (f"{split}.jsonl", f"{split}.txt"))


def dataset_name(folder: Path | None, triples: Path) -> str:
    """``files-<folder or triples-file name>``: run folders and trained planners of two KGs stay apart."""
    stem = folder.resolve().name if folder is not None else Path(triples.stem).stem
    return "files-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-") or "kg")


def load_files(
    *,
    folder: Path | None = None,
    triples: Path | None = None,
    questions: Path | None = None,
    entity_names: Path | None = None,
    relation_names: Path | None = None,
    delimiter: str | None = None,
    split: str = "test",
    strict: bool = False,
    name: str | None = None,
) -> Dataset:
    """Load a KG and the ``split`` questions from files (see the module docstring for the formats).

    Explicit paths win over the names looked up in ``folder``; the questions default to
    ``<folder or the triples' folder>/<split>.jsonl|.txt`` and may be absent (``index`` needs none).
    """
    if delimiter is not None and delimiter.lower() in ("tab", "\\t"):
        delimiter = "\t"  # a tab is awkward to type in a shell
    if folder is not None and not folder.is_dir():
        raise DataError("KG folder not found", path=str(folder), fix="pass the folder holding triples.tsv")
    triples_path = triples or _first(folder, TRIPLE_NAMES)
    if triples_path is None:
        raise DataError(
            "no triples file" + (f" in {folder} (looked for {', '.join(TRIPLE_NAMES)})" if folder else ""),
            fix="pass --triples FILE (head, relation, tail per line) or --data-dir FOLDER holding triples.tsv",
        )
    skips = SkipReport()
    notes = SkipReport()
    kg = read_triples(Path(triples_path), skips, delimiter=delimiter, strict=strict, notes=notes)
    entities = {h for h, _, _ in kg} | {t for _, _, t in kg}
    names: dict[str, str] = {}
    entity_path = entity_names or _first(folder, ENTITY_NAME_FILES)
    if entity_path is not None:
        names = read_name_file(Path(entity_path), skips, known=entities, what="entity", strict=strict)
    relation_ids: dict[str, str] = {}
    relation_path = relation_names or _first(folder, RELATION_NAME_FILES)
    if relation_path is not None:
        relation_ids = read_name_file(Path(relation_path), skips, known={r for _, r, _ in kg}, what="relation",
                                      strict=strict)
        kg = _rename_relations(kg, relation_ids, Path(relation_path))
    question_path = questions or find_questions(folder or Path(triples_path).parent, split)
    parsed: list[Question] = []
    dropped: list[tuple[str, str, int | None]] = []
    if question_path is not None:
        builder = _QuestionBuilder(kg, names, relation_ids)
        read: Callable = read_questions_jsonl if _base_suffix(Path(question_path)) in _JSONL else read_questions_text
        parsed = read(Path(question_path), builder, skips, strict=strict, dropped=dropped, notes=notes)
    return Dataset(name=name or dataset_name(folder, Path(triples_path)), questions=parsed, triples=kg, skips=skips,
                   entity_names=names or None, dropped=dropped, notes=notes, folder=folder)


# ---------------------------------------------------------------------------------------------
# Writing: any loaded dataset in this format (MetaQA export, test fixtures)
# ---------------------------------------------------------------------------------------------


def question_record(question: Question) -> dict[str, Any]:
    """The JSONL object of ``question`` in this format."""
    record: dict[str, Any] = {"id": question.qid, "question": question.text,
                              "topic_entities": list(question.topic_entities), "answers": list(question.answers)}
    if question.gold_path:
        record["gold_path"] = [s.relation if s.forward else f"^{s.relation}" for s in question.gold_path]
    if question.constraints:
        record["constraints"] = [[entity, [s.relation if s.forward else f"^{s.relation}" for s in steps]]
                                 for entity, steps in question.constraints]
    if question.hops is not None:
        record["hops"] = question.hops
    if question.qtype is not None:
        record["qtype"] = question.qtype
    return record


def write_files(folder: Path, triples: list[Triple], questions: dict[str, list[Question]], *,
                entity_names: dict[str, str] | None = None) -> dict[str, Path]:
    """Write ``triples.tsv``, ``entity_names.tsv`` (when given) and ``<split>.jsonl`` per split into ``folder``.

    Raises:
      DataError: a field holds a tab or a newline (the TSV could not be read back as written).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def tsv(name: str, rows) -> None:
        path = folder / name
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            for row in rows:
                if any("\t" in f or "\n" in f or "\r" in f or f != f.strip() for f in row):
                    raise DataError(f"cannot write {row!r} as TSV: a field has a tab, a newline or outer spaces",
                                    path=str(path), fix="clean the field first")
                handle.write("\t".join(row) + "\n")
        written[name] = path

    tsv("triples.tsv", triples)
    if entity_names:
        tsv("entity_names.tsv", sorted(entity_names.items()))
    for split, split_questions in questions.items():
        path = folder / f"{split}.jsonl"
        with path.open("w", encoding="utf-8", newline="\n") as handle:
            for question in split_questions:
                handle.write(json.dumps(question_record(question), ensure_ascii=False) + "\n")
        written[f"{split}.jsonl"] = path
    return written

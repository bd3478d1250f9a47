"""Typed records every loader returns: questions, KG triples and skip reports."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import re
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

from stem_jax.errors import DataError

Triple = tuple[str, str, str]

UNDECODABLE = "undecodable bytes (not UTF-8)"
_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass(frozen=True)
class PathStep:
    """One hop of a gold relation path: follow ``relation`` forwards (head->tail) or backwards."""

    relation: str
    forward: bool = True


@dataclasses.dataclass(frozen=True)
class Question:
    """A question over a KG, the same shape for every dataset.

    Attributes:
      qid: stable id, unique within a dataset split (``"2-hop/test/17"`` for MetaQA).
      text: the question as the user asked it (MetaQA's ``[brackets]`` removed).
      topic_entities: KG entity names the question is about.
      answers: gold answer entity names (or strings, for RoG data).
      hops: the number of relation hops when known.
      qtype: MetaQA's relation-path type (``movie_to_director_to_movie``), else ``None``.
      gold_path: the gold relation path from the (first) topic entity, when known.
      graph: the question's own subgraph (RoG data), else ``None`` (one global KG).
      source: ``file:line`` the record came from, for error messages.
      constraints: for a question with several topic entities (WorldCup2014's conjunctive ``WC-C``):
        one ``(topic entity, relation path)`` per constraint, every path ending at the answer; the
        answers are the entities all of them reach. ``None`` for single-path questions.
    """

    qid: str
    text: str
    topic_entities: tuple[str, ...]
    answers: tuple[str, ...]
    hops: int | None = None
    qtype: str | None = None
    gold_path: tuple[PathStep, ...] | None = None
    graph: tuple[Triple, ...] | None = None
    source: str = ""
    constraints: tuple[tuple[str, tuple[PathStep, ...]], ...] | None = None


@dataclasses.dataclass
class SkipReport:
    """Counted, reasoned skips: loaders never drop a record silently."""

    counts: Counter = dataclasses.field(default_factory=Counter)
    examples: dict[str, str] = dataclasses.field(default_factory=dict)

    def skip(self, reason: str, where: str) -> None:
        self.counts[reason] += 1
        self.examples.setdefault(reason, where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def merge(self, other: SkipReport) -> None:
        self.counts.update(other.counts)
        for reason, where in other.examples.items():
            self.examples.setdefault(reason, where)

    def lines(self, verb: str = "skipped") -> list[str]:
        return [
            f"{verb} {n} record(s): {reason} (first at {self.examples[reason]})"
            for reason, n in sorted(self.counts.items())
        ]


@dataclasses.dataclass
class Dataset:
    """Questions plus the KG they are asked over.

    ``triples`` is the global KG (MetaQA, FB15k-237, demo); for RoG data it is the union of the
    per-question graphs, which stay on each question as ``Question.graph``.
    """

    name: str
    questions: list[Question]
    triples: list[Triple]
    skips: SkipReport = dataclasses.field(default_factory=SkipReport)
    entity_names: dict[str, str] | None = None  # id -> readable name, where ids are opaque (FB15k mids)
    # The data's own convention: its answers never include the question's entity, and its gold paths
    # never pass through it (MetaQA). The data's bound follows it; other KGs walk their paths as written.
    excludes_topic: bool = False
    # Questions the loader could not make answerable (no topic entity found) but whose answers are known:
    # (qid, reason, hops). They are misses in the metrics over every question of the split, listed by reason.
    dropped: list[tuple[str, str, int | None]] = dataclasses.field(default_factory=list)
    notes: SkipReport = dataclasses.field(default_factory=SkipReport)  # records kept with a change, by reason
    folder: Path | None = None  # the folder the KG was read from, when it was read from one (files, RoG)

    def splits_by_hops(self) -> dict[int | None, list[Question]]:
        groups: dict[int | None, list[Question]] = {}
        for q in self.questions:
            groups.setdefault(q.hops, []).append(q)
        return groups


def decode_line(raw: bytes, path: Path, lineno: int) -> str | DataError:
    """One line of a UTF-8 file without its newline (and CR), or the :class:`DataError` saying where it is not UTF-8."""
    if lineno == 1 and raw.startswith(_BOM):
        raw = raw[len(_BOM):]
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 4]
        return DataError(f"{UNDECODABLE} at byte {err.start + 1} ({bad!r})", path=str(path), line=lineno,
                         fix="re-save the file as UTF-8, or drop --strict to skip such lines")


def raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of a text file, split on b"\\n" only, so numbers match editors and qtype files
    (``str.splitlines`` would also split on form feeds and Unicode separators inside a line); ``.gz`` is read through.

    Raises:
      DataError: the file cannot be opened or read (permissions, a folder), or its gzip stream is not
        gzip, corrupt or truncated: one line naming the file and the line reached, not a traceback.
    """
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as handle:
            for lineno, raw in enumerate(handle, start=1):
                yield lineno, raw
    except gzip.BadGzipFile as err:
        if lineno:  # a bad CRC or length at the end of the stream
            raise DataError(f"damaged gzip file after line {lineno} ({err})", path=str(path),
                            fix="compress the file again (or download it again)") from None
        raise DataError(f"not a gzip file ({err})", path=str(path),
                        fix="decompress it, or drop the .gz suffix if it is plain text") from None
    except EOFError:
        raise DataError(f"truncated gzip file: it ends inside line {lineno + 1}", path=str(path),
                        fix="compress the file again (or download it again)") from None
    except zlib.error as err:
        raise DataError(f"corrupt gzip data after line {lineno} ({err})", path=str(path),
                        fix="compress the file again (or download it again)") from None
    except PermissionError:
        raise DataError("cannot read the file (permission denied)", path=str(path),
                        fix="make it readable (chmod a+r), or run as a user who may read it") from None
    except IsADirectoryError:
        raise DataError("a folder, not a file", path=str(path), fix="name the file itself") from None
    except OSError as err:
        raise DataError(f"cannot read the file ({err.strerror or err})", path=str(path),
                        fix="check the file and the disk it is on") from None


WHOLE_FILE_BYTES = 256 << 20  # files up to this size are read and decoded in one piece (decoded_lines)


def decoded_lines(path: Path) -> list[str] | None:
    """Every line of a plain UTF-8 file, as :func:`raw_lines` + :func:`decode_line` give them (split on
    "\\n" only, one trailing CR and a leading BOM dropped), read and decoded in one piece: less CPU
    than line by line. None when that cannot be done (a ``.gz`` file, one that cannot be
    read, a line that is not UTF-8): the caller then reads line by line, which says what is wrong and where."""
    if path.suffix == ".gz":
        return None
    try:
        if path.stat().st_size > WHOLE_FILE_BYTES:  # a huge file streams: its lines are never all held at once
            return None
        with open(path, "rb") as handle:  # the module's open, as raw_lines uses (tests stand in for it)
            text = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[-1] == "":  # the file ends with a newline (or is empty): no line follows it
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def file_lines(path: Path) -> list[str | DataError]:
    """Every line of ``path`` decoded, in one piece when :func:`decoded_lines` can, else line by line with a
    :class:`DataError` in place of each line that is not UTF-8 (the caller decides whether that is a skip)."""
    lines: list[str | DataError] | None = decoded_lines(path)
    if lines is None:
        lines = [decode_line(raw, path, lineno) for lineno, raw in raw_lines(path)]
    return lines


def read_lines(path: Path, skips: SkipReport, *, strict: bool = False) -> Iterator[tuple[int, str]]:
    """(line number, text) of every decodable line; undecodable ones are counted skips with file:line
    (with ``strict``: a :class:`DataError` naming the line and byte)."""
    lines = decoded_lines(path)
    if lines is not None:
        yield from enumerate(lines, start=1)
        return
    for lineno, raw in raw_lines(path):
        text = decode_line(raw, path, lineno)
        if isinstance(text, DataError):
            if strict:
                raise text
            skips.skip(UNDECODABLE, f"{path}:{lineno}")
            continue
        yield lineno, text


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def relation_text(relation: str, names: Mapping[str, str] | None = None) -> str:
    """The text the encoder sees for a relation: its readable name when ``names`` has one, else derived.

    Derivation from the identifier (a relation that already contains a space is a name and stays as is):

    * ``directed_by`` -> ``directed by`` (MetaQA; unchanged from earlier versions, so caches stay valid);
    * Freebase, dotted or slashed: the type and the property, ``film.film.directed_by`` and
      ``/film/film/directed_by`` -> ``film directed by`` (a compound such as
      ``/people/person/spouse_s./people/marriage/type_of_union`` keeps its last type: ``marriage type of union``);
      the type is dropped when the property repeats it (``film.film.film_format`` -> ``film format``);
    * a URI or a prefixed name: its fragment or last segment, ``http://dbpedia.org/ontology/director`` and
      ``dbo:director`` -> ``director``;
    * camelCase is split: ``directedBy`` -> ``directed by``.
    """
    if names and relation in names:
        return names[relation]
    return _derived_relation_text(relation)


@functools.lru_cache(maxsize=1 << 14)  # every traced run's schema texts pass here, a few relations many times
def _derived_relation_text(relation: str) -> str:
    text = relation.strip()
    if not text or any(c.isspace() for c in text):
        return text
    if "://" in text or (text.startswith("<") and text.endswith(">")):
        text = re.split(r"[/#]", text.strip("<>").rstrip("/#"))[-1]
    elif ":" in text:
        text = text.rsplit(":", 1)[-1]
    segments = [s for s in re.split(r"[./]+", text) if s] or [text]
    if len(segments) >= 2:
        kind, prop = segments[-2], segments[-1]
        text = prop if prop == kind or prop.startswith(kind + "_") else f"{kind}_{prop}"
    else:
        text = segments[0]
    if "_" not in text and _CAMEL_BOUNDARY.search(text):
        text = _CAMEL_BOUNDARY.sub(" ", text).lower()
    return text.replace("_", " ")

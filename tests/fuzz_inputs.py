"""Hypothesis strategies for input files whose every line has a known fate (the loader fuzz tests).

Each generated line belongs to one category, built so that the loaders' verdict on it is
unambiguous; ``expected_*`` then gives the exact skip counts the loaders must report. Lines are
bytes: random undecodable bytes, unicode (line separators, NUL, RTL marks, emoji), huge lines.
"""

from __future__ import annotations

import json
from collections import Counter

from hypothesis import strategies as st

from stem_jax.data.types import UNDECODABLE

# A tiny MetaQA-style KB: films, people, genres (entity names never contain [ ] | or tabs).
FILMS = [f"Film {i}" for i in range(12)]
PEOPLE = [f"Person {i}" for i in range(6)]
KB_LINES = [line for i, f in enumerate(FILMS) for line in (
    f"{f}|directed_by|{PEOPLE[i % 6]}", f"{f}|starred_actors|{PEOPLE[(i + 1) % 6]}",
    f"{f}|has_genre|{['Drama', 'Comedy'][i % 2]}")]
ENTITIES = set(FILMS) | set(PEOPLE) | {"Drama", "Comedy"}
DIRECTOR = {f: PEOPLE[i % 6] for i, f in enumerate(FILMS)}

MALFORMED_Q = "malformed question line (expected question<TAB>answer1|answer2)"
NO_TOPIC = "no [topic entity] in question"
UNKNOWN_TOPIC = "unknown topic entity (not in the KB)"
NO_ANSWERS = "question without answers"

# Text that cannot end or split a line, open a topic, or separate fields: but anything else goes,
# including U+2028/U+0085 (str.splitlines would split there), NUL, RTL marks and astral emoji.
_CHARS = st.characters(blacklist_characters="[]\t\n\r|", blacklist_categories=("Cs",))
_FREE = st.text(_CHARS, max_size=12)
_WORD = st.text(_CHARS, min_size=1, max_size=12).filter(lambda s: s.strip() != "")
_EXTRA = st.sampled_from(["\u2028", "\x85", "\x00", "\u200f", "\U0001f3ac", "\x0c", "\x1c"])


@st.composite
def _fancy(draw) -> str:
    return draw(_FREE) + draw(st.one_of(st.just(""), _EXTRA)) + draw(_FREE)


@st.composite
def question_line(draw) -> tuple[str, bytes]:
    """(category, line bytes without newline)."""
    kind = draw(st.sampled_from(["valid", "valid", "valid", "huge", "undecodable", "blank", "no_tab", "no_topic",
                                 "unknown_topic", "no_answers"]))
    film = draw(st.sampled_from(FILMS))
    prefix, suffix = draw(_fancy()), draw(_fancy())
    answers = draw(st.lists(_WORD, min_size=1, max_size=3))
    if kind in ("valid", "huge"):
        filler = "x" * draw(st.integers(100_000, 300_000)) if kind == "huge" else ""
        text = f"{prefix}{filler}[{film}]{suffix}\t{'|'.join([DIRECTOR[film], *answers])}"
        return "valid", text.encode()
    if kind == "undecodable":
        return kind, (draw(st.binary(max_size=20)) + b"\xff" + draw(st.binary(max_size=20))).replace(b"\n", b"")
    if kind == "blank":
        return kind, draw(st.sampled_from([b"", b"  ", b"\t", b" \t ", b"\r"]))
    if kind == "no_tab":
        return MALFORMED_Q, (draw(_WORD) + f"[{film}]").encode()
    if kind == "no_topic":
        return NO_TOPIC, f"{draw(_WORD)}\t{'|'.join(answers)}".encode()
    if kind == "unknown_topic":
        name = draw(_WORD.filter(lambda s: s.strip() not in ENTITIES))
        return UNKNOWN_TOPIC, f"{prefix}[{name}]{suffix}\t{'|'.join(answers)}".encode()
    return NO_ANSWERS, f"{prefix}[{film}]\t{draw(st.sampled_from(['', ' ', '|', ' | |']))}".encode()


@st.composite
def question_file(draw, min_size: int = 0, max_size: int = 12) -> tuple[list[str], bytes, bytes | None]:
    """(categories, question file bytes, matching qtype file bytes or None)."""
    lines = draw(st.lists(question_line(), min_size=min_size, max_size=max_size))
    kinds = [k for k, _ in lines]
    # a final empty line only exists when a newline follows it
    newline = bool(lines) and (lines[-1][1] == b"" or draw(st.booleans()))
    body = b"\n".join(b for _, b in lines) + (b"\n" if newline else b"")
    qtypes = None
    if draw(st.booleans()):
        types = []
        for i, kind in enumerate(kinds):
            bad = kind not in ("undecodable", "blank") and draw(st.integers(0, 5)) == 0
            types.append(b"movie_\xfe_to_director" if bad else b"movie_to_director")
            if bad:
                kinds[i] = "undecodable"  # the question line is fine, its qtype line is not
        qtypes = b"\n".join(types) + (b"\n" if types else b"")
    return kinds, body, qtypes


def expected_question_skips(kinds: list[str]) -> Counter:
    counts = Counter()
    for kind in kinds:
        if kind == "undecodable":
            counts[UNDECODABLE] += 1
        elif kind not in ("valid", "blank"):
            counts[kind] += 1
    return counts


MALFORMED_KB = "malformed KB line (expected head|relation|tail)"
DUPLICATE_KB = "duplicate KB triple"


@st.composite
def kb_file(draw) -> tuple[Counter, int, bytes]:
    """(expected skip counts, expected triples, KB file bytes)."""
    lines, counts, seen = [], Counter(), set()
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["valid", "valid", "repeat", "malformed", "undecodable", "blank", "huge"]))
        if kind == "repeat" and seen:
            triple = draw(st.sampled_from(sorted(seen)))
            pad = draw(st.sampled_from(["", " ", "  "]))
            lines.append(f"{pad}{triple[0]}|{triple[1]}{pad}|{triple[2]}".encode())
            counts[DUPLICATE_KB] += 1
        elif kind in ("valid", "huge", "repeat"):
            head = draw(_WORD) + ("y" * 200_000 if kind == "huge" else "")
            triple = (head.strip(), draw(_WORD).strip(), draw(_WORD).strip())
            lines.append("|".join(triple).encode())
            if triple in seen:
                counts[DUPLICATE_KB] += 1
            seen.add(triple)
        elif kind == "malformed":
            parts = draw(st.lists(_FREE, min_size=1, max_size=5).filter(
                lambda p: len(p) != 3 or not all(x.strip() for x in p)))
            line = "|".join(parts)
            if not line.strip():
                continue  # blank: not a record
            lines.append(line.encode())
            counts[MALFORMED_KB] += 1
        elif kind == "undecodable":
            lines.append(b"a|b|\xc3\x28")
            counts[UNDECODABLE] += 1
        else:
            lines.append(b" ")
    return counts, len(seen), b"\n".join(lines) + b"\n"


ROG_GOOD = {"id": "x", "question": "what", "answer": ["b"], "q_entity": ["a"], "a_entity": ["b"],
            "graph": [["a", "r", "b"]]}


@st.composite
def rog_file(draw) -> tuple[Counter, int, bytes]:
    """(expected skip counts, expected questions, RoG .jsonl bytes)."""
    lines, counts, good = [], Counter(), 0
    for i in range(draw(st.integers(0, 15))):
        kind = draw(st.sampled_from(["valid", "valid", "json_junk", "undecodable", "list", "missing", "empty_graph",
                                     "topic_missing", "bad_graph", "no_answers", "unicode"]))
        record = dict(ROG_GOOD, id=f"q{i}")
        if kind in ("valid", "unicode"):
            if kind == "unicode":
                record.update(question=draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)),
                              answer=[draw(_WORD)])
            good += 1
            lines.append(json.dumps(record, ensure_ascii=draw(st.booleans())).encode())
            continue
        if kind == "json_junk":
            # a raw control character is invalid anywhere in JSON, so "{...\x01" never parses
            junk = draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=10))
            lines.append(b"{" + junk.encode() + b"\x01")
            counts["invalid JSON"] += 1
            continue
        if kind == "undecodable":
            lines.append(b'{"id": "\xff"}')
            counts[UNDECODABLE] += 1
            continue
        if kind == "list":
            lines.append(b"[1, 2, 3]")
            counts["record is a JSON list, not an object"] += 1
            continue
        if kind == "missing":
            field = draw(st.sampled_from(["id", "question", "answer", "q_entity", "graph"]))
            del record[field]
            counts[f"record without field(s) {field}"] += 1
        elif kind == "empty_graph":
            record["graph"] = []
            counts["empty graph"] += 1
        elif kind == "topic_missing":
            record["q_entity"] = ["zzz"]
            counts["topic entity not in its graph"] += 1
        elif kind == "bad_graph":
            record["graph"] = draw(st.sampled_from([[["a", "r"]], "abc", [1, 2], {"a": 1}]))
            counts["graph is not a list of [head, relation, tail]"] += 1
        else:
            record["answer"], record["a_entity"] = [], []
            counts["question without answers"] += 1
        lines.append(json.dumps(record).encode())
    return counts, good, b"\n".join(lines) + b"\n"


def normalise_rog_counts(counts: Counter) -> Counter:
    """Fold the loader's 'invalid JSON (<reason> at column <n>)' reasons into one key, as the oracle counts them."""
    out = Counter()
    for reason, n in counts.items():
        out["invalid JSON" if reason.startswith("invalid JSON") else reason] += n
    return out

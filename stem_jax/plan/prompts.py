"""Prompt templates P1-P6 (paper appendix G, rewritten in our own words) and tolerant output parsers.

* P1 decomposition (SGDA): question -> atomic assertions sharing ``[ENTk]`` placeholders + strategy.
* P2 triple construction (SAGB): assertions -> (head, relation, tail) triples.
* P3 answer generation: question + DFS reasoning chains -> list of answers.
* P4 path assertions (training data): question + masked gold triples -> one assertion per triple.
* P5 strategy (training data): question + assertions -> Precision | Breadth.
* P6 reverse generation (training data): masked sampled triples + answer placeholder ->
  one sentence per triple and a multi-hop question, or "No Solution".

The templates ask for simple line-oriented outputs; the parsers also accept the tuple-shaped
outputs the paper's figures show, quotes or not, numbering or bullets, and stray prose around
them. A parser never raises on model output: it returns ``None`` (or an empty list) for what it
cannot read, and the caller retries (:mod:`stem_jax.plan.llm_planner`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence

from stem_jax.plan.schema import Strategy

# ---------------------------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------------------------

P1_DECOMPOSE = """You break multi-hop questions over a knowledge graph into single-hop statements.
Rules:
1. Every statement links exactly two entities through one relation, and every statement is needed to answer the question.
2. Write unknown entities, the final answer and any intermediate answer, as [ENT1], [ENT2], ... .
   One unknown keeps the same label in every statement; different unknowns get different labels.
   Entities named in the question are copied exactly as the question writes them.
3. Choose the answer strategy: "Precision" when the question has exactly one correct answer,
   "Breadth" when it has several (at the end or at an intermediate step). Use only these two words.
Answer in exactly this format and write nothing else:
Assertions:
- <statement 1>
- <statement 2>
Strategy: <Precision or Breadth>

{examples}
Question: {question}
"""

P1_EXAMPLE = """Question: {question}
Assertions:
{assertions}
Strategy: {strategy}
"""

P2_TRIPLES = """You turn single-hop statements into knowledge-graph triples. The statements come from one
multi-hop question, so placeholders link them: copy every [ENTk] label exactly as written.
Rules:
1. Write one triple per statement, as ("head", "relation", "tail").
2. The relation must be one of the knowledge graph's relations listed below, in the direction the graph stores it.
3. Entities named in a statement are copied exactly; do not invent new placeholders.
Relations: {relations}
Answer with one triple per line and nothing else.

{examples}
Statements:
{assertions}
Triples:
"""

P2_EXAMPLE = """Statements:
{assertions}
Triples:
{triples}
"""

P3_ANSWER = """Answer the question using the knowledge-graph paths below. Each path reads
entity -relation-> entity (or entity <-relation- entity for the reverse direction).
Keep answers short, list every answer the paths support, and reply with a JSON list of strings.

Paths:
{chains}
Question: {question}
Answer:"""

P4_PATH_ASSERTIONS = """Write one plain declarative sentence for each knowledge-graph triple below. The triples
come from the reasoning path of the question, so each sentence should state a fact the question relies on.
Rules:
1. A triple ("entity1", "relation", "entity2") becomes one sentence saying how entity1 relates to entity2.
2. Copy placeholders such as [ENT1] exactly; a placeholder that appears in several triples stays the same.
3. Return exactly as many sentences as there are triples, in the same order, one per line starting with "- ".

{examples}
Question: {question}
Triples:
{triples}
Sentences:
"""

P5_STRATEGY = """Pick the retrieval strategy a knowledge-graph question needs.
- "Precision": the question has one definite answer (e.g. "In which year was Edison born?").
- "Breadth": the question has several valid answers that must all be found (e.g. "Which countries border Russia?").
The statements below decompose the question and may help you decide.
Reply with the single word Precision or Breadth.

{examples}
Question: {question}
Statements:
{assertions}
Strategy:"""

P6_REVERSE = """You write training data for a question-answering system from a small knowledge-graph sample.
Step 1: write one declarative sentence per triple, in order. Copy placeholders such as [ENT1] exactly and
keep a repeated placeholder identical.
Step 2: write one question whose answer is {answer}. Every other placeholder is an intermediate answer: fold it
into the question as a modifier or relative clause. Answering the question must need every sentence.
If no clear question can use every sentence, reply only: No Solution
Answer in exactly this format:
Sentences:
- <sentence 1>
- <sentence 2>
Question: <the question>

{examples}
Triples:
{triples}
Answer entity: {answer}
"""


# Compact P1/P2 for small models (135M-1B): one line of rules, worked examples right before the
# question, and the answer header already written, so the model only continues a familiar pattern.
# A model that keeps going after its answer writes the next "Question:"; the planner cuts there.
P1_COMPACT = """Rewrite the question as facts, one per line. Write unknown things as [ENT1], [ENT2], ...; \
the last one is the answer. Copy names exactly. Strategy: Precision for one answer, Breadth for several.

{examples}Question: {question}
Facts:
"""

P1_COMPACT_EXAMPLE = """Question: {question}
Facts:
{assertions}
Strategy: {strategy}

"""

P2_COMPACT = """Write each fact as a triple ("head", "relation", "tail"). Relations: {relations}. \
Copy [ENT1], [ENT2], ... and names exactly.

{examples}Facts:
{assertions}
Triples:
"""

P2_COMPACT_EXAMPLE = """Facts:
{assertions}
Triples:
{triples}

"""

PROMPT_STYLES = ("full", "compact")


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FewShotExample:
    """A worked example for P1/P2: a question, its assertions, strategy and triples."""

    question: str
    assertions: tuple[str, ...]
    strategy: Strategy
    triples: tuple[tuple[str, str, str], ...]


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def format_triple(triple: Sequence[str]) -> str:
    return "(" + ", ".join(json.dumps(part, ensure_ascii=False) for part in triple) + ")"


def render_p1(question: str, examples: Sequence[FewShotExample]) -> str:
    shots = "\n".join(
        P1_EXAMPLE.format(question=e.question, assertions=_bullets(e.assertions), strategy=e.strategy) for e in examples
    )
    return P1_DECOMPOSE.format(examples=("Examples:\n" + shots) if shots else "", question=question)


def render_p2(assertions: Sequence[str], relations: Sequence[str], examples: Sequence[FewShotExample]) -> str:
    shots = "\n".join(
        P2_EXAMPLE.format(assertions=_bullets(e.assertions), triples="\n".join(format_triple(t) for t in e.triples))
        for e in examples
    )
    return P2_TRIPLES.format(relations=", ".join(relations), examples=("Examples:\n" + shots) if shots else "",
                             assertions=_bullets(assertions))


def render_p1_compact(question: str, examples: Sequence[FewShotExample]) -> str:
    """The compact SGDA prompt (small models): ends with ``Facts:`` so generation starts at the first fact."""
    shots = "".join(P1_COMPACT_EXAMPLE.format(question=e.question, assertions=_bullets(e.assertions),
                                              strategy=e.strategy) for e in examples)
    return P1_COMPACT.format(examples=shots, question=question)


def render_p2_compact(assertions: Sequence[str], relations: Sequence[str], examples: Sequence[FewShotExample]) -> str:
    """The compact SAGB prompt (small models): ends with ``Triples:``."""
    shots = "".join(P2_COMPACT_EXAMPLE.format(assertions=_bullets(e.assertions),
                                              triples="\n".join(format_triple(t) for t in e.triples))
                    for e in examples)
    return P2_COMPACT.format(relations=", ".join(relations), examples=shots, assertions=_bullets(assertions))


def cut_continuation(text: str) -> str:
    """``text`` up to where a model starts a new example (``Question:``/``Facts:`` on a new line)."""
    m = re.search(r"\n\s*(?:question|facts|statements)\s*:", text, re.IGNORECASE)
    return text[: m.start()] if m else text


# ---------------------------------------------------------------------------------------------
# Grammars (GBNF) for constrained decoding: llama.cpp's ``grammar``, vLLM's ``guided_grammar``
# ---------------------------------------------------------------------------------------------

# Above this many relations the SAGB grammar leaves the relation free (the grounder maps it):
# a grammar listing thousands of Freebase relations costs more to compile than it saves.
GRAMMAR_MAX_RELATIONS = 256


def gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def sgda_grammar(max_assertions: int = 4) -> str:
    """Compact-P1 output: 1..``max_assertions`` ``- fact`` lines, each naming a placeholder, then the strategy."""
    return "\n".join([
        f'root ::= fact{{1,{max_assertions}}} "Strategy: " ("Precision" | "Breadth") "\\n"',
        'fact ::= "- " [^\\n\\[]* placeholder [^\\n]* "\\n"',
        'placeholder ::= "[ENT" [1-9] "]"',
    ]) + "\n"


def sagb_grammar(relations: Sequence[str], max_triples: int = 4, exact: int | None = None) -> str:
    """Compact-P2 output: 1..``max_triples`` (or ``exact``) lines ``("node", "relation", "node")``.

    Relations come from ``relations``. Without ``exact`` a model that would end with a blank line
    may only continue with another triple, so callers that know the assertion count pass it.
    """
    if relations and len(relations) <= GRAMMAR_MAX_RELATIONS:
        relation = "relation ::= " + " | ".join(gbnf_literal(json.dumps(r, ensure_ascii=False)) for r in relations)
    else:
        relation = 'relation ::= "\\"" [^"\\n]+ "\\""'
    return "\n".join([
        f"root ::= triple{{{exact}}}" if exact else f"root ::= triple{{1,{max_triples}}}",
        'triple ::= "(" node ", " relation ", " node ")\\n"',
        'node ::= "\\"" ("[ENT" [1-9] "]" | [^"\\n\\[]+) "\\""',
        relation,
    ]) + "\n"


def render_p3(question: str, chains: Sequence[str]) -> str:
    return P3_ANSWER.format(chains="\n".join(chains) if chains else "(no paths found)", question=question)


def render_p4(question: str, triples: Sequence[Sequence[str]], examples: Sequence[FewShotExample] = ()) -> str:
    shots = "\n".join(
        f"Question: {e.question}\nTriples:\n" + "\n".join(format_triple(t) for t in e.triples)
        + "\nSentences:\n" + _bullets(e.assertions) + "\n"
        for e in examples
    )
    return P4_PATH_ASSERTIONS.format(examples=("Examples:\n" + shots) if shots else "", question=question,
                                     triples="\n".join(format_triple(t) for t in triples))


def render_p5(question: str, assertions: Sequence[str], examples: Sequence[FewShotExample] = ()) -> str:
    shots = "\n".join(
        f"Question: {e.question}\nStatements:\n{_bullets(e.assertions)}\nStrategy: {e.strategy}\n" for e in examples
    )
    return P5_STRATEGY.format(examples=("Examples:\n" + shots) if shots else "", question=question,
                              assertions=_bullets(assertions))


def render_p6(triples: Sequence[Sequence[str]], answer: str, examples: Sequence[tuple[Sequence[Sequence[str]], str, Sequence[str], str]] = ()) -> str:
    """``examples`` are (triples, answer placeholder, sentences, question) tuples."""
    shots = "\n".join(
        "Triples:\n" + "\n".join(format_triple(t) for t in ts) + f"\nAnswer entity: {a}\nSentences:\n"
        + _bullets(ss) + f"\nQuestion: {q}\n"
        for ts, a, ss, q in examples
    )
    return P6_REVERSE.format(examples=("Examples:\n" + shots) if shots else "", answer=answer,
                             triples="\n".join(format_triple(t) for t in triples))


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_PLACEHOLDER_LOOSE = re.compile(r"\[?\s*\bENT\s*_?\s*(\d+)\s*\]?", re.IGNORECASE)
_STRATEGY_LINE = re.compile(r"strategy\s*[:=\-]?\s*[\"'*]*\s*(precision|breadth)\b", re.IGNORECASE)
_STRATEGY_WORD = re.compile(r"\b(precision|breadth)\b", re.IGNORECASE)
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022]|\(?\d+[.):]|\[\d+\])\s*")


def normalise_placeholders(text: str) -> str:
    """``ENT1``, ``[ent 1]``, ``[ENT_1]`` -> ``[ENT1]`` (models drift on brackets and case)."""
    return _PLACEHOLDER_LOOSE.sub(lambda m: f"[ENT{int(m.group(1))}]", text)


def parse_strategy(text: str) -> Strategy | None:
    """The strategy a generation names: a ``Strategy:`` line wins, else a lone strategy word; else None.

    A text naming both words without a ``Strategy:`` label is ambiguous and gives None.
    """
    labelled = _STRATEGY_LINE.findall(text)
    if labelled:
        return labelled[-1].capitalize()  # type: ignore[return-value]
    words = {w.capitalize() for w in _STRATEGY_WORD.findall(text)}
    return words.pop() if len(words) == 1 else None  # type: ignore[return-value]


def _strip_item(line: str) -> str:
    line = _LIST_MARK.sub("", line.strip()).strip().rstrip(",").strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1]
    return line.strip()


def _quoted_strings(text: str) -> list[str]:
    return [a or b for a, b in re.findall(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'', text)]


def parse_list(text: str, header: str | None = None, stop: Sequence[str] = ()) -> list[str]:
    """Items of a bulleted/numbered list (after ``header:`` when given), up to a line starting with ``stop``.

    Falls back to a JSON list, then to a tuple of quoted strings, when there are no list lines.
    """
    body = text
    if header:
        m = re.search(rf"{header}\s*:?", text, re.IGNORECASE)
        if m:
            body = text[m.end():]
    items: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped:
            if items:
                continue
            continue
        if any(stripped.lower().startswith(s.lower()) for s in stop):
            break
        if _LIST_MARK.match(stripped):
            item = _strip_item(stripped)
            if item:
                items.append(item)
        elif items:
            break
    if items:
        return items
    start, end = body.find("["), body.rfind("]")
    if 0 <= start < end:
        try:
            loaded = json.loads(body[start : end + 1])
            if isinstance(loaded, list) and all(isinstance(x, str) for x in loaded):
                return [x.strip() for x in loaded if x.strip()]
        except ValueError:
            pass
    return [q.strip() for q in _quoted_strings(body.split("\n\n")[0]) if q.strip()]


@dataclasses.dataclass(frozen=True)
class Decomposition:
    """A parsed P1 generation: assertions with ``[ENTk]`` placeholders, and the strategy if one was named."""

    assertions: tuple[str, ...]
    strategy: Strategy | None


def parse_decomposition(text: str) -> Decomposition | None:
    """Read a P1 generation; None when no assertion can be found.

    Accepts the ``Assertions: / - ... / Strategy: ...`` format the prompt asks for and the
    paper's ``(("a1", "a2"), Strategy)`` tuples. Placeholders are normalised to ``[ENTk]``.
    Assertions without any entity-like content (fewer than two words) are dropped.
    """
    strategy = parse_strategy(text)
    items = parse_list(text, header="Assertions", stop=("strategy",))
    if not items:
        # the paper's tuple format: ((a1, a2, ...), Strategy) with or without quotes
        quoted = _quoted_strings(text)
        items = [q for q in quoted if q.lower() not in ("precision", "breadth")]
    if not items and "(" in text:
        # unquoted tuples: (a1, a2), Strategy -- split on commas, keep multi-word pieces
        body = _STRATEGY_WORD.split(text)[0] if strategy else text
        items = [p.strip(" ()\n\t\"'") for p in body.split(",")]
    cleaned = []
    for item in items:
        item = normalise_placeholders(item).strip().rstrip(".").strip()
        if _STRATEGY_LINE.match(item) or item.lower() in ("precision", "breadth"):
            continue
        if len(item.split()) >= 2:
            cleaned.append(item)
    if not cleaned:
        return None
    return Decomposition(tuple(dict.fromkeys(cleaned)), strategy)


def _split_triple(inner: str, relations: Sequence[str] = ()) -> tuple[str, str, str] | None:
    quoted = _quoted_strings(inner)
    if len(quoted) == 3:
        return tuple(q.strip() for q in quoted)  # type: ignore[return-value]
    parts = [p.strip().strip("\"'").strip() for p in inner.split(",")]
    if len(parts) == 3 and all(parts):
        return parts[0], parts[1], parts[2]
    if len(parts) > 3:
        # An unquoted entity with commas ("Lust, Caution"): split around a known relation name.
        known = {r.lower() for r in relations}
        hits = [i for i, p in enumerate(parts) if p.lower() in known and 0 < i < len(parts) - 1]
        if len(hits) == 1:
            i = hits[0]
            return ", ".join(parts[:i]), parts[i], ", ".join(parts[i + 1 :])
    return None


def parse_triples(text: str, relations: Sequence[str] = ()) -> list[tuple[str, str, str]] | None:
    """Read a P2 generation: every ``(head, relation, tail)`` group, in order; None if there is none.

    A group that does not split into three parts (an unquoted name with commas and no known
    relation to split around, a truncated last line) makes the whole answer invalid, so the
    caller retries rather than tracing half a schema graph.
    """
    groups = re.findall(r"\(([^()]*)\)", text)
    if not groups:
        return None
    triples = []
    for inner in groups:
        if not inner.strip():
            continue
        triple = _split_triple(inner, relations)
        if triple is None:
            return None
        triples.append(tuple(normalise_placeholders(p) for p in triple))
    # A truncated generation leaves an unclosed "(" after the last group.
    tail = text[text.rfind(")") + 1 :] if ")" in text else text
    if "(" in tail:
        return None
    return triples or None  # type: ignore[return-value]


def parse_answers(text: str) -> list[str]:
    """Read a P3 generation: a JSON list, else a bulleted list, else ``|``/comma-separated answers."""
    text = text.strip()
    items = parse_list(text)
    if items:
        return list(dict.fromkeys(items))
    line = text.splitlines()[0] if text else ""
    line = re.sub(r"^answer\s*:\s*", "", line, flags=re.IGNORECASE)
    separator = "|" if "|" in line else ","
    return list(dict.fromkeys(p.strip().strip("\"'[]").strip() for p in line.split(separator) if p.strip().strip("\"'[]")))


def parse_sentences(text: str, expected: int | None = None) -> list[str] | None:
    """Read a P4 generation (or P6's sentences): None when the count differs from ``expected``."""
    items = [normalise_placeholders(s) for s in parse_list(text, header="Sentences", stop=("question",))]
    if not items or (expected is not None and len(items) != expected):
        return None
    return items


def parse_reverse(text: str, expected: int) -> tuple[list[str], str] | None:
    """Read a P6 generation: (sentences, question); None for "No Solution" or anything malformed."""
    if re.search(r"\bno solution\b", text, re.IGNORECASE):
        return None
    sentences = parse_sentences(text, expected)
    m = re.search(r"question\s*:\s*(.+)", text, re.IGNORECASE)
    if sentences is None or not m:
        # the paper's shape: [(s1, s2, ...), question]
        quoted = _quoted_strings(text)
        if len(quoted) == expected + 1:
            return [normalise_placeholders(q) for q in quoted[:-1]], quoted[-1].strip()
        return None
    question = m.group(1).strip().strip("\"'").strip()
    return (sentences, question) if question else None


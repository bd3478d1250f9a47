"""The LLM planner (``--planner vllm``): SGDA + SAGB through a language model.

Pipeline per batch of questions (paper §3.1-3.2, appendix C, footnote 5):

1. **SGDA.** Prompt P1 (:mod:`stem_jax.plan.prompts`) with few-shot examples picked from the
   training data (the nearest training questions by masked-question embedding when an encoder
   is given, else the first examples of distinct templates) is rendered for every question; all
   prompts go through **one** backend call with beam width ``B``. Each of the ``B`` outputs is
   parsed into assertions sharing ``[ENTk]`` placeholders and a strategy.
2. **Retries.** Outputs without parseable assertions or without a valid strategy are
   re-asked, all of them in one sampled call per round, up to ``retries`` (5) rounds. A beam
   that still has assertions but no strategy defaults to *Precision* (footnote 5); a beam that
   never yields assertions is dropped. Both are counted in :attr:`VLLMPlanner.stats`.
3. **SAGB.** Prompt P2 turns each distinct assertion list into triples, greedily (temperature
   0), again one call for the whole batch, with the same retry rounds for unparseable output.
4. **Grounding.** Relation names are mapped to the KG vocabulary: exact match, else a
   normalised match (case, spaces, dots), else the nearest relation by encoder embedding of the
   relation text; every non-exact mapping is logged (logger ``stem_jax.plan.llm_planner``) and counted.
   Placeholders are normalised to ``[ENTk]``; the answer node is the highest-numbered
   placeholder of the last triple (the last assertion asks for the answer), else the
   highest-numbered placeholder overall. A graph with no placeholder is dropped.

Backends: :class:`~stem_jax.plan.vllm.VLLMBackend` (offline ``vllm.LLM``, imported lazily) and
:class:`~stem_jax.plan.openai_client.OpenAIBackend` (an OpenAI-compatible ``/v1/completions``
endpoint such as ``vllm serve``, plain ``urllib``). Anything with a ``generate`` method of the
:class:`~stem_jax.plan.base.LLMBackend` shape works; the tests use recorded generations.

Run for real against small models served by llama.cpp's OpenAI-compatible server on CPU
(experiments/llm_planner_metaqa.py); vLLM itself on a GPU has not been run: see the README.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stem_jax.data.types import Question
from stem_jax.encoder.base import TextEncoder
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.plan import prompts
from stem_jax.plan.base import LLMBackend, ScoredSchema
from stem_jax.plan.openai_client import OpenAIBackend
from stem_jax.plan.oracle import OraclePlanner
from stem_jax.plan.prompts import Decomposition, FewShotExample
from stem_jax.plan.question_text import mask_topics, topic_names, unique_texts
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, is_placeholder
from stem_jax.plan.templates import template_of
from stem_jax.plan.vllm import VLLMBackend

log = logging.getLogger(__name__)
_PLACEHOLDER_NUM = re.compile(r"^\[ENT(\d+)\]$")


# ---------------------------------------------------------------------------------------------
# Relation grounding
# ---------------------------------------------------------------------------------------------


def _norm_relation(name: str) -> str:
    return re.sub(r"[\s\-/.]+", "_", name.strip().strip("\"'").lower()).strip("_")


@dataclasses.dataclass
class RelationGrounder:
    """Maps generated relation names onto the KG vocabulary (exact, normalised, nearest embedding).

    ``embeddings`` [R, d] are the relation-text embeddings (``KGEmbeddings.relations``); without
    them (or an ``encoder``) unknown names stay unknown (relation id -1 when grounded).
    """

    relations: Sequence[str]
    encoder: TextEncoder | None = None
    embeddings: np.ndarray | None = None
    stats: Counter = dataclasses.field(default_factory=Counter)
    mapped: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self._exact = set(self.relations)
        self._normalised: dict[str, str] = {}
        for r in self.relations:
            self._normalised.setdefault(_norm_relation(r), r)
            self._normalised.setdefault(_norm_relation(relation_text(r)), r)
            self._normalised.setdefault(_norm_relation(r.split(".")[-1]), r)

    def ground(self, name: str) -> str:
        if name in self._exact:
            self.stats["exact"] += 1
            return name
        if name in self.mapped:
            self.stats["cached"] += 1
            return self.mapped[name]
        found = self._normalised.get(_norm_relation(name))
        if found is None:  # a namespaced name ("film.film.directed_by", "/film/directed_by"): try its last segment
            found = self._normalised.get(_norm_relation(re.split(r"[./]", name.strip().strip("/"))[-1]))
        how = "normalised"
        if found is None and self.encoder is not None and self.embeddings is not None and len(self.relations):
            query = self.encoder.encode([relation_text(name)])[0]
            sims = np.asarray(self.embeddings, np.float32) @ query
            best = int(np.argmax(sims))
            found, how = self.relations[best], f"nearest (cos {sims[best]:.3f})"
        if found is None:
            self.stats["unknown"] += 1
            log.warning("relation %r is not in the KG vocabulary and no encoder is set; kept as is", name)
            return name
        self.stats[how.split(" ")[0]] += 1
        log.info("grounded relation %r -> %r (%s)", name, found, how)
        self.mapped[name] = found
        return found


# ---------------------------------------------------------------------------------------------
# Few-shot examples from training data
# ---------------------------------------------------------------------------------------------


def assertion_from_triple(head: str, relation: str, tail: str) -> str:
    """A rule-based assertion for a schema triple: ``Kismet directed by [ENT1]`` (P4 replaces it with an LLM)."""
    return f"{head} {relation_text(relation)} {tail}"


def examples_from_training(questions: Sequence[Question], names: dict[str, str] | None = None,
                           assertions: Callable[[SchemaGraph], Sequence[str]] | None = None) -> list[FewShotExample]:
    """Few-shot examples from training questions' oracle plans (one per question with a gold plan).

    ``names`` (entity id -> display name, a KG with opaque ids): the examples name their topics as
    the question text does, so the prompt's triples read like its question and the pool can mask them.
    """
    oracle = OraclePlanner(names=names)
    out = []
    for q in questions:
        schemas = oracle.plan(q)
        if not schemas:
            continue
        s = schemas[0]
        texts = assertions(s) if assertions else [assertion_from_triple(t.head, t.relation, t.tail) for t in s.triples]
        out.append(FewShotExample(q.text, tuple(texts), s.strategy, tuple((t.head, t.relation, t.tail) for t in s.triples)))
    return out


@dataclasses.dataclass
class FewShotPool:
    """Picks ``k`` examples per question: nearest by masked-question embedding, distinct templates first."""

    examples: Sequence[FewShotExample]
    encoder: TextEncoder | None = None
    k: int = 3
    names: dict[str, str] | None = None
    canonical: bool = False  # show each template's first example (not the nearest wording): shared prompt prefixes

    def __post_init__(self) -> None:
        self._keys = []
        for e in self.examples:
            constants = [n for t in e.triples for n in (t[0], t[2]) if not is_placeholder(n)]
            schema = SchemaGraph(tuple(SchemaTriple(*t) for t in e.triples), _answer_node(e.triples) or e.triples[0][2])
            template = template_of(schema, list(dict.fromkeys(constants)))
            self._keys.append(template.key if template else repr(e.triples))
        self._emb = None
        self._picked: dict[str, list[FewShotExample]] = {}
        self._canonical: dict[str, FewShotExample] = {}
        for e, key in zip(self.examples, self._keys, strict=True):
            self._canonical.setdefault(key, e)
        if self.encoder is not None and self.examples:
            texts = [mask_topics(e.question, [n for t in e.triples for n in (t[0], t[2]) if not is_placeholder(n)])[0]
                     for e in self.examples]
            # templated training sets repeat wordings: one example per masked wording, encoded once
            distinct, inverse = unique_texts(texts)
            first = np.unique(inverse, return_index=True)[1]
            self.examples = [self.examples[i] for i in first]
            self._keys = [self._keys[i] for i in first]
            self._emb = self.encoder.encode(distinct).astype(np.float32)

    def pick(self, questions: Sequence[Question]) -> list[list[FewShotExample]]:
        if not self.examples:
            return [[] for _ in questions]
        if self._emb is None:
            chosen, seen = [], set()
            for e, key in zip(self.examples, self._keys, strict=True):
                if key not in seen:
                    seen.add(key)
                    chosen.append(e)
                if len(chosen) == self.k:
                    break
            return [list(chosen) for _ in questions]
        todo = [q for q in questions if q.qid not in self._picked]  # SGDA and SAGB ask for the same questions
        if todo:
            texts = [mask_topics(q.text, topic_names(q, self.names))[0] for q in todo]
            sims = self.encoder.encode(texts).astype(np.float32) @ self._emb.T
            for q, picked in zip(todo, self._nearest(sims), strict=True):
                self._picked[q.qid] = picked
        return [list(self._picked[q.qid]) for q in questions]

    def _nearest(self, sims: np.ndarray) -> list[list[FewShotExample]]:
        out = []
        for row in sims:
            chosen, seen = [], set()
            for i in np.argsort(-row, kind="stable"):
                if self._keys[i] in seen:
                    continue
                seen.add(self._keys[i])
                chosen.append(self._canonical[self._keys[i]] if self.canonical else self.examples[i])
                if len(chosen) == self.k:
                    break
            out.append(chosen[::-1])  # most similar example last, closest to the question
        return out


# ---------------------------------------------------------------------------------------------
# Schema graphs from parsed triples
# ---------------------------------------------------------------------------------------------


def _answer_node(triples: Sequence[Sequence[str]]) -> str | None:
    def placeholders(items):
        return [n for t in items for n in (t[0], t[2]) if _PLACEHOLDER_NUM.match(n)]

    last = placeholders(triples[-1:]) if triples else []
    pool = last or placeholders(triples)
    if not pool:
        return None
    return max(pool, key=lambda n: int(_PLACEHOLDER_NUM.match(n).group(1)))


def schema_from_triples(triples: Sequence[tuple[str, str, str]], strategy: str, grounder: RelationGrounder | None = None) -> SchemaGraph | None:
    """A schema graph from parsed SAGB triples (relations grounded), or None if it has no answer placeholder."""
    cleaned = []
    for head, relation, tail in triples:
        head, tail = prompts.normalise_placeholders(head.strip()), prompts.normalise_placeholders(tail.strip())
        if not head or not tail or not relation.strip():
            return None
        cleaned.append((head, grounder.ground(relation.strip()) if grounder else relation.strip(), tail))
    answer = _answer_node(cleaned)
    if answer is None or not cleaned:
        return None
    unique = tuple(dict.fromkeys(SchemaTriple(*t) for t in cleaned))
    return SchemaGraph(unique, answer, strategy if strategy in ("Precision", "Breadth") else "Precision")


# ---------------------------------------------------------------------------------------------
# The planner
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class VLLMPlanner:
    """SGDA (P1, beam ``B``) + SAGB (P2, greedy) through an :class:`LLMBackend`; see the module docstring.

    ``style`` picks the prompts: ``full`` (P1/P2, the paper's rules) or ``compact`` (short prompts a
    135M-1B model can follow: :data:`~stem_jax.plan.prompts.P1_COMPACT`). ``constrained`` sends a GBNF
    grammar with every compact-style request (the SGDA line format; SAGB triples over the KG's
    relations), so the output parses by construction; the backend must accept ``grammar=``.
    After :meth:`plan_batch`, :attr:`failures` holds, per question of that batch, why it got no
    plan (``parse`` or ``ground``) or None.
    """

    backend: LLMBackend
    relations: Sequence[str]
    pool: FewShotPool
    grounder: RelationGrounder | None = None
    beam: int = 4
    retries: int = 5
    max_tokens: int = 256
    retry_temperature: float = 0.7
    seed: int = 0
    style: str = "full"
    constrained: bool = False
    name: str = "vllm"
    stats: Counter = dataclasses.field(default_factory=Counter)
    failures: list[str | None] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.grounder is None:
            self.grounder = RelationGrounder(self.relations)
        if self.style not in prompts.PROMPT_STYLES:
            raise StemError(f"unknown prompt style {self.style!r}; choose one of {', '.join(prompts.PROMPT_STYLES)}")
        if self.constrained and self.style != "compact":
            raise StemError("constrained decoding uses the compact prompts' output format; set style='compact'")

    def _generate(self, rendered: Sequence[str], grammar: str | None, **kwargs: Any) -> list[list[str]]:
        if grammar is not None:
            kwargs["grammar"] = grammar
        outputs = self.backend.generate(rendered, **kwargs)
        return [[prompts.cut_continuation(t) for t in outs] for outs in outputs]

    def _render_p1(self, question: Question, shots: Sequence[FewShotExample]) -> str:
        if self.style == "compact":
            return prompts.render_p1_compact(question.text, shots)
        return prompts.render_p1(question.text, shots)

    def _render_p2(self, assertions: Sequence[str], shots: Sequence[FewShotExample]) -> str:
        if self.style == "compact":
            return prompts.render_p2_compact(assertions, self.relations, shots)
        return prompts.render_p2(assertions, self.relations, shots)

    def decompose(self, questions: Sequence[Question]) -> list[list[Decomposition]]:
        """SGDA: ``B`` decompositions per question (one beam call, then retry rounds)."""
        shots = self.pool.pick(questions)
        rendered = [self._render_p1(q, ex) for q, ex in zip(questions, shots, strict=True)]
        grammar = prompts.sgda_grammar() if self.constrained else None
        outputs = self._generate(rendered, grammar, n=self.beam, beam=self.beam > 1, max_tokens=self.max_tokens,
                                 seed=self.seed)
        self.stats["sgda_calls"] += 1
        parsed: list[list[Decomposition | None]] = [[prompts.parse_decomposition(t) for t in outs] for outs in outputs]
        self.stats["sgda_outputs"] += sum(len(p) for p in parsed)
        self.stats["sgda_first_try_unparseable"] += sum(d is None for p in parsed for d in p)
        for round_ in range(self.retries):
            todo = [(qi, bi) for qi, beams in enumerate(parsed) for bi, d in enumerate(beams)
                    if d is None or d.strategy is None]
            if not todo:
                break
            self.stats["sgda_retry_rounds"] += 1
            self.stats["sgda_retried_beams"] += len(todo)
            again = self._generate([rendered[qi] for qi, _ in todo], grammar, n=1, beam=False,
                                   temperature=self.retry_temperature, max_tokens=self.max_tokens,
                                   seed=self.seed + 1 + round_)
            self.stats["sgda_calls"] += 1
            for (qi, bi), outs in zip(todo, again, strict=True):
                fresh = prompts.parse_decomposition(outs[0]) if outs else None
                old = parsed[qi][bi]
                if fresh is not None and (fresh.strategy is not None or old is None):
                    parsed[qi][bi] = fresh
        result = []
        for beams in parsed:
            kept: list[Decomposition] = []
            for d in beams:
                if d is None:
                    self.stats["beams_dropped_no_assertions"] += 1
                    continue
                if d.strategy is None:
                    self.stats["strategy_defaulted_to_precision"] += 1
                    d = Decomposition(d.assertions, "Precision")
                if d.assertions not in {k.assertions for k in kept}:
                    kept.append(d)
            result.append(kept)
        return result

    def build(self, questions: Sequence[Question], decompositions: Sequence[Sequence[Decomposition]]) -> list[list[ScoredSchema]]:
        """SAGB: one greedy P2 call over every (question, decomposition), then parse, retry, ground."""
        shots = self.pool.pick(questions)
        jobs = [(qi, d) for qi, ds in enumerate(decompositions) for d in ds]
        rendered = [self._render_p2(d.assertions, shots[qi]) for qi, d in jobs]
        triples: list[list[tuple[str, str, str]] | None] = [None] * len(jobs)

        def generate(todo: list[int], **kwargs: Any) -> None:
            # constrained: one triple per assertion exactly, so jobs go in one call per assertion count
            groups = ({len(jobs[i][1].assertions) for i in todo} if self.constrained else {None})
            for count in sorted(groups, key=lambda c: c or 0):
                part = [i for i in todo if count is None or len(jobs[i][1].assertions) == count]
                grammar = prompts.sagb_grammar(self.relations, exact=count) if count is not None else None
                outputs = self._generate([rendered[i] for i in part], grammar, n=1, beam=False,
                                         max_tokens=self.max_tokens, **kwargs)
                self.stats["sagb_calls"] += 1
                for i, outs in zip(part, outputs, strict=True):
                    triples[i] = prompts.parse_triples(outs[0], self.relations) if outs else None

        if jobs:
            generate(list(range(len(jobs))), temperature=0.0)
            self.stats["sagb_outputs"] += len(jobs)
            self.stats["sagb_first_try_unparseable"] += sum(t is None for t in triples)
        for round_ in range(self.retries):
            todo = [i for i, t in enumerate(triples) if t is None]
            if not todo:
                break
            self.stats["sagb_retry_rounds"] += 1
            generate(todo, temperature=self.retry_temperature, seed=self.seed + 101 + round_)
        out: list[list[ScoredSchema]] = [[] for _ in questions]
        reasons: list[Counter] = [Counter() for _ in questions]
        for (qi, d), found in zip(jobs, triples, strict=True):
            if found is None:
                self.stats["beams_dropped_unparseable_triples"] += 1
                reasons[qi]["parse"] += 1
                continue
            schema = schema_from_triples(found, d.strategy or "Precision", self.grounder)
            if schema is None:
                self.stats["beams_dropped_no_answer_placeholder"] += 1
                reasons[qi]["ground"] += 1
                continue
            if all(schema != s.schema for s in out[qi]):
                out[qi].append(ScoredSchema(schema, 1.0))
        self.failures = [None if beams else ("ground" if r["ground"] else "parse")
                         for beams, r in zip(out, reasons, strict=True)]
        return out

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        if not questions:
            self.failures = []
            return []
        beams = self.build(questions, self.decompose(questions))
        self.stats["questions"] += len(questions)
        self.stats["questions_without_plan"] += sum(not b for b in beams)
        return beams

    def plan(self, question: Question, index: KGIndex | None = None) -> list[SchemaGraph]:
        del index
        return [entry.schema for entry in self.plan_batch([question])[0]]


def build_llm_planner(model: str, url: str | None, config: Any, index: KGIndex, train: Sequence[Question], *,
                      names: dict[str, str] | None = None, encoder: TextEncoder | None = None,
                      backend: LLMBackend | None = None) -> tuple[VLLMPlanner, dict[str, Any]]:
    """The LLM planner for ``--planner vllm|hybrid``: backend, few-shot pool from ``train``, grounder.

    ``config`` is a :class:`~stem_jax.config.PlannerConfig` (beam, retries, llm_prompts, llm_grammar,
    llm_server). With ``url`` the model is served (``vllm serve`` or ``python -m llama_cpp.server``),
    else loaded by offline vLLM.
    """
    if backend is None:
        backend = (OpenAIBackend(url, model, server=config.llm_server) if url
                   else VLLMBackend(model))
    pool = FewShotPool(examples_from_training(train, names), encoder=encoder, names=names)
    grounder = RelationGrounder(index.relations)
    if encoder is not None:
        grounder = RelationGrounder(index.relations, encoder, encoder.encode([relation_text(r) for r in index.relations]))
    planner = VLLMPlanner(backend, index.relations, pool, grounder, beam=config.beam, retries=config.retries,
                          style=config.llm_prompts, constrained=config.llm_grammar)
    return planner, {"planner": "vllm", "model": model, "url": url, "beam": config.beam, "retries": config.retries,
                     "prompts": config.llm_prompts, "grammar": config.llm_grammar,
                     "server": getattr(backend, "server", "vllm-offline")}

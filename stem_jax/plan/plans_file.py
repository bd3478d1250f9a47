"""Plans made elsewhere: a JSONL of plans per question id, grounded to the KG and traced by STEM.

Any planner (an LLM, RoG, a person) can hand STEM its plans. One JSON object per line::

    {"id": "WebQTest-547", "paths": [["location.country.currency_used"], ["finance.currency.countries_used"]]}
    {"id": "q7", "paths": [["^directed_by", "directed_by"]], "scores": [0.8]}
    {"id": "q9", "schemas": [{"triples": [["Kismet", "directed_by", "[ENT1]"]], "answer": "[ENT1]"}]}

* ``paths`` (or ``rog_plans``, ``relation_paths``, ``plans``): relation paths as RoG writes them, each from
  the question's topic entity; a relation walked backwards may be written ``^r``. A question file that carries
  its plans (webqsp-r's ``rog_plans``) is itself a plans file.
* ``schemas``: schema graphs as triples over the question's entities and placeholders ``[ENTk]``, with the
  answer placeholder (default: the last placeholder).
* ``scores``: optional, one per plan (the planner's confidence); default: every plan counts the same.

Every relation is grounded to the KG: exactly, else to the KG relation whose text is nearest by the sentence
encoder's cosine (at least ``min_similarity``); both are counted (:attr:`FilePlanner.stats`), and a plan with a
relation that cannot be grounded is dropped and counted. A question without a line gets no plan (a miss).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import PathStep, Question
from stem_jax.errors import DataError, StemError
from stem_jax.kg.index import KGIndex, relation_text
from stem_jax.plan.base import ScoredSchema
from stem_jax.plan.question_text import topic_names
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, is_placeholder

PATH_KEYS = ("paths", "rog_plans", "relation_paths", "plans")


def read_plans_file(path: Path) -> dict[str, dict[str, Any]]:
    """qid -> its record (``paths`` or ``schemas``, optional ``scores``); malformed lines are a DataError."""
    records: dict[str, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read the plans file ({err})", path=str(path), fix="pass a readable JSONL file") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise DataError(f"invalid JSON ({err})", path=str(path), line=lineno, fix="write one JSON object per line"
                            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("id"), str | int):
            raise DataError("a plans record needs an id", path=str(path), line=lineno,
                            fix='write {"id": "<question id>", "paths": [["relation", ...], ...]}')
        key = next((k for k in PATH_KEYS if k in record), None)
        paths = record.get(key) if key else None
        schemas = record.get("schemas")
        if paths is None and schemas is None:
            raise DataError("a plans record needs paths or schemas", path=str(path), line=lineno,
                            fix=f"add one of {', '.join(PATH_KEYS)} (relation paths) or schemas")
        if paths is not None and not (isinstance(paths, list) and all(
                isinstance(p, list) and all(isinstance(r, str) for r in p) for p in paths)):
            raise DataError("paths must be a list of relation lists", path=str(path), line=lineno,
                            fix='write "paths": [["r1", "r2"], ["r3"]]')
        scores = record.get("scores")
        n_plans = len(paths if paths is not None else schemas)
        if scores is not None and (not isinstance(scores, list) or len(scores) != n_plans
                                   or not all(isinstance(s, int | float) and s >= 0 for s in scores)):
            raise DataError("scores must be one non-negative number per plan", path=str(path), line=lineno,
                            fix="give one score per plan, or drop the field")
        records[str(record["id"])] = {"paths": paths, "schemas": schemas, "scores": scores}
    return records


class FilePlanner:
    """A :class:`~stem_jax.plan.base.BatchPlanner` over a plans file (see the module docstring)."""

    def __init__(self, path: Path, index: KGIndex, *, encoder: Any = None, names: dict[str, str] | None = None,
                 beam: int = 4, min_similarity: float = 0.5, strategy: str = "Breadth") -> None:
        self.path = Path(path)
        self.records = read_plans_file(self.path)
        self.index, self.encoder, self.names = index, encoder, names or {}
        self.beam, self.min_similarity, self.strategy = beam, min_similarity, strategy
        self.name = f"plans-file-{self.path.stem}"
        self.stats: Counter = Counter()
        self._grounded: dict[str, str | None] = {}
        self._relation_rows: np.ndarray | None = None

    def ground(self, relation: str) -> str | None:
        """The KG relation ``relation`` names: itself, else the nearest by text (counted), else None."""
        if relation in self.index.relation_ids:
            self.stats["relations exact"] += 1
            return relation
        if relation not in self._grounded:
            self._grounded[relation] = self._nearest(relation)
        grounded = self._grounded[relation]
        self.stats["relations by similarity" if grounded else "relations not grounded"] += 1
        return grounded

    def _nearest(self, relation: str) -> str | None:
        if self.encoder is None:
            return None
        if self._relation_rows is None:
            self._relation_rows = np.asarray(self.encoder.encode([relation_text(r) for r in self.index.relations]),
                                             np.float32)
        query = np.asarray(self.encoder.encode([relation_text(relation)]), np.float32)[0]
        sims = self._relation_rows @ query
        best = int(np.argmax(sims))
        return self.index.relations[best] if sims[best] >= self.min_similarity else None

    def _path_schema(self, topic: str, relations: Sequence[str]) -> SchemaGraph | None:
        from stem_jax.plan.oracle import schema_from_path

        steps = []
        for written in relations:
            forward = not written.startswith("^")
            grounded = self.ground(written.lstrip("^"))
            if grounded is None:
                return None
            steps.append(PathStep(grounded, forward))
        return schema_from_path(topic, steps, self.strategy) if steps else None

    def _schema(self, spec: Any, topics: list[str]) -> SchemaGraph | None:
        if not isinstance(spec, dict) or not isinstance(spec.get("triples"), list):
            return None
        triples = []
        for triple in spec["triples"]:
            if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
                return None
            relation = self.ground(triple[1].lstrip("^"))
            if relation is None:
                return None
            triples.append(SchemaTriple(triple[0], relation, triple[2]))
        holders = [n for t in triples for n in (t.head, t.tail) if is_placeholder(n)]
        answer = spec.get("answer") or (holders[-1] if holders else None)
        try:
            return SchemaGraph(tuple(triples), answer, self.strategy) if triples and answer else None
        except StemError:  # an answer that is not one of its nodes: a dropped, counted plan
            return None

    def plan_batch(self, questions: Sequence[Question]) -> list[list[ScoredSchema]]:
        beams = []
        for question in questions:
            record = self.records.get(question.qid)
            topics = topic_names(question, self.names)
            if record is None or not topics:
                self.stats["questions without plans" if record is None else "questions without a topic"] += 1
                beams.append([])
                continue
            plans = record["paths"] if record["paths"] is not None else record["schemas"]
            scores = record["scores"] or [1.0] * len(plans)
            beam: list[ScoredSchema] = []
            seen: set[str] = set()
            for plan, score in zip(plans, scores, strict=True):
                schema = (self._path_schema(topics[0], plan) if record["paths"] is not None
                          else self._schema(plan, topics))
                if schema is None:
                    self.stats["plans dropped (a relation not grounded)"] += 1
                    continue
                if schema.describe() in seen or len(beam) >= self.beam:
                    continue
                seen.add(schema.describe())
                beam.append(ScoredSchema(schema, float(score)))
            total = sum(entry.score for entry in beam)
            beams.append([ScoredSchema(e.schema, e.score / total if total > 0 else 1.0 / len(beam)) for e in beam])
            self.stats["plans"] += len(beam)
        return beams

"""Plans made elsewhere (RoG's relation paths, schema triples) are grounded to the KG and traced by STEM."""

from __future__ import annotations

import json

import pytest

from stem_jax.config import EncoderConfig
from stem_jax.data.types import PathStep, Question
from stem_jax.encoder import get_encoder
from stem_jax.errors import DataError
from stem_jax.kg.index import build_index
from stem_jax.plan.plans_file import FilePlanner
from stem_jax.plan.schema_paths import chain_path

TRIPLES = [("Kismet", "film.film.directed_by", "William Dieterle"), ("Kismet", "film.film.written_by", "Edward Knoblock"),
           ("William Dieterle", "people.person.place_of_birth", "Ludwigshafen")]


def _question(qid="q1"):
    return Question(qid=qid, text="who directed kismet", topic_entities=("Kismet",), answers=("William Dieterle",))


def _planner(tmp_path, records, **kwargs):
    path = tmp_path / "plans.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return FilePlanner(path, build_index(TRIPLES), encoder=get_encoder(EncoderConfig(name="hashing")), **kwargs)


def test_rog_paths_become_chain_plans_in_beam_order(tmp_path):
    planner = _planner(tmp_path, [{"id": "q1", "rog_plans": [["film.film.directed_by"],
                                                             ["film.film.directed_by", "people.person.place_of_birth"],
                                                             ["^film.film.written_by"]]}])
    beam = planner.plan_batch([_question()])[0]
    assert [chain_path(e.schema) for e in beam] == [
        (PathStep("film.film.directed_by"),),
        (PathStep("film.film.directed_by"), PathStep("people.person.place_of_birth")),
        (PathStep("film.film.written_by", False),)]
    assert sum(e.score for e in beam) == pytest.approx(1.0)
    assert planner.stats["relations exact"] == 4


def test_unknown_relations_ground_by_similarity_or_drop_the_plan_counted(tmp_path):
    planner = _planner(tmp_path, [{"id": "q1", "paths": [["film.film.directed_by.extra"], ["zzz.qqq"]],
                                   "scores": [3, 1]}], min_similarity=0.3)
    beam = planner.plan_batch([_question(), _question("q2")])
    assert planner.stats["questions without plans"] == 1 and beam[1] == []
    assert planner.stats["relations by similarity"] + planner.stats["relations not grounded"] == 2
    assert all(t.relation in {r for _, r, _ in TRIPLES} for e in beam[0] for t in e.schema.triples)


def test_schema_triples_with_placeholders(tmp_path):
    planner = _planner(tmp_path, [{"id": "q1", "schemas": [{"triples": [["Kismet", "film.film.directed_by", "[ENT1]"]],
                                                            "answer": "[ENT1]"}]}])
    (entry,) = planner.plan_batch([_question()])[0]
    assert entry.schema.answer == "[ENT1]" and entry.score == 1.0


@pytest.mark.parametrize("line, problem", [("{not json", "invalid JSON"), ('{"paths": [["r"]]}', "needs an id"),
                                           ('{"id": "q", "paths": "r"}', "list of relation lists"),
                                           ('{"id": "q"}', "needs paths or schemas")])
def test_malformed_plans_files_name_file_and_line(tmp_path, line, problem):
    path = tmp_path / "plans.jsonl"
    path.write_text('{"id": "ok", "paths": [["r"]]}\n' + line + "\n")
    with pytest.raises(DataError, match=problem) as err:
        FilePlanner(path, build_index(TRIPLES))
    assert err.value.line == 2 and err.value.path == str(path)

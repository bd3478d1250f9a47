"""Constraint branches and the evidence bound: a second topic's branch narrows the main path's answers to the gold
set, branches that do not meet the main path are never offered, and the branch tree traces to the intersection."""

import itertools

import numpy as np
import pytest

from stem_jax.data.types import PathStep
from stem_jax.kg.index import build_index
from stem_jax.plan.branches import (
    evidence_bound,
    mediator_branches,
    meeting_branches,
    schema_with_branches,
    set_f1,
)
from stem_jax.plan.relation_paths import PathCatalog

TRIPLES = [("Fury", "film.film.starring", "Logan Lerman"), ("Perks", "film.film.starring", "Logan Lerman"),
           ("Yuma", "film.film.starring", "Logan Lerman"), ("Fury", "film.film.other_crew", "m.0crew"),
           ("m.0crew", "film.crew_gig.crew_member", "Candice White"), ("Elsewhere", "film.film.other_crew", "m.0c2"),
           ("m.0c2", "film.crew_gig.crew_member", "Candice White"), ("Perks", "film.film.genre", "Drama")]


@pytest.fixture()
def catalog():
    index = build_index(TRIPLES)
    mediators = np.asarray([e.startswith("m.") for e in index.entities])
    return index, PathCatalog(index, mediators=mediators)


def test_only_the_second_topics_branch_gives_the_exact_answer(catalog):
    index, paths = catalog
    ids = index.entity_ids
    alone = evidence_bound([ids["Logan Lerman"]], [ids["Fury"]], paths)
    assert not alone.exact and alone.best_f1 == pytest.approx(0.5)
    both = evidence_bound([ids["Logan Lerman"], ids["Candice White"]], [ids["Fury"]], paths)
    assert both.exact and both.best_f1 == 1.0
    assert [topic for topic, _, _ in both.branches] in ([ids["Candice White"]], [])
    assert both.main_topic in (ids["Logan Lerman"], ids["Candice White"])


def test_branches_that_miss_the_main_paths_answers_are_not_offered(catalog):
    index, paths = catalog
    films = np.asarray(sorted(index.entity_ids[f] for f in ("Fury", "Perks", "Yuma")))
    found = meeting_branches(paths, index.entity_ids["Candice White"], films)
    assert [b.ends.tolist() for b in found] == [[index.entity_ids["Fury"]]]
    assert found[0].path == (PathStep("film.crew_gig.crew_member", False), PathStep("film.film.other_crew", False))
    assert meeting_branches(paths, index.entity_ids["Drama"], np.asarray([index.entity_ids["Yuma"]])) == []


def test_a_question_without_a_topic_or_answers_has_a_zero_bound(catalog):
    index, paths = catalog
    assert evidence_bound([], [index.entity_ids["Fury"]], paths).best_f1 == 0.0
    assert evidence_bound([index.entity_ids["Logan Lerman"]], [], paths).best_f1 == 0.0


@pytest.mark.parametrize("seed", range(20))
def test_set_f1_matches_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    found, gold = (np.unique(rng.integers(0, 8, rng.integers(0, 6))) for _ in range(2))
    hits = len(set(found.tolist()) & set(gold.tolist()))
    p = hits / len(found) if len(found) else 0.0
    r = hits / len(gold) if len(gold) else 0.0
    assert set_f1(found, gold) == pytest.approx(2 * p * r / (p + r) if hits else 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_is_the_best_over_every_main_path_and_branch_choice(seed):
    """The exhaustive search over (main path, one branch or none per other topic), written plainly, agrees."""
    rng = np.random.default_rng(seed)
    triples = [(f"e{rng.integers(10)}", f"r{rng.integers(3)}", f"e{rng.integers(10)}") for _ in range(30)]
    index = build_index(triples)
    paths = PathCatalog(index, max_hops=1)
    topics = [int(t) for t in rng.choice(index.num_entities, 2, replace=False)]
    gold = sorted({int(g) for g in rng.choice(index.num_entities, 2)})
    best = 0.0
    for main in topics:
        other = [t for t in topics if t != main][0]
        for m in paths.paths(main):
            for b in [None, *paths.paths(other)]:
                kept = m.ends if b is None else np.intersect1d(m.ends, b.ends)
                best = max(best, set_f1(np.asarray(kept), np.asarray(gold)))
    assert evidence_bound(topics, gold, paths).best_f1 == pytest.approx(best)


def test_the_branch_tree_meets_at_the_answer_and_traces_from_the_main_topic():
    schema = schema_with_branches("Logan Lerman", [PathStep("film.film.starring", False)],
                                  [("Candice White", [PathStep("film.crew_gig.crew_member", False),
                                                      PathStep("film.film.other_crew", False)])])
    assert schema.answer == "[ENT1]"
    assert set(schema.constants()) == {"Logan Lerman", "Candice White"}
    steps = schema.dfs_order("Logan Lerman")
    assert [s.child for s in steps] == ["[ENT1]", "[ENT2]", "Candice White"]
    assert list(itertools.chain.from_iterable((t.head, t.tail) for t in schema.triples)).count("[ENT1]") == 2


def test_a_constant_named_exactly_as_a_kg_entity_is_checked_and_a_written_value_is_not():
    from stem_jax.plan.schema import ground

    index = build_index(TRIPLES)
    schema = schema_with_branches("Logan Lerman", [PathStep("film.film.starring", False)],
                                  [("Candice White", [PathStep("film.crew_gig.crew_member", False),
                                                      PathStep("film.film.other_crew", False)])])
    plan = ground(schema, "Logan Lerman", index)
    assert plan.constants == ((3, index.entity_ids["Candice White"]),)
    written = schema_with_branches("Logan Lerman", [PathStep("film.film.starring", False)],
                                   [("a crew member", [PathStep("film.film.other_crew", False)])])
    assert ground(written, "Logan Lerman", index).constants == ((2, -1),)


def test_branches_stay_within_two_steps_when_main_paths_are_longer():
    # Aronofsky wrote Noah; every film shares a genre with Noah, so a 3-step branch (writer -> film -> genre <- film)
    # would "meet" every candidate through the genre and state nothing about the writer.
    triples = [("Noah", "film.film.starring", "Logan Lerman"), ("Perks", "film.film.starring", "Logan Lerman"),
               ("Aronofsky", "film.writer.film", "Noah"), ("Noah", "film.film.genre", "Drama"),
               ("Perks", "film.film.genre", "Drama"), ("Yuma", "film.film.starring", "Logan Lerman")]
    index = build_index(triples)
    ids = index.entity_ids
    long_paths = PathCatalog(index, max_hops=3)
    films = np.asarray(sorted(ids[f] for f in ("Noah", "Perks", "Yuma")))
    found = meeting_branches(long_paths, ids["Aronofsky"], films)
    assert [b.ends.tolist() for b in found] == [[ids["Noah"]]]
    assert all(len(b.path) <= 2 for b in found)
    longer = meeting_branches(long_paths, ids["Aronofsky"], films, max_steps=3)
    assert any(len(b.path) == 3 for b in longer)  # what the cap leaves out: the genre detour


PERFORMANCES = [("m.p1", "film.performance.actor", "Taylor Lautner"), ("m.p1", "film.performance.film", "Twilight"),
                ("m.p1", "film.performance.character", "Jacob Black"),
                ("m.p2", "film.performance.actor", "Taylor Lautner"), ("m.p2", "film.performance.film", "Abduction"),
                ("m.p2", "film.performance.character", "Nathan Harper"),
                ("m.p3", "film.performance.actor", "Taylor Lautner"), ("m.p3", "film.performance.film", "Eclipse"),
                ("m.p3", "film.performance.character", "Jacob Black"),
                ("m.p4", "film.performance.actor", "Anne Other"), ("m.p4", "film.performance.film", "Abduction"),
                ("m.p4", "film.performance.character", "Jacob Black"),
                ("Twilight", "film.film.genre", "Drama"), ("Abduction", "film.film.genre", "Drama")]
ACTOR_TO_CHARACTER = (PathStep("film.performance.actor", False), PathStep("film.performance.character", True))


def performances():
    index = build_index(PERFORMANCES)
    return index, PathCatalog(index, mediators=np.asarray([e.startswith("m.") for e in index.entities]))


def test_a_branch_meets_the_mediator_on_the_main_path_and_keeps_what_it_leads_to():
    index, catalog = performances()
    ids = index.entity_ids
    characters = np.asarray(sorted(ids[c] for c in ("Jacob Black", "Nathan Harper")))
    # through any performance, Abduction has both characters (another actor played Jacob Black in it): only the
    # performance node between this actor and the character ties the film to one of them
    assert meeting_branches(catalog, ids["Abduction"], characters) == []
    [branch] = mediator_branches(catalog, ids["Taylor Lautner"], ACTOR_TO_CHARACTER, ids["Abduction"], characters)
    assert branch.at == 1 and branch.path == (PathStep("film.performance.film", False),)
    assert branch.ends.tolist() == [ids["Nathan Harper"]]
    # the evidence bound finds it too: the actor's characters narrowed by the film, exactly the gold one
    bound = evidence_bound([ids["Taylor Lautner"], ids["Abduction"]], [ids["Nathan Harper"]], catalog)
    assert bound.exact and bound.branches == ((ids["Abduction"], branch.path, 1),)


def test_a_mediator_branch_that_keeps_every_answer_is_not_offered():
    index, catalog = performances()
    ids = index.entity_ids
    jacob = np.asarray([ids["Jacob Black"]])
    # Twilight keeps Jacob Black, the only candidate: it narrows nothing
    assert mediator_branches(catalog, ids["Taylor Lautner"], ACTOR_TO_CHARACTER, ids["Twilight"], jacob) == []


def _mediator_branches_reference(triples, topic, path, other, candidates, mediators):
    """Plain sets: walk the path node set by node set; a step of ``other`` onto a mediator node at some position
    keeps those nodes, and the rest of the path from them gives the answers."""
    def step(nodes, relation, forward):
        return {t if forward else h for h, r, t in triples if r == relation and (h if forward else t) in nodes}

    out = set()
    nodes = {topic}
    for at in range(1, len(path)):
        nodes = step(nodes, path[at - 1].relation, path[at - 1].forward)
        middle = {n for n in nodes if n in mediators}
        for relation, forward in {(r, h == other) for h, r, t in triples if other in (h, t)}:
            kept = middle & step({other}, relation, forward)
            if not kept:
                continue
            ends = kept
            for s in path[at:]:
                ends = step(ends, s.relation, s.forward)
            ends = {e for e in ends if e != topic and e not in mediators} & set(candidates)
            if ends and len(ends) < len(candidates):
                out.add(frozenset(ends))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_mediator_branches_match_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    names = [f"e{i}" for i in range(8)] + [f"m.{i}" for i in range(5)]
    relations = ["r0", "r1", "r2"]
    triples = sorted({(names[rng.integers(len(names))], relations[rng.integers(3)], names[rng.integers(len(names))])
                      for _ in range(40)})
    index = build_index(triples)
    mediators = np.asarray([e.startswith("m.") for e in index.entities])
    catalog = PathCatalog(index, mediators=mediators)
    id_triples = [(index.entity_ids[h], r, index.entity_ids[t]) for h, r, t in triples]
    mediator_ids = {i for i, m in enumerate(mediators) if m}
    for topic in (index.entity_ids[n] for n in names if n in index.entity_ids and not n.startswith("m.")):
        for candidate in catalog.paths(topic):
            if len(candidate.path) != 2:
                continue
            for other in range(index.num_entities):
                if other == topic or mediators[other]:
                    continue
                got = mediator_branches(catalog, topic, candidate.path, other, candidate.ends)
                expected = _mediator_branches_reference(id_triples, topic, candidate.path, other,
                                                        candidate.ends.tolist(), mediator_ids)
                assert {frozenset(b.ends.tolist()) for b in got} == expected


def test_a_mediator_branch_is_written_at_the_mediator_and_the_tracer_keeps_what_it_ties(tmp_path):
    import json

    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.engine import Engine
    from stem_jax.plan.factory import PlannerSpec

    schema = schema_with_branches("Taylor Lautner", ACTOR_TO_CHARACTER,
                                  [("Abduction", (PathStep("film.performance.film", False),), 1)])
    assert schema.answer == "[ENT2]"
    assert ("[ENT1]", "film.performance.film", "Abduction") in {(t.head, t.relation, t.tail) for t in schema.triples}
    (tmp_path / "triples.tsv").write_text("".join("\t".join(t) + "\n" for t in PERFORMANCES))
    (tmp_path / "train.jsonl").write_text(json.dumps(
        {"id": "q1", "question": "who did Taylor Lautner play in Abduction",
         "topic_entities": ["Taylor Lautner", "Abduction"], "answers": ["Nathan Harper"]}) + "\n")
    plans = tmp_path / "plans.jsonl"
    plans.write_text(json.dumps({"id": "q1", "schemas": [{"triples": [[t.head, t.relation, t.tail]
                                                                      for t in schema.triples],
                                                          "answer": schema.answer}]}) + "\n")
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    engine = Engine.open("files", config=config, planner=PlannerSpec(plans_file=plans), data_dir=tmp_path,
                         split="train", cache_dir=tmp_path / "cache")
    [found] = engine.retrieve(engine.dataset.questions)
    # Abduction's other performance (another actor as Jacob Black) ties no answer: only this actor's is kept
    assert [a for a, _ in found.answers] == ["Nathan Harper"]

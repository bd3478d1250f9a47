"""Exact anchoring: a question that names its topic entity starts from that entity, not its twin.

The KG has case and accent twins (MetaQA has 6,116 case twins: the actor ``Michelle Trachtenberg``
and the tag ``michelle trachtenberg``). An uncased encoder gives twins the same embedding, so the
paper's cosine top-N ties, and ``top_k`` keeps the lower id: here the tag, which appears first.
"""

import dataclasses

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.types import Dataset, Question
from stem_jax.encoder import HashingEncoder
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem.pipeline import StemPipeline, fold_name
from stem_jax.plan.schema import SchemaGraph, SchemaTriple
from stem_jax.trace.reference import anchor_reference

TRIPLES = [
    ("Ice Princess", "has_tags", "michelle trachtenberg"),  # the tag comes first: the lower id
    ("Ice Princess", "starred_actors", "Michelle Trachtenberg"),
    ("EuroTrip", "starred_actors", "Michelle Trachtenberg"),
    ("Harriet the Spy", "starred_actors", "Michelle Trachtenberg"),
    ("Amelie", "has_tags", "paris"),  # accent twin of the film below, first again
    ("Amélie", "directed_by", "Jean-Pierre Jeunet"),
    ("Amélie", "written_by", "Guillaume Laurant"),
    ("Ice Princess", "written_by", "Tim Fywell"),
    ("Ice Princess", "directed_by", "Tim Fywell"),
    ("I Capture the Castle", "directed_by", "Tim Fywell"),
]


def _question(qid, text, topic, relation, answers, reverse=False):
    triple = SchemaTriple("[ENT1]", relation, topic) if reverse else SchemaTriple(topic, relation, "[ENT1]")
    schema = SchemaGraph((triple,), answer="[ENT1]", strategy="Breadth")
    return Question(qid, text, (topic,), answers, hops=1), schema


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    index = build_index(TRIPLES)
    encoder = HashingEncoder(dim=64)
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=64, progress=False)
    cases = [
        _question("actor", "what films did Michelle Trachtenberg star in", "Michelle Trachtenberg", "starred_actors",
                  ("Ice Princess", "EuroTrip", "Harriet the Spy"), reverse=True),
        _question("film", "who directed Amélie", "Amélie", "directed_by", ("Jean-Pierre Jeunet",)),
        # a topic the KG knows only up to case and accents: the folded name finds the film
        _question("folded", "who wrote AMÉLIE", "AMÉLIE", "written_by", ("Guillaume Laurant",)),
    ]
    dataset = Dataset("twins", [q for q, _ in cases], TRIPLES)
    return dataset, index, encoder, embeddings, {q.qid: s for q, s in cases}


def _evaluate(twins, **engine):
    dataset, index, encoder, embeddings, schemas = twins
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, batch_precision=8, batch_breadth=8,
                                                                    **engine))
    evaluator = StemPipeline(dataset, index, embeddings, encoder, config)
    runs, _ = evaluator.plan_all(dataset.questions, lambda q, _index: [schemas[q.qid]])
    evaluator.embed_texts([t for rs in runs for r in rs for t in r.plan.step_texts()], show_progress=False)
    flat = [r for rs in runs for r in rs]
    outputs, _ = evaluator.trace(flat)
    records, cursor = {}, 0
    for question, rs in zip(dataset.questions, runs, strict=True):
        records[question.qid] = evaluator.record(question, rs, outputs[cursor : cursor + len(rs)], {})
        cursor += len(rs)
    return records, {q.qid: (r[0], o) for q, r, o in zip(dataset.questions, runs, outputs, strict=False)}


def test_twins_tie_under_the_uncased_encoder(twins):
    _, index, _, embeddings, _ = twins
    emb = embeddings.entities.array.astype(np.float32)
    actor, tag = index.entity_ids["Michelle Trachtenberg"], index.entity_ids["michelle trachtenberg"]
    assert tag < actor and np.array_equal(emb[actor], emb[tag])
    # the paper's rule (cosine top-N) picks the tag; naming the topic picks the actor
    assert anchor_reference(emb, emb[actor], 5, 1.5, None)[0] == tag
    assert anchor_reference(emb, emb[actor], 5, 1.5, None, [(actor, 2)]) == (actor, 1.0)
    # even when the twin is in the guidance set and λ boosts it, the named entity wins
    guidance = np.zeros(index.num_entities, bool)
    guidance[tag] = True
    assert anchor_reference(emb, emb[actor], 5, 1.5, guidance, [(actor, 2)])[0] == actor


def test_exact_anchor_answers_the_question_and_paper_preset_does_not(twins):
    records, _ = _evaluate(twins)
    assert set(records["actor"]["prediction"]) == {"Ice Princess", "EuroTrip", "Harriet the Spy"}
    assert records["film"]["prediction"] == ["Jean-Pierre Jeunet"]
    assert records["folded"]["prediction"] == ["Guillaume Laurant"]
    paper, _ = _evaluate(twins, preset="paper")
    # the tag twin has no starred_actors triple: the paper-literal run starts there and finds nothing
    assert "EuroTrip" not in paper["actor"]["prediction"]


def test_case_sensitive_match_beats_case_insensitive(twins):
    _, index, _, embeddings, _ = twins
    emb = embeddings.entities.array.astype(np.float32)
    actor, tag = index.entity_ids["Michelle Trachtenberg"], index.entity_ids["michelle trachtenberg"]
    named = [(tag, 1), (actor, 2)]  # level, not position, decides
    assert anchor_reference(emb, emb[actor], 5, 1.0, None, named)[0] == actor
    assert fold_name("Amélie") == fold_name("AMELIE") == "amelie"


def test_topic_excluded_from_answers_unless_switched_off(twins):
    dataset, index, encoder, embeddings, schemas = twins
    # "films directed by the writer of Ice Princess": the walk back reaches Ice Princess by another triple
    back = SchemaGraph((SchemaTriple("Ice Princess", "written_by", "[ENT1]"),
                        SchemaTriple("[ENT2]", "directed_by", "[ENT1]")), answer="[ENT2]", strategy="Breadth")
    question = Question("back", "films directed by the writer of Ice Princess", ("Ice Princess",),
                        ("I Capture the Castle",), hops=2)
    twins_back = (Dataset("twins", [question], TRIPLES), index, encoder, embeddings, {"back": back})
    kept, _ = _evaluate(twins_back, exclude_topic=False)
    dropped, _ = _evaluate(twins_back)
    assert "Ice Princess" in kept["back"]["prediction"]
    assert "Ice Princess" not in dropped["back"]["prediction"]
    assert dropped["back"]["prediction"] == ["I Capture the Castle"]

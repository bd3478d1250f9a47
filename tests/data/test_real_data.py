"""Real benchmark data from $STEM_DATA_DIR (set by .ci/run); skipped locally when unset."""

import numpy as np
import pytest

from stem_jax.config import SubgraphConfig
from stem_jax.data.fb15k import load_fb15k237
from stem_jax.data.metaqa import load_metaqa
from stem_jax.kg.index import build_index
from stem_jax.kg.stats import question_subgraph_sizes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metaqa(shared_data):
    return load_metaqa(shared_data / "metaqa", split="test")


def test_metaqa_partial_kb_and_test_questions(metaqa):
    index = build_index(metaqa.triples)
    assert index.num_triples == 128_185  # SOURCES.md: the reconstruction's unique triples
    assert 42_000 <= index.num_entities <= 43_300
    assert index.num_relations == 9
    loaded = len(metaqa.questions)
    skipped = metaqa.skips.total
    assert loaded + skipped == 9_947 + 14_872 + 14_274  # every line is loaded or a counted skip
    assert set(metaqa.skips.counts) == {"unknown topic entity (not in the KB)"}
    assert skipped < 0.01 * loaded
    assert sum(q.hops == 2 and q.qtype.count("_to_") == 2 for q in metaqa.questions) > 14_000


def test_metaqa_subgraphs_hold_most_answers(metaqa):
    index = build_index(metaqa.triples)
    sample = metaqa.questions[::50]
    report = question_subgraph_sizes(sample, index, SubgraphConfig())
    for key in ("1-hop", "2-hop", "3-hop"):
        assert report[key]["answers_any_inside"] > 0.95, report[key]
    assert report["1-hop"]["triples"]["mean"] < report["3-hop"]["triples"]["mean"]


def test_fb15k237_vocabulary(shared_data):
    data = load_fb15k237(shared_data / "fb15k-237", split="test")
    index = build_index(data.triples)
    assert index.num_entities == 14_541 and index.num_relations == 237
    assert all(e in data.entity_names for e in index.entities[:1000])
    assert np.mean([len(q.answers) for q in data.questions]) >= 1

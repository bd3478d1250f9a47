"""Fuzzed question, qtype, KB and RoG files through the loaders: no traceback, exact skip counts.

Every generated line has a known fate (see tests/fuzz_inputs.py): random undecodable bytes, missing
fields, huge lines, unicode line separators and friends. The default suite tries a few hundred
inputs; ``-m slow`` runs the same properties with a larger budget.
"""

from collections import Counter

import pytest
from fuzz_inputs import (
    KB_LINES,
    expected_question_skips,
    kb_file,
    normalise_rog_counts,
    question_file,
    rog_file,
)
from hypothesis import HealthCheck, given, settings

from stem_jax.data.metaqa import load_metaqa, read_kb
from stem_jax.data.rog import load_rog
from stem_jax.data.types import SkipReport
from stem_jax.errors import DataError, StemError

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
LONG = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
TRIED = Counter()  # generated inputs per property (run with -s and --hypothesis-show-statistics to see them)


def _questions(tmp_path_factory, generated):
    TRIED["questions"] += 1
    kinds, body, qtypes = generated
    root = tmp_path_factory.mktemp("metaqa")
    (root / "kb.txt").write_text("\n".join(KB_LINES) + "\n")
    (root / "q.txt").write_bytes(body)
    if qtypes is not None:
        (root / "t.txt").write_bytes(qtypes)
    expected = expected_question_skips(kinds)
    files = [(root / "q.txt", root / "t.txt" if qtypes is not None else None)]
    if "valid" not in kinds:
        with pytest.raises(DataError, match="no usable questions"):
            load_metaqa(root, question_files=files)
        return
    data = load_metaqa(root, question_files=files)
    assert len(data.questions) == kinds.count("valid")
    assert data.skips.counts == expected
    for question in data.questions:
        assert question.answers and question.topic_entities[0].startswith("Film ")
        assert question.hops == (1 if qtypes is not None else None)
    if expected:  # --strict stops at the first bad line with a DataError naming it
        with pytest.raises(DataError, match=r"q\.txt:\d+: |t\.txt:\d+: "):
            load_metaqa(root, question_files=files, strict=True)


def _kb(tmp_path_factory, generated):
    TRIED["kb"] += 1
    counts, n_triples, body = generated
    path = tmp_path_factory.mktemp("kb") / "kb.txt"
    path.write_bytes(body)
    skips = SkipReport()
    if n_triples == 0:
        with pytest.raises(DataError):
            read_kb(path, skips)
        return
    assert len(read_kb(path, skips)) == n_triples
    assert skips.counts == counts


def _rog(tmp_path_factory, generated):
    TRIED["rog"] += 1
    counts, good, body = generated
    path = tmp_path_factory.mktemp("rog") / "test.jsonl"
    path.write_bytes(body)
    if good == 0:
        with pytest.raises(DataError, match="no usable questions"):
            load_rog(path)
        return
    data = load_rog(path)
    assert len(data.questions) == good
    assert normalise_rog_counts(data.skips.counts) == counts
    if counts:
        with pytest.raises(StemError):
            load_rog(path, strict=True)


def _fuzzed(check, strategy, budget):
    """A property test: ``check`` on every file ``strategy`` generates, within ``budget`` (FAST or LONG)."""

    @budget
    @given(generated=strategy)
    def test(tmp_path_factory, generated):
        check(tmp_path_factory, generated)

    return test


test_fuzzed_question_files = _fuzzed(_questions, question_file(), FAST)
test_fuzzed_kb_files = _fuzzed(_kb, kb_file(), FAST)
test_fuzzed_rog_files = _fuzzed(_rog, rog_file(), FAST)
# the same properties with a larger budget (-m slow)
test_fuzzed_question_files_long = pytest.mark.slow(_fuzzed(_questions, question_file(max_size=40), LONG))
test_fuzzed_kb_files_long = pytest.mark.slow(_fuzzed(_kb, kb_file(), LONG))
test_fuzzed_rog_files_long = pytest.mark.slow(_fuzzed(_rog, rog_file(), LONG))


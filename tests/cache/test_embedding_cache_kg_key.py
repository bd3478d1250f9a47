"""KG embedding caches are keyed by KG fingerprint and encoder, not dataset name.

The demo KG exported to files (docs/your-own-kg.md) is the same KG under another dataset name, so it must
not be encoded again (95 s with MiniLM). Caches written in the older layout (``<root>/<dataset>/kg-<fp>/<encoder>``)
are read in place, never encoded again.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from stem_jax.config import StemConfig, apply_overrides
from stem_jax.data.files import load_files
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import get_encoder
from stem_jax.engine import open_embeddings
from stem_jax.kg.embeddings import cache_folder
from stem_jax.kg.index import build_index

REPO = Path(__file__).resolve().parents[2]
CONFIG = apply_overrides(StemConfig(), {"encoder.name": "hashing"})


def encoded(dataset, index, root: Path) -> tuple[Path, int]:
    """(folder of the triples table, rows encoded by this call)."""
    _, embeddings, rows = open_embeddings(CONFIG, dataset, index, root)
    return Path(embeddings.triples.path).parent, sum(row[3] for row in rows)


@pytest.fixture(scope="module")
def demo():
    dataset = load_dataset(DatasetSpec(name="demo"))
    return dataset, build_index(dataset.triples)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("export_metaqa_generic", REPO / "experiments" /
                                                  "export_metaqa_generic.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    folder = tmp_path_factory.mktemp("kg") / "demo-kg"
    export.export(None, folder, splits=("test",), dataset="demo")
    dataset = load_files(folder=folder)
    return dataset, build_index(dataset.triples)


def test_the_demo_exported_to_files_reuses_the_demos_cache(demo, exported, tmp_path):
    (dataset, index), (files, files_index) = demo, exported
    assert files.name == "files-demo-kg" and files_index.fingerprint == index.fingerprint
    first, rows = encoded(dataset, index, tmp_path)
    assert rows > 0 and first == tmp_path / f"kg-{index.fingerprint}" / "hashing-v1-dim384"
    again, rows = encoded(files, files_index, tmp_path)
    assert again == first and rows == 0  # nothing encoded: the same KG and encoder


def test_a_cache_in_the_former_dataset_layout_is_read_in_place(demo, exported, tmp_path):
    (dataset, index), (files, files_index) = demo, exported
    built, _ = encoded(dataset, index, tmp_path / "new")
    legacy = tmp_path / "old" / "demo" / built.parent.name / built.name  # where it lived before
    shutil.copytree(built, legacy)
    folder, rows = encoded(dataset, index, tmp_path / "old")
    assert folder == legacy and rows == 0
    folder, rows = encoded(files, files_index, tmp_path / "old")  # another dataset name, same strings
    assert folder == legacy and rows == 0
    assert not (tmp_path / "old" / built.parent.name).exists()  # nothing copied or encoded at the new key


def test_another_datasets_legacy_cache_with_other_strings_is_not_used(demo, tmp_path):
    dataset, index = demo
    encoder = get_encoder(CONFIG.encoder)
    built, _ = encoded(dataset, index, tmp_path / "new")
    legacy = tmp_path / "old" / "other" / built.parent.name / built.name
    shutil.copytree(built, legacy)
    names = {index.entities[0]: "A Renamed Entity"}  # same triples, another display name: other strings
    folder = cache_folder(tmp_path / "old", "demo", index, encoder, names=names)
    assert folder != legacy and folder.parent.name.startswith(f"kg-{index.fingerprint}-names-")
    assert cache_folder(tmp_path / "old", "demo", index, encoder) == legacy  # same strings: reused


def test_display_names_are_part_of_the_key(demo, tmp_path):
    dataset, index = demo
    encoder = get_encoder(CONFIG.encoder)
    plain = cache_folder(tmp_path, "demo", index, encoder)
    assert cache_folder(tmp_path, "demo", index, encoder, names={e: e for e in index.entities[:5]}) == plain
    renamed = cache_folder(tmp_path, "demo", index, encoder, names={index.entities[0]: "Other"})
    assert renamed != plain

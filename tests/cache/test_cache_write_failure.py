"""A cache that fills up or turns unwritable mid-build: one line (what, where, how to fix), work kept, resumable."""

import numpy as np

from stem_jax.cli.main import main
from stem_jax.zarr_table import ZarrTable


class _FullDisk:
    """A TensorStore array whose writes fail as a full disk's do (a ValueError carrying the status)."""

    def __init__(self, array):
        self.array = array

    def __getitem__(self, key):
        return self

    def write(self, value):
        raise ValueError('RESOURCE_EXHAUSTED: Error writing local file "/cache/c/1": No space left on device '
                         "[os_error_code='28']")


def test_a_full_disk_mid_index_is_one_line_and_resumes(tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    argv = ["index", "--dataset", "demo", "--encoder.name=hashing", "--encoder.chunk_rows=256", "--cache-dir", str(cache),
            "--no-progress"]
    original = ZarrTable.write_chunk
    written = []

    def fill_up(self, chunk, blocks, extra=b""):
        if len(written) >= 2:  # two chunks went down, then the disk is full
            self.arrays = {name: _FullDisk(a) for name, a in self.arrays.items()}
        original(self, chunk, blocks, extra)
        written.append(chunk)

    monkeypatch.setattr(ZarrTable, "write_chunk", fill_up)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RESOURCE_EXHAUSTED" in err and "cannot write chunk" in err
    assert "the 2 chunks written before it are kept" in err and "how to fix: free space" in err
    assert len(err.strip().splitlines()) == 2  # the error, then how to fix it

    monkeypatch.setattr(ZarrTable, "write_chunk", original)
    assert main(argv) == 0  # space freed: the same command finishes, reusing the written chunks
    capsys.readouterr()
    from stem_jax.config import EncoderConfig, StemConfig
    from stem_jax.engine import Engine

    resumed = Engine.open("demo", config=StemConfig(encoder=EncoderConfig(name="hashing", chunk_rows=256)),
                          cache_dir=cache, planner="oracle")
    fresh = Engine.open("demo", config=StemConfig(encoder=EncoderConfig(name="hashing", chunk_rows=256)),
                        cache_dir=tmp_path / "fresh", planner="oracle")
    for kind in ("entities", "relations", "triples"):
        assert np.array_equal(np.asarray(getattr(resumed.embeddings, kind).array),
                              np.asarray(getattr(fresh.embeddings, kind).array))

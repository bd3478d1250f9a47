from pathlib import Path

from stem_jax.eval.report import portable_paths


def test_portable_paths_names_no_machine_folder(monkeypatch, tmp_path: Path):
    data, cache, repo = tmp_path / "data", tmp_path / "cache", tmp_path / "repo"
    monkeypatch.setenv("STEM_DATA_DIR", str(data))
    monkeypatch.setenv("STEM_CACHE_DIR", str(cache))
    value = {"command": f"stem-jax eval --data-dir {data}/webqsp-r --out {repo}/runs/x",
             "lines": [f"embedding cache: {cache}/kg-1", 3]}
    assert portable_paths(value, repo) == {"command": "stem-jax eval --data-dir $STEM_DATA_DIR/webqsp-r --out runs/x",
                                           "lines": ["embedding cache: $STEM_CACHE_DIR/kg-1", 3]}

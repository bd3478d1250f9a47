import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """$STEM_DATA_DIR for real-data tests: skipped locally when unset, a failure in CI."""
    value = os.environ.get("STEM_DATA_DIR")
    if not value or not Path(value).is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"STEM_DATA_DIR is unset or missing ({value!r}); .ci/run must point it at ../shared/data")
        pytest.skip("STEM_DATA_DIR not set")
    return Path(value)

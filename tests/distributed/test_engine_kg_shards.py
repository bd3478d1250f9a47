"""`engine.kg_shards` cuts the KG over devices inside the engine and answers exactly as one copy does; asking for
more shards than devices is a clear error."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stem_jax.config import EncoderConfig, StemConfig, apply_overrides
from stem_jax.engine import Engine
from stem_jax.errors import StemError

ROOT = Path(__file__).resolve().parent.parent.parent

SCRIPT = textwrap.dedent("""
    import json, sys
    from stem_jax.config import EncoderConfig, StemConfig, apply_overrides
    from stem_jax.engine import Engine

    out = {}
    for shards in (1, 4):
        config = apply_overrides(StemConfig(encoder=EncoderConfig(name="hashing")), {"engine.kg_shards": shards})
        engine = Engine.open("demo", config=config, planner="oracle", cache_dir=sys.argv[1], limit=40)
        out[shards] = [(a.question.qid, a.answers, sorted(a.record["evidence"])) for a in
                       engine.retrieve(engine.dataset.questions)]
    print(json.dumps({"same": out[1] == out[4], "questions": len(out[1]),
                      "answered": sum(bool(answers) for _, answers, _ in out[1])}))
""")


@pytest.mark.slow
def test_a_kg_cut_over_four_devices_answers_as_one_copy(tmp_path):
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')}"
                                       f" --xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["same"] and result["questions"] > 0 and result["answered"] > 0


def test_more_shards_than_devices_is_a_clear_error(tmp_path):
    import jax

    n = len(jax.devices())
    config = apply_overrides(StemConfig(encoder=EncoderConfig(name="hashing")), {"engine.kg_shards": n + 1})
    engine = Engine.open("demo", config=config, planner="oracle", cache_dir=tmp_path, limit=5)
    with pytest.raises(StemError, match=rf"(?s)kg_shards={n + 1}: only {n} device.*device_count={n + 1}"):
        engine.retrieve(engine.dataset.questions[:1])

"""The CPU device count: one XLA device unless asked for more (a count, or auto: one per core), set before JAX starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stem_jax import devices
from stem_jax.cli.main import take_cpu_devices
from stem_jax.errors import StemError


def test_auto_and_counts_parse_and_bad_counts_are_refused_with_a_fix():
    assert devices.parse_cpu_devices(None) is None
    assert devices.parse_cpu_devices("auto") is None
    assert devices.parse_cpu_devices(" 3 ") == 3
    assert devices.parse_cpu_devices(1) == 1
    for bad in ("0", "-2", "many"):
        with pytest.raises(StemError, match="how to fix"):
            devices.parse_cpu_devices(bad, where="--cpu-devices")


def test_wanted_count_is_the_flag_then_the_env_then_one_device(monkeypatch):
    monkeypatch.delenv(devices.ENV, raising=False)
    assert devices.wanted_cpu_devices() == 1
    monkeypatch.setenv(devices.ENV, "auto")
    assert devices.wanted_cpu_devices() == devices.host_cores()
    monkeypatch.setenv(devices.ENV, "3")
    assert devices.wanted_cpu_devices() == 3
    assert devices.wanted_cpu_devices("4") == 4


def test_the_flag_is_taken_out_wherever_it_stands():
    assert take_cpu_devices(["--cpu-devices", "2", "eval", "--dataset", "demo"]) == (["eval", "--dataset", "demo"], "2")
    assert take_cpu_devices(["eval", "--cpu-devices=1"]) == (["eval"], "1")
    assert take_cpu_devices(["ask", "--", "--cpu-devices"]) == (["ask", "--", "--cpu-devices"], None)
    with pytest.raises(StemError, match="needs a value"):
        take_cpu_devices(["eval", "--cpu-devices"])


def test_nothing_changes_when_the_user_chose_or_the_platform_is_not_the_cpu(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=3")
    assert devices.configure_cpu_devices(2) is None
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    assert devices.configure_cpu_devices(2) is None
    monkeypatch.delenv("JAX_PLATFORMS")
    assert devices.configure_cpu_devices(1) is None  # one device: JAX's own default


def test_a_started_backend_is_left_as_it_is(monkeypatch):
    import jax

    jax.devices()  # the backend runs from here on: too late to change the count
    monkeypatch.setenv("XLA_FLAGS", "")
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert devices.configure_cpu_devices(2) is None


def test_a_fresh_process_gets_the_count_it_asks_for():
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS")}
    code = ("from stem_jax.devices import configure_cpu_devices; import jax; "
            "print(configure_cpu_devices(2), len(jax.local_devices()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "2"]

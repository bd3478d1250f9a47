"""The evaluation loop every retrieval method shares: chunks in, ``predictions.jsonl`` out, resumable.

Questions are retrieved in chunks of ``engine.chunk_questions``; each finished chunk is appended
to ``predictions.jsonl`` and flushed, so a killed run resumes after the last written question and,
because every metric is computed from what that file holds, ends with the same numbers as an
uninterrupted run. While one chunk is ranked and written, the next is anchored and traced on a background
thread (``overlap``, :mod:`stem_jax.eval.overlap`; the same records in the same order). The run scores the records it read at the start and those it appended, in the
file's order, rather than parsing the file it has just written again, and writes ``metrics.json`` and
``metrics.md`` (each atomically, replacing an earlier run's only once the new report is complete): every
caller, ``stem-jax eval``, :meth:`stem_jax.engine.Engine.evaluate` and a sweep's grid points, leaves the
same files in its run folder.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.eval.overlap import retrieve_overlapped
from stem_jax.eval.records import make_records
from stem_jax.eval.report import run_metadata, summary_table, write_report
from stem_jax.eval.run_folder import RunFolder, method_fingerprint, selection_of
from stem_jax.eval.scoring import (
    answered_precision,
    over_every_question,
    score_predictions,
    score_records,
    scored_fields,
)
from stem_jax.gc_pause import collector_paused
from stem_jax.progress import progress

DEFAULT_OVERLAP = 1  # chunks traced ahead of the one being ranked and written (0: none)

if TYPE_CHECKING:  # annotations only: methods build on eval, never the other way at run time
    from stem_jax.methods.base import RetrievalMethod


def evaluate_method(
    method: RetrievalMethod,
    questions: Sequence[Question],
    out_dir: Path,
    *,
    chunk_size: int,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    fingerprint: dict[str, Any] | None = None,
    overwrite: bool = False,
    selection: dict[str, Any] | None = None,
    report: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    overlap: int = DEFAULT_OVERLAP,
) -> dict[str, Any]:
    """Evaluate ``questions`` with ``method`` into ``out_dir`` (resumable), then score predictions.jsonl.

    ``out_dir`` is a locked :class:`~stem_jax.eval.run_folder.RunFolder` for ``fingerprint`` (default:
    the method's own settings): a folder holding another run's results is refused unless ``overwrite``.
    ``selection`` (default: ``questions`` themselves) records what the questions are a share of
    (:func:`~stem_jax.eval.run_folder.selection_of` the split, for a shard of a multi-process eval).
    ``report(summary)`` gives the fields ``metrics.json`` holds besides the run's metadata (default: the
    summary itself); ``metrics.md`` is the summary's table. ``overlap``: chunks traced ahead on a background
    thread while the previous one is ranked and written (0: one chunk after the other; the records are the
    same, in the same order)."""
    if not questions:
        raise StemError("no questions to evaluate: the selection is empty\n"
                        "  how to fix: check --hops, --limit, --split and the question file")
    fingerprint = method_fingerprint(method) if fingerprint is None else fingerprint
    selection = selection_of(questions) if selection is None else selection
    with RunFolder.open(Path(out_dir), fingerprint, overwrite=overwrite, questions=questions, selection=selection,
                        log=log) as run:
        summary = _evaluate_into(method, questions, run, chunk_size=chunk_size, show_progress=show_progress, log=log,
                                 overlap=overlap)
        write_metrics(run.path, summary if report is None else report(summary))
        return summary


def write_metrics(folder: Path, payload: dict[str, Any]) -> tuple[Path, Path]:
    """``folder/metrics.json`` (the run's metadata and ``payload``, a scored summary and what the caller adds)
    and ``metrics.md`` (its per-hop table), each written atomically."""
    return write_report(Path(folder), "metrics", {"meta": run_metadata(), **payload}, summary_table(payload))


@contextlib.contextmanager
def settled_heap() -> Iterator[Callable[[], None]]:
    """Keep the cyclic garbage collector off the objects an eval has settled: call the yielded function
    after each stage (engine open, planning, every chunk) to move everything alive into the collector's
    permanent generation (``gc.freeze``), so its full collections stop walking the whole split's
    questions, plans and records again and again (a large share of a whole-split eval's CPU time went to
    them). Objects are still freed as soon as nothing refers to them; only reference cycles among
    settled objects wait, until the heap is unfrozen on the way out (unless the process had frozen
    objects of its own before: those are left as they were)."""
    owner = gc.get_freeze_count() == 0
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        if owner:
            gc.unfreeze()


class RunWriter:
    """One run folder's side of the eval loop: each finished chunk's retrievals become records appended to
    ``predictions.jsonl`` (flushed and fsynced), and :meth:`summary` scores what the file then holds. The
    eval loop writes through one; a sweep through one per grid point, so a point's folder is an eval's."""

    def __init__(self, method: RetrievalMethod, questions: Sequence[Question], run: Any,
                 log: Callable[[str], None]) -> None:
        self.method = method
        self.run = run
        self.finished = run.finished()
        self.wanted = {q.qid for q in questions}
        self.todo = [q for q in questions if q.qid not in self.finished]
        if self.finished:
            log(f"resuming: {len(self.wanted & set(self.finished))} of {len(questions)} questions already in "
                f"{run.predictions}")
        self.scored = {qid: scored_fields(record) for qid, record in self.finished.items()}
        self.repeated = False
        self.stage_totals: dict[str, float] = defaultdict(float)

    def add(self, chunk: Sequence[Question], retrievals: Sequence[Any]) -> None:
        """Append the records of ``chunk``'s retrievals."""
        method = self.method
        with collector_paused():
            records = make_records(method.context, chunk, retrievals, method.name)
            for record in records:
                for stage, ms in record.get("ms", {}).items():
                    self.stage_totals[stage] += ms
            self.run.append(records)  # flushed and fsynced; refuses NaN/inf
            for record in records:  # what the file now holds, in its order, without re-reading it
                self.repeated = self.repeated or record["id"] in self.scored
                self.scored.setdefault(record["id"], scored_fields(record))

    def summary(self, prepared: dict[str, Any], prepare_seconds: float) -> dict[str, Any]:
        """The scored run: the metrics of every wanted question's record, and what the method reports."""
        method, scored, wanted = self.method, self.scored, self.wanted
        # a repeated question id (two lines for one id) is what reading the file back cleans up: read it then
        summary = (score_predictions(self.run.predictions, wanted) if self.repeated
                   else score_records(scored.values(), wanted))
        summary.update({k: v for k, v in prepared.items() if v is not None})
        context = method.context  # what make_records read
        if method.name == "stem":
            threshold = context.config.engine.confident_at
            (row,) = answered_precision(scored.values(), [threshold])
            summary["confident"] = {"threshold": threshold, "answered_share": row["answered"],
                                    "answered_hit_at_1": row["precision"] if row["answered"] else None}
        # over the whole split only: a shard or a --limit selection is a part of it, and the dropped are not its part
        if wanted == {q.qid for q in context.dataset.questions}:
            summary["all_questions"] = over_every_question(summary, context.dataset.dropped)
        summary["method"] = method.name
        effective = getattr(method, "effective", None)
        if callable(effective):  # the settings the records were traced with (preset-resolved, calibrated θ)
            summary["effective"] = effective()
        summary["prepare_seconds"] = prepare_seconds
        summary["stage_ms_total_this_run"] = dict(self.stage_totals)
        return summary


def _evaluate_into(method: RetrievalMethod, questions: Sequence[Question], run: Any, *, chunk_size: int,
                   show_progress: bool, log: Callable[[str], None], overlap: int) -> dict[str, Any]:
    writer = RunWriter(method, questions, run, log)
    todo = writer.todo
    with settled_heap() as settle:
        began = time.perf_counter()
        prepared = method.prepare(questions, show_progress=show_progress) or {}
        prepare_seconds = time.perf_counter() - began
        settle()
        with progress(len(questions), f"eval {method.name}", "q", enabled=show_progress,
                      initial=len(questions) - len(todo)) as bar:
            chunks = [todo[start : start + chunk_size] for start in range(0, len(todo), chunk_size)]
            # one chunk has nothing to overlap with: no thread
            ahead = overlap if len(chunks) > 1 else 0
            with contextlib.closing(retrieved(method, chunks, ahead)) as pairs:
                for chunk, retrievals in pairs:
                    writer.add(chunk, retrievals)
                    bar.update(len(chunk))
                    settle()
        return writer.summary(prepared, prepare_seconds)


def retrieved(method: RetrievalMethod, chunks: Sequence[Sequence[Question]], overlap: int,
              ) -> Iterator[tuple[Sequence[Question], list[Any]]]:
    """``(chunk, method.retrieve(chunk))`` per chunk in order; with ``overlap`` >= 1 (and a method that splits
    its retrieval, STEM) up to that many chunks are traced ahead on a background thread while the caller
    ranks and writes the one before (:mod:`stem_jax.eval.overlap`): the same records either way."""
    if overlap >= 1:
        return retrieve_overlapped(method, chunks, depth=overlap)
    return ((chunk, method.retrieve(chunk)) for chunk in chunks)

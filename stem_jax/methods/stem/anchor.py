"""STEM's second stage: each run's anchor entity at each hyper-parameter point (eqs. 8-11, 15).

:func:`anchor` takes runs and the points' λ and returns :class:`~stem_jax.methods.stem.types.Anchored`. A run
whose topic KG id the question names is anchored on the host (:func:`exact_anchors`); the rest go through
:func:`~stem_jax.trace.tracer.anchor_batch` on device (its plain reference:
:func:`stem_jax.trace.reference.anchor_reference`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.errors import StemError
from stem_jax.methods.stem.resources import StemResources
from stem_jax.methods.stem.types import Anchored, Run, StemHyper
from stem_jax.ragged import pad_ragged
from stem_jax.trace.tracer import EXACT


def guidance_rows(res: StemResources, runs: Sequence[Run]) -> np.ndarray:
    """int32 [len(runs), G]: each run's guidance entity ids, -1 padded (G: ``engine.guidance``)."""
    width = res.shapes[True].guidance
    rows = np.full((len(runs), width), -1, np.int32)
    for i, run in enumerate(runs):
        if run.guidance is None:
            continue
        if len(run.guidance) > width:
            raise StemError(f"a run has {len(run.guidance)} guidance entities but engine.guidance={width}\n"
                            f"  how to fix: pass --engine.guidance={1 << (len(run.guidance) - 1).bit_length()}")
        rows[i, : len(run.guidance)] = run.guidance
    return rows


def anchor(res: StemResources, runs: Sequence[Run], hypers: Sequence[StemHyper],
           guidance: np.ndarray | None = None) -> Anchored:
    """Anchor ``runs`` at each point of ``hypers`` (its λ).

    ``guidance``: int32 [P, R, G], each point's guidance rows (a sweep's K' values); default the runs' own
    (:func:`guidance_rows`) for every point."""
    hypers = tuple(hypers)
    if guidance is None:
        own = guidance_rows(res, runs)
        guidance = np.broadcast_to(own, (len(hypers), *own.shape))
    entity = np.zeros((len(hypers), len(runs)), np.int32)
    score = np.zeros((len(hypers), len(runs)), np.float32)
    seconds = 0.0
    if runs:
        for p, hyper in enumerate(hypers):
            began = time.perf_counter()
            entity[p], score[p] = anchor_point(res, runs, guidance[p], hyper.lam)
            seconds += time.perf_counter() - began
    return Anchored(runs, hypers, guidance, entity, score, seconds)


def anchor_point(res: StemResources, runs: Sequence[Run], rows: np.ndarray, lam: float,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(int32 [R] anchors, float32 [R] scores) of ``runs`` at λ=``lam`` with guidance ``rows`` [R, G]; named topic
    entities first (see :func:`~stem_jax.trace.tracer.anchor_batch`)."""
    anchors = np.zeros(len(runs), np.int32)
    scores = np.zeros(len(runs), np.float32)
    # A run whose topic id the question names is anchored there whatever the cosine top-N holds
    # (anchor_batch: the highest level present wins, and top-N entries have the lowest), so it
    # needs no pass over the entity table; only the rest go to the device.
    found, exact, boosted = exact_anchors(res, runs, rows, lam)
    anchors[found], scores[found] = exact[found], boosted[found]
    rest = np.flatnonzero(~found).tolist()
    if rest:
        anchor_on_device(res, [runs[i] for i in rest], rows[rest], anchors, scores, np.asarray(rest), lam)
    return anchors, scores


def exact_anchor(res: StemResources, run: Run, guidance_row: np.ndarray, lam: float,
                 ) -> tuple[int, np.float32] | None:
    """(anchor, score) of a run that names its topic's KG id (level ``EXACT``), else None.

    The host form of :func:`~stem_jax.trace.tracer.anchor_batch` for that case: among the
    EXACT candidates (cosine 1), the first with the largest λ-boosted score; entries of lower
    levels (folded twins, the cosine top-N) cannot win, so the result is the same bit for bit."""
    named = run.named[: res.NAMED_WIDTH]
    exact = [entity for entity, level in named if level == EXACT and entity >= 0]
    if not exact:
        return None
    lam32 = np.float32(lam)
    guided = set(guidance_row[guidance_row >= 0].tolist())
    boosted = [np.float32(1.0) * (lam32 if entity in guided else np.float32(1.0)) for entity in exact]
    best = int(np.argmax(boosted))
    return exact[best], boosted[best]


def named_rows(res: StemResources, runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
    """int32 [len(runs), NAMED_WIDTH] each: the runs' named anchor candidates (KG ids, -1 padded) and their
    levels (0 padded), as :func:`anchor_inputs` lays them out."""
    width = res.NAMED_WIDTH
    pairs, live = pad_ragged([run.named[:width] for run in runs], -1, np.int64, width=width, tail=(2,))
    return pairs[..., 0].astype(np.int32), np.where(live, pairs[..., 1], 0).astype(np.int32)


def exact_anchors(res: StemResources, runs: Sequence[Run], guidance_rows: np.ndarray, lam: float,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exact_anchor` of every run at once: (bool [R] whether the run has one, int32 [R] anchor,
    float32 [R] score; anchor and score meaningful where it has one)."""
    named, level = named_rows(res, runs)
    candidate = (level == EXACT) & (named >= 0)
    lam32 = np.float32(lam)
    guided = np.zeros(named.shape, bool)
    if guidance_rows.size and (guidance_rows >= 0).any():
        live = np.where(guidance_rows >= 0, guidance_rows, -2)  # -2 matches no candidate (padding is -1)
        guided = (named[:, :, None] == live[:, None, :]).any(-1)
    boosted = np.float32(1.0) * np.where(guided, lam32, np.float32(1.0)).astype(np.float32)
    # np.argmax over the candidates alone is the first largest of them: the others sit below every score
    best = np.argmax(np.where(candidate, boosted, -np.inf), axis=1)
    rows = np.arange(len(runs))
    return candidate.any(1), named[rows, best], boosted[rows, best]


def mention_rows(res: StemResources, runs: Sequence[Run]) -> dict[str, np.ndarray]:
    """Encoder embeddings of the mentions of runs whose topic is known only by name (eq. 8)."""
    unknown = sorted({r.mention for r in runs if r.anchor_entity < 0})
    if not unknown:
        return {}
    return dict(zip(unknown, np.asarray(res.encoder.encode(unknown), dtype=np.float32), strict=True))


def anchor_inputs(res: StemResources, part: Sequence[Run], size: int, mentions_by_name: dict[str, np.ndarray],
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Padded anchoring inputs of ``part``: mention vectors [size, d], named ids and levels [size, W]."""
    ids = np.zeros(size, np.int64)
    ids[: len(part)] = [max(r.anchor_entity, 0) for r in part]
    mentions = np.array(res.entity_emb[jnp.asarray(ids)], dtype=np.float32)  # writable copy
    named = np.full((size, res.NAMED_WIDTH), -1, np.int32)
    level = np.zeros((size, res.NAMED_WIDTH), np.int32)
    named[: len(part)], level[: len(part)] = named_rows(res, part)
    for row, run in enumerate(part):
        if run.anchor_entity < 0:
            mentions[row] = mentions_by_name[run.mention]
    return mentions, named, level


def anchor_on_device(res: StemResources, runs: Sequence[Run], rows: np.ndarray, anchors: np.ndarray,
                      scores: np.ndarray, where: np.ndarray, lam: float) -> None:
    """:func:`~stem_jax.trace.tracer.anchor_batch` over ``runs`` in padded batches; results are
    written to ``anchors[where]`` / ``scores[where]``."""
    size = res.batch_size(res.batch[True], len(runs))
    guidance_width = rows.shape[1]
    by_name = mention_rows(res, runs)
    for start in range(0, len(runs), size):
        part = runs[start : start + size]
        mentions, named, level = anchor_inputs(res, part, size, by_name)
        guidance = np.full((size, guidance_width), -1, np.int32)
        guidance[: len(part)] = rows[start : start + len(part)]
        a, s = jax.device_get(res.sharding.anchor(res.entity_emb, jnp.asarray(mentions), guidance,
                                                  jnp.float32(lam), jnp.asarray(named),
                                                  jnp.asarray(level), top_n=res.config.tracer.top_n))
        anchors[where[start : start + len(part)]] = a[: len(part)]
        scores[where[start : start + len(part)]] = s[: len(part)]

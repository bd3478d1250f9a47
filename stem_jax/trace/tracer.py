"""JAX tracer: the reference's level-synchronous search as padded frontier expansion in one jit.

A batch of runs (question x plan x anchor) is traced together, one schema step at a time
(``lax.scan``). At a step, every run's frontier (at most ``frontier`` bindings of the step's
parent slot) is flattened into B·F (run, node) pairs, and all their incident triples are laid
end to end: a global edge list whose length is the sum of the frontier degrees
(:mod:`kernels.csr`), so the work follows the real number of incident triples: a hub with
thousands of triples costs more edges for the batch, instead of padding every node, or every
run, to the largest degree. Each edge is scored (eq. 12-13: cosine to the schema triple
(:mod:`kernels.rows`) + τ if both endpoints are guidance entities), masked by the run's used
triples and

* Precision: folded into a per-pair argmax of S + T (segment max, earliest edge on ties,
  strictly above -1 as Algorithm 2 starts from ``max_score = -1``);
* Breadth: kept when T >= θ (or, with the relation bonus, when the relation matches), cut to
  each pair's best ``node_matches`` (:mod:`kernels.candidates`).

How the edge list is read is the backend's (``backend``, :func:`resolve_backend`):
:mod:`kernels.blocks` reads it in small blocks of ``window`` edges with a candidate buffer that is
compacted whenever it fills (CPUs), :mod:`kernels.flat` in one wide block per step selected by one
sort (accelerators). Both return the same bindings, scores and overflow.

The step's candidates are then ranked per run by cumulative score (ties: parent position, then
rank within the parent, exactly as the reference orders them) and the best ``frontier`` become
the child slot's bindings. Whatever a capacity drops is counted in ``overflow``. Shapes depend
only on (strategy, steps bucket, batch size), so a whole split compiles a handful of times.

Used triples (CONTRADICT, level order): a run's used triples are exactly the triples that bound
its earlier slots, i.e. its ``via`` rows, at most F per step. Each step sorts them per run
(int32 [B, S·F], padded with int32 max) and tests an edge by binary search in its run's row, so
the structure is bounded by the static shapes (it cannot overflow) and neither memory nor time
depends on the KG's size m: no [B x m] bitmap is zeroed or scattered per call. That is the
``used="run"`` rule (Algorithm 2). ``used="branch"`` bars only the triples on each binding's own
path from the anchor: one sorted row per (run, frontier position) pair, gathered up the ``parents``
links (at most S per pair); ``used="step"`` bars nothing.

``direction="directed"`` keeps only edges whose KG triple has the frontier node at the step's own
end (``TraceBatch.forward``: the head when the step leaves its schema triple's head, else the
tail), and binds the other end by that orientation (a self-loop leads back to its node).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from kernels.blocks import breadth_blocks, precision_blocks
from kernels.candidates import Edges, EdgeScorer, Ranked, compact
from kernels.csr import frontier_edge_offsets, gather_edges
from kernels.flat import breadth_flat, flat_width, precision_flat
from kernels.membership import BIG, row_contains, sorted_rows
from kernels.rows import gathered_dots, project_queries
from kernels.select import NEG_INF

BACKENDS = ("auto", "blocks", "flat")


@dataclasses.dataclass(frozen=True)
class TracerShapes:
    """Static capacities of one compiled tracer."""

    frontier: int = 64  # bindings kept per schema node (F)
    node_matches: int = 16  # Breadth matches kept per frontier node and step (K)
    window: int = 2048  # incident edges scored per block
    guidance: int = 64  # guidance entities per run (G), padded with -1
    flat_edges: int = 0  # edges per block of the flat backend; 0: kernels.flat.flat_width of the batch's pairs


class KGArrays(NamedTuple):
    """The KG as device arrays (one copy shared by every batch).

    ``triple_emb`` holds the triple rows as stored (:mod:`stem_jax.encoder.compact`): float16 [m, d], or the
    codes [m, k] of a compact row format, with ``triple_scale`` (int8 formats) and ``row_basis`` /
    ``row_mean`` (projected formats) from which :mod:`kernels.rows` computes each cosine."""

    csr_offsets: jax.Array  # int32 [n + 1]
    csr_triples: jax.Array  # int32 [2m]
    triples: jax.Array  # int32 [m, 3]
    triple_emb: jax.Array  # float16/float32 [m, d], or int8/float16 codes [m, k] of a compact format
    degree: jax.Array  # int32 [n]
    triple_scale: jax.Array | None = None  # float32 [m]: int8 codes' per-row scale
    row_basis: jax.Array | None = None  # float32 [d, k]: the projection of a pca format
    row_mean: jax.Array | None = None  # float32 [d]

    @property
    def query_dim(self) -> int:
        """d: the dimension of the schema-step embeddings the tracer takes (the encoder's)."""
        if self.row_basis is not None:
            return int(self.row_basis.shape[0])
        return int(self.triple_emb.shape[-1])

    @classmethod
    def from_index(cls, index, triple_emb) -> KGArrays:
        """``triple_emb``: the float16 (or float32) rows [m, d], or a :class:`~stem_jax.encoder.compact.CompactRows`."""
        offsets = np.asarray(index.csr_offsets)
        if offsets[-1] >= np.iinfo(np.int32).max:
            raise ValueError("KG too large for int32 CSR offsets")
        # Padding the incidence list to 2m keeps its shape a function of m alone (self-loops
        # shorten it), so KGs of equal size share compiled tracers.
        incidence = np.zeros(2 * index.num_triples, np.int32)
        incidence[: len(index.csr_triples)] = index.csr_triples
        compact = hasattr(triple_emb, "codes")
        rows = triple_emb.codes if compact else triple_emb

        def put(a):
            return None if a is None else jax.device_put(np.asarray(a), may_alias=True)

        # On the CPU backend device_put may use a suitably aligned host buffer in place: the triple table (the
        # largest array, 1.16 GiB at 10M triples x 64 float16) is then held once, not twice (jnp.asarray copies,
        # and peaked at twice the table's size on top of it). The KG arrays are never written after this.
        return cls(
            csr_offsets=jax.device_put(offsets.astype(np.int32), may_alias=True),
            csr_triples=jax.device_put(incidence, may_alias=True),
            triples=jax.device_put(np.asarray(index.triples, dtype=np.int32), may_alias=True),
            triple_emb=jax.device_put(np.asarray(rows), may_alias=True),
            degree=jax.device_put(np.diff(offsets).astype(np.int32), may_alias=True),
            triple_scale=put(triple_emb.scale) if compact else None,
            row_basis=put(triple_emb.basis) if compact else None,
            row_mean=put(triple_emb.mean) if compact else None,
        )


class TraceBatch(NamedTuple):
    """One padded batch of runs."""

    steps: jax.Array  # int32 [B, S, 3]: parent slot, child slot, relation id (-1: not in KG)
    step_mask: jax.Array  # bool [B, S]
    step_emb: jax.Array  # float32 [B, S, d]
    anchor: jax.Array  # int32 [B] (-1: padding run)
    anchor_score: jax.Array  # float32 [B]
    guidance: jax.Array  # int32 [B, G] guidance entity ids, -1 padded
    forward: jax.Array | None = None  # bool [B, S]: the step walks its relation head -> tail (direction="directed")


class Hyper(NamedTuple):
    """Traced hyper-parameters, so a grid over them can be vmapped without recompiling."""

    tau: jax.Array
    theta: jax.Array


class TraceOutput(NamedTuple):
    nodes: jax.Array  # int32 [B, S+1, F], -1 where empty
    scores: jax.Array  # float32 [B, S+1, F]
    via: jax.Array  # int32 [B, S+1, F] triple that bound the node, -1 for anchor/empty
    parents: jax.Array  # int32 [B, S+1, F] index into the parent slot, -1 for anchor/empty
    overflow: jax.Array  # int32 [B]
    # int32 [B, 2]: the capacities the run needs, (matches of one node in a step, matches of the run in a
    # step), largest over its steps up to the first that overflowed (see :func:`fitting_levels`)
    need: jax.Array


def _in_guidance(entities: jax.Array, guidance: jax.Array) -> jax.Array:
    return jnp.any((entities[..., None] == guidance) & (guidance >= 0), axis=-1)


def sorted_used(via: jax.Array) -> jax.Array:
    """Each run's used triples, sorted: int32 [B, C >= S·F] from ``via`` [B, S+1, F] (slot 0 binds no triple).

    A triple bound twice in a step is listed twice."""
    return sorted_rows(via[:, 1:].reshape(via.shape[0], -1))


class UsedMasks(NamedTuple):
    """What bars an edge: used-triple rows (sorted, one per run or per pair), whether any is non-empty, each
    pair's row, and per run the step's orientation (None: undirected)."""

    rows: jax.Array
    any_used: jax.Array
    row_of_pair: jax.Array
    forward: jax.Array | None


def compact_buffer(buffer, count, pair_base, frontier, k, n_runs) -> tuple[tuple, jax.Array, Ranked, tuple]:
    """:func:`kernels.candidates.compact` of a buffer whose ``count`` live entries are packed at its front."""
    return compact(buffer, jnp.arange(buffer[0].shape[0]) < count, pair_base, frontier, k, n_runs)


def precision_candidates(kg, hyper, relation_bonus, cum, pair_nodes, pair_base, runs_of_pair, used, queries, relation,
                          guidance, window, frontier) -> tuple[Ranked, jax.Array]:
    """The ``blocks`` backend's Precision pass over the step's edge list (what the sharded tracer runs per shard)."""
    score = edge_scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, used, queries, relation, guidance)
    return precision_blocks(score, cum[-1], window, pair_base, frontier)


def breadth_candidates(kg, hyper, relation_bonus, cum, pair_nodes, pair_base, runs_of_pair, used, queries, relation,
                        guidance, window, frontier, node_matches, tau_admits=True) -> tuple[Ranked, jax.Array]:
    """The ``blocks`` backend's Breadth pass over the step's edge list (what the sharded tracer runs per shard)."""
    score = edge_scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, used, queries, relation, guidance)
    return breadth_blocks(score, cum[-1], window, pair_base, frontier, node_matches, hyper.theta, relation_bonus,
                          tau_admits)


def edge_scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, used, queries, relation, guidance
                 ) -> EdgeScorer:
    """``score(start, width)``: edges [start, start + width) of the step's global edge list, scored (eq. 12-13)."""

    def score(start, width):
        pair, node, triple, valid = gather_edges(kg.csr_offsets, kg.csr_triples, cum, pair_nodes, start, width)
        run = runs_of_pair[pair]
        valid &= ~jax.lax.cond(used.any_used, lambda: row_contains(used.rows, used.row_of_pair[pair], triple),
                               lambda: jnp.zeros(width, bool))
        ends = kg.triples[triple]
        if used.forward is not None:  # directed: the frontier node must be the step's own end of the triple
            valid &= jnp.where(used.forward[run], ends[:, 0], ends[:, 2]) == node
        projected, bias = queries
        dots = gathered_dots(kg.triple_emb, kg.triple_scale, triple, projected[run], None if bias is None else bias[run])
        guidance_rows, any_guidance = guidance
        in_guidance = jax.lax.cond(
            any_guidance,
            lambda: row_contains(guidance_rows, run, ends[:, 0]) & row_contains(guidance_rows, run, ends[:, 2]),
            lambda: jnp.zeros(width, bool))
        guided = jnp.where(in_guidance, hyper.tau, 0.0)
        t_score = dots + guided
        same_relation = (ends[:, 1] == relation[run]) & (relation[run] >= 0)
        if relation_bonus:
            t_score = t_score + jnp.where(same_relation, 1.0, 0.0)
        return Edges(pair, run, triple, t_score, same_relation, valid, guided)

    return score


def _branch_rows(batch: TraceBatch, via: jax.Array, parents: jax.Array, parent_slot: jax.Array) -> jax.Array:
    """int32 [B·F, S]: per (run, frontier position) pair of the step's parent slot, the triples on that
    binding's path from the anchor (-1 padded), following ``parents`` up the schema's slots."""
    n_runs, n_steps = batch.steps.shape[:2]
    f = via.shape[2]
    runs = jnp.arange(n_runs)[:, None]
    child = jnp.where(batch.step_mask, batch.steps[:, :, 1], n_steps + 1)
    slot_parent = jnp.full((n_runs, n_steps + 1), -1, jnp.int32).at[runs, child].set(batch.steps[:, :, 0], mode="drop")
    slot = jnp.broadcast_to(parent_slot[:, None], (n_runs, f))
    index = jnp.broadcast_to(jnp.arange(f, dtype=jnp.int32)[None], (n_runs, f))
    found = []
    for _ in range(n_steps):  # a path has at most S triples
        inside = slot > 0
        at = jnp.maximum(slot, 0)
        found.append(jnp.where(inside, via[runs, at, index], -1))
        up = parents[runs, at, index]
        slot = jnp.where(inside, slot_parent[runs, at], 0)
        index = jnp.where(inside, jnp.clip(up, 0, f - 1), 0)
    return jnp.stack(found, axis=-1).reshape(n_runs * f, n_steps)


@functools.partial(jax.jit, static_argnames=("shapes", "precision", "relation_bonus", "tau_admits", "direction", "used",
                                             "halt_overflowed", "backend"))
def trace_batch(kg: KGArrays, batch: TraceBatch, hyper: Hyper, *, shapes: TracerShapes, precision: bool,
                relation_bonus: bool = False, tau_admits: bool = True, direction: str = "undirected",
                used: str = "run", halt_overflowed: bool = False, backend: str = "auto") -> TraceOutput:
    """Trace a padded batch of runs that share one strategy; see the module docstring.

    ``tau_admits=False``: Breadth's θ test reads the T-Score without the guidance bonus τ (τ still
    ranks), so the guidance graph cannot admit triples of other relations on its own.
    ``direction`` (undirected | directed, which reads ``batch.forward``) and ``used`` (run | branch | step)
    are the KG conventions of :class:`~stem_jax.trace.types.TraceOptions`.

    ``halt_overflowed=True``: a run stops expanding after the first step at which a capacity dropped a
    match. Its ``overflow`` (> 0) and ``need`` are what the full trace returns, but its later slots stay
    empty, so this is only for callers that discard such a run's bindings and trace it again with larger
    capacities (the capacity ladder below its top level); its later steps would be wasted work there.

    ``backend`` (auto | blocks | flat, see :func:`resolve_backend`) picks how a step reads and selects its
    edges (:mod:`kernels.blocks` or :mod:`kernels.flat`); the output is the same with either."""
    backend = resolve_backend(backend)
    if direction not in ("undirected", "directed") or used not in ("run", "branch", "step"):
        raise ValueError(f"unknown direction {direction!r} or used-triple rule {used!r}")
    if direction == "directed" and batch.forward is None:
        raise ValueError("direction='directed' needs TraceBatch.forward (each step's orientation)")
    # schema-step queries in the stored rows' space, once per batch: [B, S, k] (+ a bias [B, S] per query)
    step_proj, step_bias = project_queries(batch.step_emb, kg.row_basis, kg.row_mean)
    f = shapes.frontier

    def candidates(pair_nodes, pair_base, runs_of_pair, masks, queries, relation, guidance):
        cum = frontier_edge_offsets(kg.degree, pair_nodes)
        score = edge_scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, masks, queries, relation,
                             guidance)
        if backend == "flat":
            width = shapes.flat_edges or flat_width(pair_nodes.shape[0], shapes.window)
            if precision:
                return precision_flat(score, cum[-1], width, pair_base, f)
            return breadth_flat(score, cum[-1], width, pair_base, f, shapes.node_matches, hyper.theta,
                                relation_bonus, tau_admits)
        if precision:
            return precision_blocks(score, cum[-1], shapes.window, pair_base, f)
        return breadth_blocks(score, cum[-1], shapes.window, pair_base, f, shapes.node_matches, hyper.theta,
                              relation_bonus, tau_admits)

    return trace_steps(batch, step_proj, step_bias, shapes=shapes, precision=precision, direction=direction,
                       used=used, halt_overflowed=halt_overflowed, candidates=candidates,
                       triple_ends=lambda triple: kg.triples[jnp.maximum(triple, 0)])


def trace_steps(batch: TraceBatch, step_proj: jax.Array, step_bias: jax.Array | None, *, shapes: TracerShapes,
                precision: bool, direction: str, used: str, halt_overflowed: bool,
                candidates: Callable[..., tuple[Any, jax.Array]], triple_ends: Callable[[jax.Array], jax.Array],
                shift_rows: Callable[[jax.Array], jax.Array] | None = None) -> TraceOutput:
    """The step loop of :func:`trace_batch`, for any source of a step's candidates: one device's KG, or a KG
    sharded over devices (:mod:`stem_jax.shard`, which merges its shards' candidates with collectives).

    ``candidates(pair_nodes, pair_base, runs_of_pair, masks, queries, relation, guidance)`` gives a step's
    ranked candidates and per-pair match counts; ``triple_ends(triple)`` the (head, relation, tail) of triple ids
    (-1 where a candidate is not kept: any row); ``shift_rows`` maps used-triple rows (global ids) to the ids
    ``candidates`` compares them with (a shard's local ids)."""
    n_runs, n_steps = batch.steps.shape[:2]
    f = shapes.frontier
    k = 1 if precision else shapes.node_matches
    runs = jnp.arange(n_runs)
    runs_of_pair = jnp.repeat(runs, f).astype(jnp.int32)
    shift = shift_rows or (lambda rows: rows)

    nodes = jnp.full((n_runs, n_steps + 1, f), -1, jnp.int32).at[:, 0, 0].set(batch.anchor)
    scores = jnp.full((n_runs, n_steps + 1, f), NEG_INF, jnp.float32)
    scores = scores.at[:, 0, 0].set(jnp.where(batch.anchor >= 0, batch.anchor_score, NEG_INF))
    via = jnp.full((n_runs, n_steps + 1, f), -1, jnp.int32)
    parents = jnp.full((n_runs, n_steps + 1, f), -1, jnp.int32)
    # guidance entities as sorted rows (membership by binary search); a batch without any skips the test
    guidance = (sorted_rows(batch.guidance), jnp.any(batch.guidance >= 0))

    def step_fn(carry, s):
        # A step no run of the batch can expand (padding steps of a shorter plan, or every frontier
        # empty) would write nothing and count no overflow; skipping it saves its fixed sorts. The state is
        # the same on every device of a sharded KG, so all take the same branch and their collectives match.
        step = batch.steps[:, s]
        parent_slot = jnp.clip(step[:, 0], 0, n_steps)
        live = batch.step_mask[:, s] & (carry[0][runs, parent_slot] >= 0).any(axis=-1)
        if halt_overflowed:
            live &= carry[4] == 0
        return jax.lax.cond(live.any(), expand, lambda c, _s: c, carry, s), None

    def expand(carry, s):
        nodes, scores, via, parents, overflow, need = carry
        step = batch.steps[:, s]
        active = batch.step_mask[:, s] & (overflow == 0) if halt_overflowed else batch.step_mask[:, s]
        parent_slot = jnp.clip(step[:, 0], 0, n_steps)
        forward = batch.forward[:, s] if direction == "directed" else None
        if used == "run":  # triples kept at earlier steps (level order), one row per run
            masks = UsedMasks(shift(sorted_used(via)), jnp.any(via[:, 1:] >= 0), runs_of_pair, forward)
        elif used == "branch":  # the triples on each binding's own path, one row per pair
            rows = sorted_rows(_branch_rows(batch, via, parents, parent_slot))
            masks = UsedMasks(shift(rows), jnp.any(rows < BIG), jnp.arange(n_runs * f, dtype=jnp.int32), forward)
        else:
            masks = UsedMasks(jnp.full((1, 1), BIG, jnp.int32), jnp.bool_(False), jnp.zeros(n_runs * f, jnp.int32),
                           forward)
        pair_nodes = jnp.where(active[:, None], nodes[runs, parent_slot], -1).reshape(-1)
        pair_base = scores[runs, parent_slot].reshape(-1)
        queries = (step_proj[:, s], None if step_bias is None else step_bias[:, s])
        ranked, qualified = candidates(pair_nodes, pair_base, runs_of_pair, masks, queries, step[:, 2], guidance)
        run, pair, triple, total, rank, keep = (ranked.run, ranked.pair, ranked.triple, ranked.total, ranked.run_rank,
                                                ranked.keep)
        ends = triple_ends(jnp.where(keep, triple, -1))
        from_node = pair_nodes[pair]
        if direction == "directed":
            child_node = jnp.where(forward[jnp.clip(run, 0, n_runs - 1)], ends[:, 2], ends[:, 0])
        else:
            child_node = jnp.where(ends[:, 0] == from_node, ends[:, 2], ends[:, 0])
        target_run = jnp.where(keep, run, n_runs)  # out of range: dropped by the scatters
        child_slot = step[jnp.clip(run, 0, n_runs - 1), 1]
        rank = jnp.clip(rank, 0, f - 1)
        nodes = nodes.at[target_run, child_slot, rank].set(child_node, mode="drop")
        scores = scores.at[target_run, child_slot, rank].set(total, mode="drop")
        via = via.at[target_run, child_slot, rank].set(triple, mode="drop")
        parents = parents.at[target_run, child_slot, rank].set((pair % f).astype(jnp.int32), mode="drop")
        # What the caps dropped, from counts alone (the buffer forgets early what cannot be selected):
        # matches beyond K per node, then beyond F per run among the per-node survivors.
        node_excess = jax.ops.segment_sum(jnp.maximum(qualified - k, 0), runs_of_pair, num_segments=n_runs)
        survivors = jax.ops.segment_sum(jnp.minimum(qualified, k), runs_of_pair, num_segments=n_runs)
        # Until a run first overflows, its trace equals the uncapped one, so these counts are what any
        # capacity sees at this step: exactly the capacities under which it would not overflow here.
        step_need = jnp.stack([jax.ops.segment_max(qualified, runs_of_pair, num_segments=n_runs),
                               jax.ops.segment_sum(qualified, runs_of_pair, num_segments=n_runs)], axis=-1)
        need = jnp.where((overflow == 0)[:, None], jnp.maximum(need, step_need), need)
        overflow = overflow + node_excess + jnp.maximum(survivors - f, 0)
        return nodes, scores, via, parents, overflow, need

    init = (nodes, scores, via, parents, jnp.zeros(n_runs, jnp.int32), jnp.zeros((n_runs, 2), jnp.int32))
    (nodes, scores, via, parents, overflow, need), _ = jax.lax.scan(step_fn, init, jnp.arange(n_steps))
    return TraceOutput(nodes, scores, via, parents, overflow, need)


def resolve_backend(backend: str) -> str:
    """``blocks`` or ``flat`` for a ``tracer.backend`` setting: ``auto`` is ``blocks`` on the CPU (small
    blocks and few sorts; measured faster there, experiments/results/trace-backends-cpu.md) and ``flat`` on an
    accelerator, where each of the blocks backend's small data-dependent rounds is a round of launches."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown tracer backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    return "blocks" if jax.default_backend() == "cpu" else "flat"


def fitting_levels(ladder: Sequence[TracerShapes], need: np.ndarray) -> np.ndarray:
    """Per run, the lowest level of ``ladder`` whose capacities hold its ``need`` (:attr:`TraceOutput.need`,
    host int [R, 2]); ``len(ladder)`` where none does.

    A run's trace at two capacities is the same up to the first step where the smaller one drops a
    match (the caps only act by dropping), and at that step ``qualified`` is the same for both. So
    with ``need`` from a trace that did not overflow, every capacity that holds it gives that trace
    (padded to its own frontier) and every one that does not overflows; with ``need`` from one that
    overflowed, a capacity that does not hold it overflows too (at that step or before)."""
    need = np.asarray(need).reshape(-1, 2)
    matches = np.array([shapes.node_matches for shapes in ladder])
    frontier = np.array([shapes.frontier for shapes in ladder])
    holds = (need[:, :1] <= matches) & (need[:, 1:] <= frontier)
    return np.where(holds.any(axis=1), holds.argmax(axis=1), len(ladder))


EXACT, FOLDED = 2, 1  # anchor levels of entities the question names (exact id / case- or accent-folded name)


@functools.partial(jax.jit, static_argnames=("top_n",))
def anchor_batch(entity_emb: jax.Array, mentions: jax.Array, guidance: jax.Array, lam: jax.Array,
                 named: jax.Array | None = None, named_level: jax.Array | None = None, *, top_n: int):
    """Eqs. 8-11, 15 for a batch: top-N entities by cosine, λ inside the guidance set, argmax.

    ``named`` int32 [B, P] (-1 padded) are KG entities the question names, with ``named_level``
    int32 [B, P]: ``EXACT`` (the topic's own id, taken with cosine 1) or ``FOLDED`` (same name up to
    case/accents, taken with its cosine). The highest level present wins; within it the λ-boosted
    score, then position (named entries precede the cosine top-N, so an exact entity wins ties
    with its uncased twin). Without named entities this is the paper's rule unchanged.

    Returns (anchor ids int32 [B], anchor scores float32 [B]).
    """
    cos = jnp.einsum("nd,bd->bn", entity_emb.astype(jnp.float32), mentions)
    top_cos, top_ids = jax.lax.top_k(cos, min(top_n, entity_emb.shape[0]))
    top_level = jnp.zeros_like(top_ids)
    if named is not None:
        named_cos = jnp.take_along_axis(cos, jnp.maximum(named, 0), axis=-1)
        named_cos = jnp.where(named_level >= EXACT, 1.0, named_cos)
        top_cos = jnp.concatenate([named_cos, top_cos], axis=-1)
        top_ids = jnp.concatenate([named, top_ids], axis=-1)
        top_level = jnp.concatenate([jnp.where(named >= 0, named_level, -1), top_level], axis=-1)
    boosted = top_cos * jnp.where(_in_guidance(top_ids, guidance[:, None, :]), lam, 1.0)
    best_level = jnp.max(top_level, axis=-1, keepdims=True)
    best = jnp.argmax(jnp.where(top_level == best_level, boosted, NEG_INF), axis=-1)
    pick = lambda a: jnp.take_along_axis(a, best[:, None], axis=-1)[:, 0]  # noqa: E731
    return pick(top_ids).astype(jnp.int32), pick(boosted)


def capacity_ladder(base: TracerShapes, max_frontier: int) -> list[TracerShapes]:
    """Power-of-two capacity buckets from ``base`` up to ``max_frontier`` bindings per schema node.

    Frontier and per-node matches double together, so a run that overflowed one bucket is
    re-traced in the next; the number of buckets (hence compilations) is log2(max / base) + 1.
    """
    ladder = [base]
    while ladder[-1].frontier * 2 <= max_frontier:
        last = ladder[-1]
        ladder.append(dataclasses.replace(last, frontier=last.frontier * 2, node_matches=last.node_matches * 2))
    return ladder

"""Exact variants of the blocks tracer's edge-block kernel on MetaQA oracle plans, timed against today's.

Command (repo root; MetaQA index ready):

    STEM_DATA_DIR=../shared/data python experiments/trace_kernel_variants.py [--batches 30] [--reps 8] [--label L]

The trace of the MetaQA oracle split is mostly 3-hop Breadth batches (about three quarters of the split's
tracer time, most of it at the capacity ladder's first level). This
script builds ``--batches`` such batches (64 runs each, halted at their first overflow as the ladder does)
and traces them with the tracer as it is (``base``) and with variants of its pieces, each compiled as its
own jit of :func:`stem_jax.trace.tracer.trace_batch` with one module attribute patched:

* ``sum-reduce dot``: the gathered cosine as ``sum(codes * query, -1)`` instead of an ``einsum``;
* ``unrolled search``: the block's pair lookup (``searchsorted``) unrolled instead of a ``while`` loop;
* ``boundary marks``: the pair lookup as a scatter of the frontier's offsets into the block and a cumsum;
* ``buffer +4 windows``: Breadth's candidate buffer 3 windows larger, so it is compacted less often;
* ``window 2048``: blocks of 2,048 edges instead of ``engine.window``;
* ``rows in incidence order``: codes, scales and triple ends copied in CSR order (2x their memory), so a
  node's incident rows are read contiguously.

First, where the split's tracer time goes: every tracer call that STEM retrieval over the whole split makes
(the eval's chunks, capacity-ladder retries included) is recorded, then each is timed alone (minimum of
``--split-reps`` calls) and the minima are summed by steps and by ladder level (frontier).

Every variant is exact (outputs compared with ``base``, bit for bit). Then knock-outs, which are not exact
and only bound what a piece can cost: ``no dot`` (the per-row scale alone), ``no used-triple test``, ``no
edge loop`` (a step reads no edges). Timing: per batch the minimum of ``--reps`` calls, the variants
interleaved call by call (the machine is shared; load drifts), summed over the batches.

Writes experiments/results/trace-kernel-variants[-L].{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import open_metaqa_stem  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.methods.stem.anchor import anchor  # noqa: E402
from stem_jax.methods.stem.trace import make_batch  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
STATIC = ("shapes", "precision", "relation_bonus", "tau_admits", "direction", "used", "halt_overflowed", "backend")


def patched(function, old: str, new: str):
    """``function`` compiled again from its own source with ``old`` replaced by ``new`` (which must stand in it
    exactly once), in its module's namespace: a variant that follows the kernel as it is."""
    source = textwrap.dedent(inspect.getsource(function))
    if source.count(old) != 1:
        raise SystemExit(f"{function.__module__}.{function.__name__} no longer reads {old!r}: update the variant")
    namespace = dict(vars(inspect.getmodule(function)))
    exec(compile(source.replace(old, new), inspect.getsourcefile(function), "exec"), namespace)  # noqa: S102
    return namespace[function.__name__]


def variants(kg):
    """name -> (exact, [(module, attribute, value)], shapes transform or None)."""
    import jax
    import jax.numpy as jnp

    import kernels.blocks as blocks
    import kernels.select as select
    from kernels.candidates import Edges
    from kernels.membership import row_contains
    from stem_jax.trace import tracer

    def dots_sum(table, scale, rows, queries, bias):
        dots = jnp.sum(table[rows].astype(jnp.float32) * queries, axis=-1)
        dots = dots if scale is None else dots * scale[rows]
        return dots if bias is None else dots + bias

    def dots_none(table, scale, rows, queries, bias):
        return scale[rows] + queries[:, 0] + (0.0 if bias is None else bias)

    def lookup(method):
        def gather_edges(offsets, incidence, cum, nodes, start, width):
            n_pairs = nodes.shape[0]
            pos = start + jnp.arange(width, dtype=jnp.int32)
            valid = pos < cum[-1]
            if method == "marks":  # count the pair boundaries at or before each position
                marks = jnp.zeros(width, jnp.int32).at[jnp.clip(cum - start, 0, width)].add(1, mode="drop")
                pair = jnp.clip(jnp.cumsum(marks) - 1, 0, n_pairs - 1).astype(jnp.int32)
            else:
                pair = jnp.clip(jnp.searchsorted(cum, pos, side="right", method=method) - 1, 0,
                                n_pairs - 1).astype(jnp.int32)
            node = jnp.where(valid, nodes[pair], 0)
            return pair, node, incidence[jnp.where(valid, offsets[node] + pos - cum[pair], 0)], valid
        return gather_edges

    def rank_within_unrolled(sorted_keys):
        return jnp.arange(sorted_keys.shape[0]) - jnp.searchsorted(sorted_keys, sorted_keys, side="left",
                                                                   method="scan_unrolled")

    def breadth(slack, loop=True):
        """kernels.blocks.breadth_blocks with a candidate buffer ``slack`` windows past B·F (its own: 1), or
        reading no edges at all (``loop=False``): the kernel's own lines, one of them changed."""
        kernel = blocks.breadth_blocks
        if slack != 1:
            kernel = patched(kernel, "capacity = n_runs * frontier + window",
                             f"capacity = n_runs * frontier + {slack} * window")
        if loop:
            return kernel
        return lambda score, n_edges, *args: kernel(score, jnp.int32(0), *args)

    codes_inc, scale_inc, ends_inc = kg.triple_emb[kg.csr_triples], kg.triple_scale[kg.csr_triples], \
        kg.triples[kg.csr_triples]

    def incidence_scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, used, queries, relation, guidance):
        def score(start, width):
            pos = start + jnp.arange(width, dtype=jnp.int32)
            valid = pos < cum[-1]
            pair = jnp.clip(jnp.searchsorted(cum, pos, side="right") - 1, 0, pair_nodes.shape[0] - 1).astype(jnp.int32)
            node = jnp.where(valid, pair_nodes[pair], 0)
            at = jnp.where(valid, kg.csr_offsets[node] + pos - cum[pair], 0)
            triple, run, ends = kg.csr_triples[at], runs_of_pair[pair], ends_inc[at]
            valid &= ~jax.lax.cond(used.any_used, lambda: row_contains(used.rows, used.row_of_pair[pair], triple),
                                   lambda: jnp.zeros(width, bool))
            if used.forward is not None:
                valid &= jnp.where(used.forward[run], ends[:, 0], ends[:, 2]) == node
            projected, bias = queries
            dots = jnp.einsum("wk,wk->w", codes_inc[at].astype(jnp.float32), projected[run]) * scale_inc[at]
            dots = dots if bias is None else dots + bias[run]
            rows, any_guidance = guidance
            in_guidance = jax.lax.cond(any_guidance, lambda: row_contains(rows, run, ends[:, 0])
                                       & row_contains(rows, run, ends[:, 2]), lambda: jnp.zeros(width, bool))
            guided = jnp.where(in_guidance, hyper.tau, 0.0)
            same_relation = (ends[:, 1] == relation[run]) & (relation[run] >= 0)
            t_score = dots + guided + (jnp.where(same_relation, 1.0, 0.0) if relation_bonus else 0.0)
            return Edges(pair, run, triple, t_score, same_relation, valid, guided)
        return score

    scorer = tracer.edge_scorer

    def no_used(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair, used, *rest):
        return scorer(kg, hyper, relation_bonus, cum, pair_nodes, runs_of_pair,
                      used._replace(any_used=jnp.bool_(False)), *rest)

    compact_rows = kg.triple_scale is not None
    table = {
        "base": (True, [], None),
        "sum-reduce dot": (True, [(tracer, "gathered_dots", dots_sum)], None),
        "unrolled search": (True, [(tracer, "gather_edges", lookup("scan_unrolled")),
                                   (select, "rank_within", rank_within_unrolled)], None),
        "boundary marks": (True, [(tracer, "gather_edges", lookup("marks"))], None),
        "buffer +4 windows": (True, [(tracer, "breadth_blocks", breadth(4))], None),
        "window 2048": (True, [], lambda s: dataclasses.replace(s, window=2048)),
        "rows in incidence order": (True, [(tracer, "edge_scorer", incidence_scorer)], None),
        "knock-out: no dot": (False, [(tracer, "gathered_dots", dots_none)], None),
        "knock-out: no used-triple test": (False, [(tracer, "edge_scorer", no_used)], None),
        "knock-out: no edge loop": (False, [(tracer, "breadth_blocks", breadth(1, loop=False))], None),
    }
    if not compact_rows:  # the incidence copy and the no-dot knock-out read a per-row scale
        for name in ("rows in incidence order", "knock-out: no dot"):
            table.pop(name)
    return table


def split_costs(method, questions, reps: int) -> dict:
    """Each tracer call of the split's retrieval, timed alone, summed by steps and by frontier."""
    from stem_jax.eval import sharding  # the trace stage's calls reach trace_batch through this module

    calls, plain = [], sharding.trace_batch

    def record(kg, batch, hyper, **static):
        calls.append((batch, hyper, static))
        return plain(kg, batch, hyper, **static)

    sharding.trace_batch = record
    try:
        chunk = method.context.config.engine.chunk_questions
        for start in range(0, len(questions), chunk):
            method.retrieve(questions[start : start + chunk])
    finally:
        sharding.trace_batch = plain
    kg = method.resources.kg
    by_steps: dict[int, float] = {}
    by_frontier: dict[int, list] = {}
    for batch, hyper, static in calls:
        seconds = min(_timed(lambda b=batch, h=hyper, s=static: plain(kg, b, h, **s)) for _ in range(reps + 1))
        steps = int(np.asarray(batch.step_mask).sum(axis=1).max())
        by_steps[steps] = by_steps.get(steps, 0.0) + seconds
        row = by_frontier.setdefault(static["shapes"].frontier, [0, 0.0])
        row[0] += 1
        row[1] += seconds
    total = sum(by_steps.values())
    return {"calls": len(calls), "seconds": round(total, 3),
            "by_steps": {k: round(v, 3) for k, v in sorted(by_steps.items())},
            "by_frontier": {k: {"calls": n, "seconds": round(v, 3)} for k, (n, v) in sorted(by_frontier.items())}}


def _timed(call) -> float:
    import jax

    began = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=30, help="3-hop level-0 Breadth batches timed")
    parser.add_argument("--reps", type=int, default=8, help="calls per batch and variant; the minimum is kept")
    parser.add_argument("--split-reps", type=int, default=2, help="timed calls per recorded split call (+1 warm)")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)

    import jax

    from stem_jax.trace import tracer

    method, questions = open_metaqa_stem()
    method.retrieve(questions[:2048])  # compiles what the split reaches
    load_split = os.getloadavg()[0]
    split = split_costs(method, questions, args.split_reps)
    res = method.resources
    kg, shapes, size = res.kg, res.ladder[0], res.batch[False]
    runs = [r for q in questions for r in method.runs[q.qid] if r.plan.num_steps == 3][: size * args.batches]
    anchored = anchor(res, runs, [res.hyper])  # the configured λ, each run's own guidance rows
    anchors, scores, guidance = anchored.entity[0], anchored.score[0], anchored.guidance[0]
    batches = [make_batch(res, runs[s : s + size], anchors[s : s + size], scores[s : s + size], size, runs[s].bucket,
                          guidance[s : s + size])
               for s in range(0, len(runs) - size + 1, size)]
    traced = res.resolve(method.hyper).traced()
    static = {"shapes": shapes, "precision": False, "halt_overflowed": True, "backend": "blocks",
              **res.tracer_switches()}

    table = variants(kg)
    plain = tracer.trace_batch.__wrapped__
    compiled, outputs = {}, {}
    for name, (_, patches, reshape) in table.items():
        saved = [(module, attr, getattr(module, attr)) for module, attr, _ in patches]
        for module, attr, value in patches:
            setattr(module, attr, value)

        def call(*a, _reshape=reshape, **k):
            if _reshape is not None:
                k["shapes"] = _reshape(k["shapes"])
            return plain(*a, **k)

        compiled[name] = jax.jit(call, static_argnames=STATIC)
        outputs[name] = jax.device_get([compiled[name](kg, b, traced, **static) for b in batches])
        for module, attr, value in saved:
            setattr(module, attr, value)
    identical = {name: all(all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
                           for a, b in zip(outputs["base"], outputs[name], strict=True)) for name in table}

    load_before = os.getloadavg()[0]
    best = {name: np.full(len(batches), np.inf) for name in table}
    for rep in range(args.reps):
        order = list(table) if rep % 2 == 0 else list(table)[::-1]
        for i, batch in enumerate(batches):
            for name in order:
                began = time.perf_counter()
                jax.block_until_ready(compiled[name](kg, batch, traced, **static))
                best[name][i] = min(best[name][i], time.perf_counter() - began)
    base_ms = best["base"].sum() * 1e3
    rows = [{"variant": name, "exact": table[name][0], "identical_to_base": identical[name],
             "ms": round(float(best[name].sum() * 1e3), 1),
             "vs_base": round(float(best[name].sum() * 1e3 / base_ms), 3)} for name in table]
    payload = {"meta": run_metadata(), "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
               "load_split": round(load_split, 2), "split": split, "batches": len(batches), "batch_runs": size, "frontier": shapes.frontier, "window": shapes.window,
               "row_dtype": str(kg.triple_emb.dtype), "row_width": int(kg.triple_emb.shape[1]), "reps": args.reps,
               "rows": rows, "command": "python experiments/trace_kernel_variants.py"
               + (f" --batches {args.batches}" if args.batches != 30 else "")
               + (f" --reps {args.reps}" if args.reps != 8 else "")
               + (f" --split-reps {args.split_reps}" if args.split_reps != 2 else "") + (f" --label {args.label}" if args.label else "")}
    meta = payload["meta"]
    markdown = "\n".join([
        f"Blocks-tracer kernel variants on MetaQA test oracle plans: {len(batches)} 3-hop level-0 Breadth batches of "
        f"{size} runs (F={shapes.frontier}, window {shapes.window}, {payload['row_dtype']} rows of width "
        f"{payload['row_width']}); machine {meta['machine']} ({meta['cpu_count']} cores, shared), commit "
        f"{meta['commit']}, jax {meta['jax']} ({meta['backend']}), load {payload['load_before']} / "
        f"{payload['load_after']}.", "",
        f"Command: `{payload['command']}`", "",
        f"The whole split's {split['calls']} tracer calls (recorded from STEM retrieval in the eval's chunks, "
        f"capacity-ladder retries included), each timed alone (minimum of {args.split_reps} calls), load "
        f"{payload['load_split']}: {split['seconds']} s in all.", "",
        markdown_table(["plan steps", "seconds"], [[k, v] for k, v in split["by_steps"].items()]), "",
        markdown_table(["ladder level (frontier F)", "calls", "seconds"],
                       [[k, v["calls"], v["seconds"]] for k, v in split["by_frontier"].items()]), "",
        "Kernel variants:", "",
        "Time = per batch the minimum of the reps (variants interleaved call by call), summed over the batches. "
        "Exact variants must give outputs identical to base bit for bit; knock-outs are not exact and only "
        "bound what the piece they drop can cost.", "",
        markdown_table(["variant", "exact", "outputs identical to base", "ms (sum of per-batch minima)",
                        "x base"], [[r["variant"], r["exact"], r["identical_to_base"], r["ms"], r["vs_base"]]
                                    for r in rows]), "",
    ])
    write_report(RESULTS, "trace-kernel-variants" + (f"-{args.label}" if args.label else ""), payload, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

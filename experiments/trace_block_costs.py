"""Where the tracer's time goes on MetaQA oracle plans: per batch, and inside one edge block (issue 22).

Command (repo root; MetaQA index ready):

    STEM_DATA_DIR=../shared/data python experiments/trace_block_costs.py [--batches 40] [--label L]

Part 1, per batch: level-0 Breadth batches (64 runs, the eval's first ladder level, runs halted at their first
overflow as the ladder does) of the test split's 1-, 2- and 3-hop oracle plans are each timed alone (minimum of
``--reps`` warm calls). Each batch's edge blocks are counted from its output (the incident edges of every
step's frontier, divided by ``engine.window`` and rounded up), and the times are fitted by least squares as
``ms = a + b * blocks``: ``b`` is the cost of one block of edges, ``a`` what a call costs besides.

Part 2, inside a block: the tracer's own block scorer (``_score_block``: pair lookup, used-triple test,
endpoint gather, the semantic dot product against the step's schema embedding, guidance test) is timed in a
``fori_loop`` on a frontier drawn from the KG's entities, then the same without the dot product, the pair lookup
alone and the dot product alone (the gather of the float16 triple rows, their conversion and the 384-wide
products, against one query per edge as the tracer does, and against a single query), and the gather of the
rows alone. What a block costs
beyond ``_score_block`` is Breadth's bookkeeping (θ test, counts, candidate buffer).

Writes experiments/results/trace-block-costs[-L].{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import best_seconds, open_metaqa_stem  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.methods.stem.anchor import anchor  # noqa: E402
from stem_jax.methods.stem.trace import make_batch  # noqa: E402

RESULTS = ROOT / "experiments" / "results"


def batch_costs(method, questions, batches: int, reps: int) -> dict:
    """Part 1: each level-0 Breadth batch timed alone, against its number of edge blocks."""
    import jax

    res = method.resources
    traced = res.resolve(method.hyper).traced()
    degree = np.diff(np.asarray(res.index.csr_offsets))
    shapes = res.ladder[0]
    size = res.batch[False]
    rows = []
    for hops in (1, 2, 3):
        runs = [r for q in questions for r in method.runs[q.qid] if r.plan.num_steps == hops][: size * batches]
        anchored = anchor(res, runs, [res.hyper])  # the configured λ, each run's own guidance rows
        anchors, scores, guidance = anchored.entity[0], anchored.score[0], anchored.guidance[0]
        for start in range(0, len(runs) - size + 1, size):
            part = slice(start, start + size)
            batch = make_batch(res, runs[part], anchors[part], scores[part], size, runs[start].bucket, guidance[part])

            def call(batch=batch):
                return res.sharding.trace(res.kg, batch, traced, shapes=shapes, precision=False,
                                          halt_overflowed=True, **res.tracer_switches())

            seconds = best_seconds(call, reps)
            nodes = jax.device_get(call()).nodes
            blocks = 0
            for parent in np.asarray(batch.steps)[0, :hops, 0]:  # MetaQA plans are chains: parent slot of each step
                frontier = nodes[:, parent]
                edges = int(np.where(frontier >= 0, degree[np.maximum(frontier, 0)], 0).sum())
                blocks += -(-edges // shapes.window)
            rows.append((hops, seconds * 1e3, blocks))
    table = np.asarray(rows, dtype=float)
    design = np.column_stack([np.ones(len(table)), table[:, 2]])
    (fixed, per_block), *_ = np.linalg.lstsq(design, table[:, 1], rcond=None)
    fitted = design @ np.array([fixed, per_block])
    r2 = 1 - ((table[:, 1] - fitted) ** 2).sum() / ((table[:, 1] - table[:, 1].mean()) ** 2).sum()
    per_hop = {int(h): {"batches": int((table[:, 0] == h).sum()),
                        "ms_mean": round(float(table[table[:, 0] == h, 1].mean()), 3),
                        "blocks_mean": round(float(table[table[:, 0] == h, 2].mean()), 2)} for h in (1, 2, 3)}
    return {"batch_runs": size, "window": shapes.window, "frontier": shapes.frontier,
            "fixed_ms": round(float(fixed), 3), "per_block_us": round(float(per_block) * 1e3, 1),
            "r2": round(float(r2), 3), "per_hop": per_hop}


def block_costs(method, reps: int, loops: int = 64) -> dict:
    """Part 2: one block of ``window`` edges through ``_score_block`` and through its parts."""
    import jax
    import jax.numpy as jnp

    from kernels.membership import row_contains, sorted_rows
    from stem_jax.trace import tracer

    res = method.resources
    kg = res.kg
    rng = np.random.default_rng(0)
    runs, frontier, window = res.batch[False], res.ladder[0].frontier, res.ladder[0].window
    n_pairs = runs * frontier
    degree = np.diff(np.asarray(res.index.csr_offsets))
    pair_nodes = np.where(rng.random(n_pairs) < 0.3, rng.integers(0, len(degree), n_pairs), -1).astype(np.int32)
    cum = np.concatenate([[0], np.cumsum(np.where(pair_nodes >= 0, degree[np.maximum(pair_nodes, 0)], 0))])
    blocks = int(cum[-1]) // window
    runs_of_pair = jnp.asarray(np.repeat(np.arange(runs), frontier).astype(np.int32))
    via = np.full((runs, 5, frontier), -1, np.int32)
    via[:, 1, :8] = rng.integers(0, res.index.num_triples, (runs, 8))
    used = tracer.UsedMasks(tracer.sorted_used(jnp.asarray(via)), jnp.bool_(True), runs_of_pair, None)
    dim = kg.triple_emb.shape[1]
    queries = jnp.asarray(rng.standard_normal((runs, dim)).astype(np.float32) / np.sqrt(dim))
    relation = jnp.asarray(rng.integers(0, res.index.num_relations, runs).astype(np.int32))
    guidance = (sorted_rows(jnp.full((runs, 64), -1, jnp.int32)), jnp.bool_(False))
    hyper = method.hyper.traced()
    cum, pair_nodes = jnp.asarray(cum.astype(np.int32)), jnp.asarray(pair_nodes)

    def edges(block):
        pos = block * window + jnp.arange(window, dtype=jnp.int32)
        pair = jnp.clip(jnp.searchsorted(cum, pos, side="right") - 1, 0, n_pairs - 1).astype(jnp.int32)
        node = jnp.where(pos < cum[-1], pair_nodes[pair], 0)
        triple = kg.csr_triples[jnp.where(pos < cum[-1], kg.csr_offsets[node] + pos - cum[pair], 0)]
        return pos, pair, triple

    def scorer(block):
        e = tracer.edge_scorer(kg, hyper, False, cum, pair_nodes, runs_of_pair, used, (queries, None), relation,
                                guidance)(block * window, window)
        return jnp.where(e.valid, e.t_score, 0.0).sum() + e.pair.sum()

    def without_dot(block):
        pos, pair, triple = edges(block)
        barred = row_contains(used.rows, used.row_of_pair[pair], triple)
        ends = kg.triples[triple]
        return jnp.where(barred, 0, ends[:, 1]).sum().astype(jnp.float32) + pair.sum()

    def lookup(block):
        pos = block * window + jnp.arange(window, dtype=jnp.int32)
        return jnp.searchsorted(cum, pos, side="right").sum().astype(jnp.float32)

    def dot(block):
        _, pair, triple = edges(block)
        return jnp.einsum("wd,wd->w", kg.triple_emb[triple].astype(jnp.float32), queries[runs_of_pair[pair]]).sum()

    def dot_one_query(block):
        _, _, triple = edges(block)
        return (kg.triple_emb[triple].astype(jnp.float32) @ queries[block % runs]).sum()

    def gather_only(block):
        _, _, triple = edges(block)
        return kg.triple_emb[triple].astype(jnp.float32).sum()

    out = {"edges": int(cum[-1]), "blocks": blocks, "window": window, "dim": int(dim),
           "table_dtype": str(kg.triple_emb.dtype)}
    for name, body in (("score_block", scorer), ("score_block without the dot product", without_dot),
                       ("pair lookup alone", lookup), ("dot product alone (one query per edge)", dot),
                       ("dot product alone (one query per block)", dot_one_query),
                       ("triple rows gathered alone (float16 to float32, summed)", gather_only)):
        looped = jax.jit(lambda body=body: jax.lax.fori_loop(0, loops, lambda i, acc: acc + body(i % blocks), 0.0))
        out[name] = round(best_seconds(looped, reps) / loops * 1e6, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=40, help="level-0 batches timed per hop count")
    parser.add_argument("--reps", type=int, default=9, help="warm calls per timing; the minimum is kept")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)

    method, questions = open_metaqa_stem()
    load_before = os.getloadavg()[0]
    batches = batch_costs(method, questions, args.batches, args.reps)
    block = block_costs(method, args.reps)
    payload = {"meta": run_metadata(), "load_before": round(load_before, 2),
               "load_after": round(os.getloadavg()[0], 2), "batches": batches, "block": block,
               "command": "python experiments/trace_block_costs.py" + (f" --label {args.label}" if args.label else "")}
    per_hop = [[h, v["batches"], v["ms_mean"], v["blocks_mean"]] for h, v in batches["per_hop"].items()]
    parts = [[name, us] for name, us in block.items() if isinstance(us, float)]
    meta = payload["meta"]
    markdown = "\n".join([
        f"Tracer cost on MetaQA test oracle plans, machine {meta['machine']} ({meta['cpu_count']} cores), "
        f"commit {meta['commit']}, jax {meta['jax']} ({meta['backend']}), load {payload['load_before']} / "
        f"{payload['load_after']}.", "",
        f"Command: `{payload['command']}`", "",
        f"Level-0 Breadth batches of {batches['batch_runs']} runs (F={batches['frontier']}, window "
        f"{batches['window']} edges), each timed alone: **ms = {batches['fixed_ms']} + {batches['per_block_us']} us x "
        f"blocks** (least squares, R² {batches['r2']}).", "",
        markdown_table(["hops", "batches", "mean ms per batch", "mean edge blocks per batch"], per_hop), "",
        f"One block of {block['window']} edges ({block['table_dtype']} triple rows of width {block['dim']}; "
        f"a frontier of {block['edges']} edges drawn from the KG's entities), microseconds per block:", "",
        markdown_table(["part", "us per block"], parts), "",
    ])
    stem = "trace-block-costs" + (f"-{args.label}" if args.label else "")
    write_report(RESULTS, stem, payload, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

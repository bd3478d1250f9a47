"""Compact triple rows against the float16 rows: bytes per triple, kernel time, ranking agreement, accuracy.

Command (repo root; MetaQA, WorldCup2014 and the demo KG indexed, their pattern planners trained):

    STEM_DATA_DIR=../shared/data STEM_CACHE_DIR=.cache/stem_jax python experiments/compact_rows.py --accuracy-formats pca128-int8,pca96-int8 --runs-tag final

(defaults: ``--formats int8,pca192-int8,pca128-int8,pca96-int8,pca64-int8 --kgs metaqa,wc2014,demo
--parts rows,kernel,accuracy``, kernel = block,bench; ``--label L`` writes compact-rows-L; parts run separately accumulate in one file.)

For each KG and each row format (``encoder.row_format``, :mod:`stem_jax.encoder.compact`):

* rows: bytes per triple row and the ratio to float16's 768 B; the projection's kept variance; build time;
  the cosine error on 20,000 (triple, query) pairs; and ranking agreement: for 3,000 nodes of degree >= 2,
  their incident triples ranked by cosine to a query (the float16 row of another KG triple with the relation
  of one of the node's triples: a schema step's text names a relation and other entities), float16 against
  the compact rows: the same best triple (what Precision keeps), a best triple of the same relation, and
  Kendall's tau of the two orders.
* kernel (MetaQA): the tracer's block scorer (``_score_block``: one block of ``engine.window`` incident edges,
  gathered rows, scored against the step's query) in microseconds per block on one frontier drawn from the
  KG, and ``stem-jax bench trace --dataset metaqa --hops 2`` (oracle plans, 256 questions) per format.
* accuracy: the KG's test split (webqsp-r: the dev split of RoG's WebQSP as ``--dataset files``) planned once by the pattern planner (``stem-jax plan``), then ``stem-jax eval
  --plans`` under float16 and each of ``--accuracy-formats``: Hit@1 and F1 per group (hops; WorldCup2014's
  P1/P2/C) next to the bound (float16 - 0.1 point; webqsp-r dev is held to it as a whole, its hop groups
  being 41-104 questions), and the share of questions whose answer sets, and ranked
  answer lists, are identical to float16's (answers of near-equal score may swap places). The eval run folders (runs/compact-rows/) resume, so a rerun only adds what is missing.

Writes experiments/results/compact-rows[-L].{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import best_seconds  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

RESULTS = ROOT / "experiments" / "results"
RUNS = ROOT / "runs" / "compact-rows"
FLOAT16_BYTES = 768
BOUND = 0.1  # points of Hit@1 and F1 a compact format may lose against float16


def _dataset_args(kg: str) -> list[str]:
    """CLI flags naming a KG: a registered dataset, or ``webqsp-r`` (RoG WebQSP as files, its dev split)."""
    if kg == "webqsp-r":
        root = Path(os.environ.get("STEM_DATA_DIR", ROOT.parent / "shared" / "data"))
        return ["--dataset", "files", "--data-dir", str(root / "webqsp-r"), "--split", "dev"]
    return ["--dataset", kg]


def _cli(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "stem-jax"), *args, "--no-progress"]
    print("$ stem-jax " + " ".join(args), flush=True)
    subprocess.run(command, check=True, cwd=ROOT)


def _open(kg: str):
    from stem_jax.config import StemConfig
    from stem_jax.engine import load_kg, open_embeddings
    from stem_jax.validation import dataset_spec_fields

    flags = _dataset_args(kg)
    spec = dataset_spec_fields(flags[1], {"data_dir": flags[3], "split": flags[5]} if len(flags) > 2 else {})
    dataset, index = load_kg(spec)
    cache = Path(os.environ.get("STEM_CACHE_DIR", Path.home() / ".cache" / "stem_jax"))
    _, embeddings, _ = open_embeddings(StemConfig(), dataset, index, cache)
    return index, embeddings


# ---------------------------------------------------------------------------------------------
# rows: size, error, ranking agreement
# ---------------------------------------------------------------------------------------------


def _kendall(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-a of two score vectors over the same items (pairs tied in either count as discordant)."""
    n = len(a)
    i, j = np.triu_indices(n, 1)
    agree = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return float(agree.sum() / max(len(i), 1))


def rows_part(kg: str, formats: list[str], rng_seed: int = 0) -> dict:
    from stem_jax.encoder.compact import open_or_build_compact

    index, embeddings = _open(kg)
    table = embeddings.triples.array
    m, d = table.shape
    rng = np.random.default_rng(rng_seed)
    pairs_t = rng.integers(0, m, 20000)
    pairs_q = table[rng.integers(0, m, 20000)].astype(np.float32)
    exact_pairs = np.einsum("wd,wd->w", table[pairs_t].astype(np.float32), pairs_q)
    degree = np.diff(np.asarray(index.csr_offsets))
    nodes = rng.choice(np.flatnonzero(degree >= 2), size=min(3000, int((degree >= 2).sum())), replace=False)
    by_relation = {r: np.flatnonzero(index.triples[:, 1] == r) for r in range(index.num_relations)}
    cases = []
    for v in nodes.tolist():
        incident = np.unique(index.incident(v))
        relation = int(index.triples[rng.choice(incident), 1])
        others = by_relation[relation]
        query = int(rng.choice(others))
        cases.append((incident, table[query].astype(np.float32)))
    exact_rank = [table[inc].astype(np.float32) @ q for inc, q in cases]
    out = {"triples": int(m), "dim": int(d), "float16_bytes_per_triple": int(table.dtype.itemsize * d), "formats": {}}
    for fmt in formats:
        began = time.perf_counter()
        compact = open_or_build_compact(embeddings.triples, fmt)
        seconds = time.perf_counter() - began
        approx_pairs = compact.dots(pairs_t, pairs_q)
        err = np.abs(approx_pairs - exact_pairs)
        top1 = top_relation = taus = 0.0
        for (inc, q), exact in zip(cases, exact_rank, strict=True):
            approx = compact.dots(inc, np.broadcast_to(q, (len(inc), d)))
            best, best_exact = inc[np.argmax(approx)], inc[np.argmax(exact)]
            top1 += int(best == best_exact)
            top_relation += int(index.triples[best, 1] == index.triples[best_exact, 1])
            taus += _kendall(exact, approx)
        out["formats"][fmt] = {
            "bytes_per_triple": compact.bytes_per_row,
            "times_fewer_bytes": round(out["float16_bytes_per_triple"] / compact.bytes_per_row, 2),
            "table_mib": round(compact.nbytes / 2**20, 2),
            "explained_variance": None if compact.explained is None else round(compact.explained, 4),
            "open_or_build_seconds": round(seconds, 2),
            "cosine_abs_error_mean": float(err.mean()), "cosine_abs_error_p99": float(np.quantile(err, 0.99)),
            "cosine_abs_error_max": float(err.max()),
            "ranking_top1_agreement": round(top1 / len(cases), 4),
            "ranking_top1_same_relation": round(top_relation / len(cases), 4), "ranking_kendall_tau_mean": round(taus / len(cases), 4),
            "ranking_nodes": len(cases),
        }
        print(kg, fmt, out["formats"][fmt], flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# kernel: block scorer and bench trace
# ---------------------------------------------------------------------------------------------


def block_part(formats: list[str], reps: int = 5, loops: int = 200, rounds: int = 11) -> dict:
    import jax
    import jax.numpy as jnp

    from kernels.membership import sorted_rows
    from kernels.rows import gathered_dots, project_queries
    from stem_jax.config import StemConfig
    from stem_jax.encoder.compact import open_or_build_compact
    from stem_jax.methods.stem.types import StemHyper
    from stem_jax.trace import tracer

    index, embeddings = _open("metaqa")
    engine = StemConfig().engine
    rng = np.random.default_rng(0)
    runs, frontier, window = engine.batch_breadth, engine.frontier, engine.window
    n_pairs = runs * frontier
    degree = np.diff(np.asarray(index.csr_offsets))
    pair_nodes = np.where(rng.random(n_pairs) < 0.3, rng.integers(0, len(degree), n_pairs), -1).astype(np.int32)
    cum = np.concatenate([[0], np.cumsum(np.where(pair_nodes >= 0, degree[np.maximum(pair_nodes, 0)], 0))])
    blocks = int(cum[-1]) // window
    runs_of_pair = jnp.asarray(np.repeat(np.arange(runs), frontier).astype(np.int32))
    via = np.full((runs, 5, frontier), -1, np.int32)
    via[:, 1, :8] = rng.integers(0, index.num_triples, (runs, 8))
    used = tracer.UsedMasks(tracer.sorted_used(jnp.asarray(via)), jnp.bool_(True), runs_of_pair, None)
    d = embeddings.triples.dim
    queries = jnp.asarray(rng.standard_normal((runs, d)).astype(np.float32) / np.sqrt(d))
    relation = jnp.asarray(rng.integers(0, index.num_relations, runs).astype(np.int32))
    guidance = (sorted_rows(jnp.full((runs, 64), -1, jnp.int32)), jnp.bool_(False))
    hyper = StemHyper(1.0, 0.0, 0.7).traced()
    cum_j, pair_nodes_j = jnp.asarray(cum.astype(np.int32)), jnp.asarray(pair_nodes)
    out = {"edges": int(cum[-1]), "blocks": blocks, "window": window, "runs": runs, "frontier": frontier,
           "rounds": rounds, "formats": {}}
    timed = {}
    for fmt in ["float16", *formats]:
        rows = embeddings.triples.array if fmt == "float16" else open_or_build_compact(embeddings.triples, fmt)
        kg = tracer.KGArrays.from_index(index, rows)
        proj, bias = project_queries(queries, kg.row_basis, kg.row_mean)

        def scorer(block, kg=kg, proj=proj, bias=bias):
            e = tracer.edge_scorer(kg, hyper, False, cum_j, pair_nodes_j, runs_of_pair, used, (proj, bias),
                                    relation, guidance)(block * window, window)
            return jnp.where(e.valid, e.t_score, 0.0).sum() + e.pair.sum()

        def dots(block, kg=kg, proj=proj, bias=bias):
            pos = block * window + jnp.arange(window, dtype=jnp.int32)
            pair = jnp.clip(jnp.searchsorted(cum_j, pos, side="right") - 1, 0, n_pairs - 1).astype(jnp.int32)
            node = jnp.where(pos < cum_j[-1], pair_nodes_j[pair], 0)
            triple = kg.csr_triples[jnp.where(pos < cum_j[-1], kg.csr_offsets[node] + pos - cum_j[pair], 0)]
            run = runs_of_pair[pair]
            return gathered_dots(kg.triple_emb, kg.triple_scale, triple, proj[run],
                                 None if bias is None else bias[run]).sum()

        out["formats"][fmt] = {"table_dtype": str(kg.triple_emb.dtype), "row_width": int(kg.triple_emb.shape[1])}
        for name, body in (("score_block_us", scorer), ("gather_and_dot_us", dots)):
            looped = jax.jit(lambda body=body: jax.lax.fori_loop(0, loops, lambda i, acc: acc + body(i % blocks), 0.0))
            jax.block_until_ready(looped())  # compiled before any timing
            timed[fmt, name] = looped
    # formats interleaved, round after round, the minimum kept: a busy machine slows each format alike
    best: dict = {}
    for _ in range(rounds):
        for (fmt, name), looped in timed.items():
            best[fmt, name] = min(best.get((fmt, name), np.inf), best_seconds(looped, reps))
    for (fmt, name), seconds in best.items():
        out["formats"][fmt][name] = round(seconds / loops * 1e6, 1)
    for fmt, row in out["formats"].items():
        print("block", fmt, row, flush=True)
    return out


def bench_trace_part(formats: list[str]) -> dict:
    out = {}
    for fmt in ["float16", *formats]:
        folder = RUNS / f"bench-trace-{fmt}"
        _cli("bench", "trace", "--dataset", "metaqa", "--hops", "2", "--out", str(folder),
             f"--encoder.row_format={fmt}")
        found = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        data = json.loads(found[-1].read_text())
        keep = ("runs", "jax_ms_per_run", "jax_trace_only_ms_per_run", "jax_seconds",
                "agreement_jax_vs_level_reference_answers", "agreement_jax_vs_level_reference_evidence")
        out[fmt] = {k: data.get(k) for k in keep}
        print("bench trace", fmt, out[fmt], flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# accuracy: one plan store, one eval per format
# ---------------------------------------------------------------------------------------------


def _predictions(folder: Path) -> tuple[dict[str, list], dict[str, dict]]:
    """Ranked answers per question id, and Hit@1 / F1 per id prefix (WorldCup2014's WC-P1, WC-P2, WC-C: the
    eval groups by hops) where ids have one, from the same strict metrics the eval reports."""
    from stem_jax.eval.metrics import strict_metrics

    found, subsets = {}, {}
    with open(folder / "predictions.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            found[record["id"]] = record.get("prediction") or []
            prefix = record["id"].split("/")[0]
            if prefix.startswith("WC-") and record.get("ground_truth"):
                metrics = strict_metrics(found[record["id"]], record["ground_truth"])
                sums = subsets.setdefault(prefix, {"n": 0, "hit_at_1": 0.0, "f1": 0.0, "hit": 0.0})
                sums["n"] += 1
                for key in ("hit_at_1", "f1", "hit"):
                    sums[key] += metrics[key]
    return found, {name: {"n": v["n"], **{k: round(100 * v[k] / v["n"], 3) for k in ("hit_at_1", "f1", "hit")}}
                   for name, v in sorted(subsets.items())}


def accuracy_part(kg: str, formats: list[str], tag: str = "", reuse: bool = False) -> dict:
    """``reuse``: read the metrics of eval folders that are already complete instead of running the CLI (a plan
    store planned again, e.g. by a retrained planner, would make the finished folders refuse the rerun)."""
    runs = RUNS / tag if tag else RUNS
    plans = RUNS / f"plans-{kg}"
    done = reuse and all((runs / f"{kg}-{fmt}" / "metrics.json").exists() for fmt in ["float16", *formats])
    if not done:
        _cli("plan", *_dataset_args(kg), "--planner", "pattern", "--out", str(plans))
    out = {"plans": str(plans.relative_to(ROOT)), "formats": {}}
    base = None
    for fmt in ["float16", *formats]:
        folder = runs / f"{kg}-{fmt}"
        if not done:
            _cli("eval", *_dataset_args(kg), "--plans", str(plans), "--out", str(folder), f"--encoder.row_format={fmt}")
        metrics = json.loads((folder / "metrics.json").read_text())
        groups = {name: {"n": g["n"], "hit_at_1": round(100 * g["mean"]["hit_at_1"], 3),
                         "f1": round(100 * g["mean"]["f1"], 3), "hit": round(100 * g["mean"]["hit"], 3)}
                  for name, g in {**metrics["groups"], "all": metrics["overall"]}.items()}
        predictions, subsets = _predictions(folder)
        groups.update(subsets)
        row = {"groups": groups, "theta": metrics.get("effective", {}).get("theta"),
               "wall_seconds": round(metrics.get("wall_seconds", 0.0), 1)}
        if base is None:
            base = {"groups": groups, "predictions": predictions}
        else:
            same = sum(predictions.get(q) == p for q, p in base["predictions"].items())
            sets = sum(set(predictions.get(q) or []) == set(p) for q, p in base["predictions"].items())
            row["identical_answer_sets"] = round(sets / max(len(base["predictions"]), 1), 4)
            top1 = sum((predictions.get(q) or [None])[:1] == p[:1] for q, p in base["predictions"].items())
            row["identical_ranked_answers"] = round(same / max(len(base["predictions"]), 1), 4)
            row["identical_top_answer"] = round(top1 / max(len(base["predictions"]), 1), 4)
            within = {g: all(groups[g][k] >= base["groups"][g][k] - BOUND for k in ("hit_at_1", "f1")) for g in groups}
            row["holds_every_group"] = all(within.values())
            # the bound as stated for each KG: MetaQA per hop, WorldCup2014 per subset (and hop), the demo per hop,
            # webqsp-r dev as a whole (its hop groups hold 41-104 questions: one question moves them 1-2.4 points)
            row["holds"] = within["all"] if kg == "webqsp-r" else row["holds_every_group"]
        out["formats"][fmt] = row
        print("accuracy", kg, fmt, {g: (v["hit_at_1"], v["f1"]) for g, v in groups.items()}, flush=True)
    return out


# ---------------------------------------------------------------------------------------------


def _by_size(formats: dict) -> list:
    """(format, row) pairs, widest rows first (float16, then int8, then fewer dimensions)."""
    size = {"float16": 10**6}
    return sorted(formats.items(), key=lambda kv: (-size.get(kv[0], 0), -int(kv[1].get("bytes_per_triple") or 0),
                                                   -int(kv[1].get("row_width") or 0), kv[0]))


def _markdown(payload: dict) -> str:
    meta = payload["meta"]
    commands = sorted({payload[k] for k in payload if k.endswith("_command")} |
                      {part["command"] for section in ("rows", "accuracy") for part in payload.get(section, {}).values()
                       if "command" in part})
    lines = [f"Compact triple rows against float16, machine {meta['machine']} ({meta['cpu_count']} cores), last part "
             f"run at commit {meta['commit']} ({meta['time_utc']}), jax {meta['jax']} ({meta['backend']}), load {payload['load_before']} / "
             f"{payload.get('load_after')} (a shared machine: timings are minima over warm calls and vary "
             "between runs).", "", "Commands (parts run separately accumulate here):", "",
             *[f"    {c}" for c in commands], ""]
    for kg, part in payload.get("rows", {}).items():
        lines += [f"**{kg}** rows ({part['triples']} triples, float16 {part['float16_bytes_per_triple']} B a row); "
                  "ranking agreement over the incident triples of sampled nodes:", "",
                  markdown_table(["format", "B/triple", "x fewer", "kept variance", "cos err mean", "cos err p99",
                                  "same best triple", "its relation", "Kendall tau"],
                                 [[f, r["bytes_per_triple"], r["times_fewer_bytes"], r["explained_variance"] or "-",
                                   f"{r['cosine_abs_error_mean']:.4f}", f"{r['cosine_abs_error_p99']:.4f}",
                                   r["ranking_top1_agreement"], r["ranking_top1_same_relation"],
                                   r["ranking_kendall_tau_mean"]]
                                  for f, r in _by_size(part["formats"])]), ""]
    if "block" in payload:
        block = payload["block"]
        lines += [f"Block scorer on MetaQA ({block['window']} edges a block, {block['blocks']} blocks of a frontier "
                  f"of {block['runs']} x {block['frontier']} pairs), microseconds per block (minimum over "
                  f"{block.get('rounds', 1)} interleaved rounds of warm calls):",
                  "", markdown_table(["format", "rows", "score_block us", "gather + dot us"],
                                     [[f, f"{r['table_dtype']} x {r['row_width']}", r["score_block_us"],
                                       r["gather_and_dot_us"]] for f, r in _by_size(block["formats"])]), ""]
    if "bench_trace" in payload:
        order = {f: i for i, (f, _) in enumerate(_by_size(payload.get("block", {}).get("formats", {})))}
        lines += ["`stem-jax bench trace --dataset metaqa --hops 2` (oracle plans) per format:", "",
                  markdown_table(["format", "runs", "ms/run", "trace-only ms/run", "jax = reference (answers)"],
                                 [[f, r["runs"], round(r["jax_ms_per_run"] or 0, 4),
                                   round(r["jax_trace_only_ms_per_run"] or 0, 4),
                                   r["agreement_jax_vs_level_reference_answers"]]
                                  for f, r in sorted(payload["bench_trace"].items(),
                                                     key=lambda kv: order.get(kv[0], len(order)))]), ""]
    holds: dict = {}
    for kg, part in payload.get("accuracy", {}).items():
        base = part["formats"]["float16"]["groups"]
        rows = []
        for fmt, r in _by_size(part["formats"]):
            if "holds" in r:
                strict = "" if r.get("holds_every_group", r["holds"]) == r["holds"] else " (not in every hop group)"
                holds.setdefault(fmt, []).append(f"{kg}: {'holds' if r['holds'] else 'FAILS'}{strict}")
            for g, v in r["groups"].items():
                bound = "" if fmt == "float16" else f"{base[g]['hit_at_1'] - BOUND:.2f} / {base[g]['f1'] - BOUND:.2f}"
                same = f"{r['identical_answer_sets']} / {r['identical_ranked_answers']}" if (
                    g == "all" and "identical_answer_sets" in r) else ""
                rows.append([fmt, g, v["n"], v["hit_at_1"], v["f1"], bound, same])
        lines += [f"**{kg}** {'dev' if kg == 'webqsp-r' else 'test'} split, pattern planner plans, Hit@1 / F1 (percent); bound = float16 - {BOUND}:", "",
                  markdown_table(["format", "group", "questions", "Hit@1", "F1", "bound Hit@1 / F1",
                                  "same answer set / same ranked list"], rows), ""]
    if holds:
        lines += ["Accuracy within the bound (Hit@1 and F1; MetaQA and the demo per hop, WorldCup2014 per subset, "
                  "webqsp-r dev as a whole): " +
                  "; ".join(f"{fmt}: {', '.join(v)}" for fmt, v in holds.items()) + ".", ""]
    from stem_jax.config import StemConfig

    lines += [f"The engine's default `encoder.row_format` at this commit: `{StemConfig().encoder.row_format}`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default="int8,pca192-int8,pca128-int8,pca96-int8,pca64-int8")
    parser.add_argument("--accuracy-formats", default="pca128-int8")
    parser.add_argument("--kgs", default="metaqa,wc2014,demo")
    parser.add_argument("--parts", default="rows,kernel,accuracy")
    parser.add_argument("--label", default="")
    parser.add_argument("--runs-tag", default="", help="eval run folders under runs/compact-rows/<tag>/ (fresh ones: "
                        "float16 and the compact formats evaluated by the same code, one after the other)")
    parser.add_argument("--reuse-runs", action="store_true", help="accuracy: read finished eval folders as they are")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    kgs = [k for k in args.kgs.split(",") if k]
    parts = set(args.parts.split(","))
    stem = "compact-rows" + (f"-{args.label}" if args.label else "")
    previous = RESULTS / f"{stem}.json"
    payload = json.loads(previous.read_text()) if previous.exists() else {}  # parts run separately accumulate
    payload.update({"meta": run_metadata(), "load_before": round(os.getloadavg()[0], 2), "command": (
        "python experiments/compact_rows.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()})
    if not parts & {"rows", "kernel", "block", "bench", "accuracy"}:  # --parts report: render the stored results
        payload = json.loads(previous.read_text())
    command = payload["command"]

    def save() -> None:
        if parts & {"rows", "kernel", "block", "bench", "accuracy"}:
            payload["load_after"] = round(os.getloadavg()[0], 2)
        write_report(RESULTS, stem, payload, _markdown(payload))

    if "rows" in parts:
        payload.setdefault("rows", {})
        for kg in kgs:
            payload["rows"][kg] = {**rows_part(kg, formats), "command": command}
        save()
    if parts & {"kernel", "block"}:
        payload["block"] = block_part(formats)
        payload["block_command"] = command
        save()
    if parts & {"kernel", "bench"}:
        payload["bench_trace"] = bench_trace_part(formats)
        payload["bench_command"] = command
        payload.pop("kernel_command", None)
        save()
    if "accuracy" in parts:
        payload.setdefault("accuracy", {})
        for kg in kgs:
            payload["accuracy"][kg] = accuracy_part(kg, [f for f in args.accuracy_formats.split(",") if f], args.runs_tag,
                                                    args.reuse_runs)
            payload["accuracy"][kg]["command"] = command
            save()
    save()
    print(_markdown(payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

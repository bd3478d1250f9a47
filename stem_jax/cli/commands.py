"""The ``stem-jax`` subcommands: thin glue from flags to the library."""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.cli.args import check_out_path, config_from_args
from stem_jax.cli.distributed import join_processes, shard_folder, share
from stem_jax.cli.engine_args import default_run_folder, embed, load, open_engine
from stem_jax.cli.report import markdown_table, run_metadata, summary_table, write_report
from stem_jax.cli.workers import eval_on_workers, parse_workers
from stem_jax.config import as_dict, config_fields
from stem_jax.data.conditions import KINDS as CONDITION_KINDS
from stem_jax.data.conditions import literal_share, value_conditions
from stem_jax.data.types import Dataset
from stem_jax.engine import collector_paused
from stem_jax.errors import StemError
from stem_jax.eval.run_folder import short_hash
from stem_jax.kg.index import KGIndex
from stem_jax.kg.stats import question_subgraph_sizes
from stem_jax.plan.branches import bound_by_kind, bound_rows, evidence_bounds
from stem_jax.progress import progress


def _number(value: float | int | str) -> str:
    """A count as written in the CLI's tables: whole numbers as such, others with one decimal."""
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:.1f}"
    return str(value)


def _percent(share: float) -> str:
    """A share in [0, 1] as a percentage with one decimal: the one precision of the demo's tables."""
    return f"{100 * share:.1f}"


def _numbers(rows: list[list]) -> list[list[str]]:
    return [[_number(v) for v in row] for row in rows]


def _subgraph_table(report: dict) -> str:
    rows = [
        [key, g["questions"], _number(g["nodes"]["p50"]), _number(g["nodes"]["p90"]), _number(g["nodes"]["max"]),
         _number(g["triples"]["mean"]), _number(g["triples"]["p90"]), _number(g["triples"]["max"]),
         _percent(g["answers_all_inside"]), _percent(g["answers_any_inside"])]
        for key, g in report.items()
    ]
    return markdown_table(
        ["hops", "questions", "nodes p50", "nodes p90", "nodes max", "triples mean", "triples p90", "triples max",
         "all answers inside %", "any answer inside %"],
        rows,
    )


def _gold_path_upper_bound(dataset: Dataset, index: KGIndex) -> dict | None:
    """Follow each question's gold relation path as the data writes it: what a perfect planner and tracer could reach."""
    from stem_jax.eval.bound import data_bound

    return data_bound(dataset.questions, index, dataset.entity_names, excludes_topic=dataset.excludes_topic)


def _engine_conventions(args: argparse.Namespace, config, dataset: Dataset, index: KGIndex) -> tuple[dict, str]:
    """The conventions an eval with these flags would trace with, and where they come from: the dev
    calibration stored beside the KG's embeddings for the configured encoder, else the config."""
    from stem_jax.config import default_cache_dir
    from stem_jax.encoder import get_encoder
    from stem_jax.kg.embeddings import cache_folder
    from stem_jax.methods.stem.calibration import CALIBRATION_FILE, load_calibration_file
    from stem_jax.methods.stem.settings import effective_settings

    root = getattr(args, "cache_dir", None) or default_cache_dir()
    folder = cache_folder(root, dataset.name, index, get_encoder(config.encoder), names=dataset.entity_names)

    class _Located:  # what effective_settings reads from an embedding cache: where its tables live
        class triples:  # noqa: N801
            path = folder / "triples"

    settings = effective_settings(config, _Located)
    source = ", ".join(f"{k}: {v}" for k, v in settings.as_dict()["conventions_source"].items())
    found = load_calibration_file(folder / CALIBRATION_FILE)
    where = found.get("path") if found and settings.calibrated else "config"
    return settings.conventions(), f"{source} ({where})"


def _upper_bound_table(summary: dict) -> str:
    rows = [[g, s["n"], _percent(s["mean"]["hit"]) if s["n"] else "-", _percent(s["mean"]["f1"]) if s["n"] else "-",
             _percent(s["mean"]["exact_set"]) if s["n"] else "-"]
            for g, s in summary["groups"].items()]
    table = markdown_table(["hops", "questions", "any gold reached %", "F1 %", "exact gold set %"], rows)
    skipped = summary.get("overall", {}).get("skipped") or {}
    if skipped:
        table += "\nnot scored: " + ", ".join(f"{reason}: {n}" for reason, n in skipped.items())
    return table


def unscored_lines(questions: list, skipped: dict) -> list[str]:
    """One line per reason questions were not scored, naming a few of them (the questions without gold answers)."""
    lines = []
    for reason, count in sorted(skipped.items()):
        line = f"not scored: {reason}: {count}"
        if reason == "no gold answers":
            qids = [q.qid for q in questions if not any(str(a).strip() for a in q.answers)][:5]
            if qids:
                line += f" ({', '.join(qids)}{', ...' if count > len(qids) else ''}); how to fix: give them answers"
        lines.append(line)
    return lines


# Enumerating every topic's paths and branches is a per-question host loop: split sizes above this print a note.
EVIDENCE_BOUND_MAX_QUESTIONS = 5000


def _value_conditions(dataset: Any, index: Any) -> dict[str, Any] | None:
    """How many questions state a value condition (``data.conditions.value_conditions``) and of which kind, and the
    share of the KG's entity names that read as values; None for a split without questions."""
    if not dataset.questions:
        return None
    names = dataset.entity_names or {}
    kinds = {kind: 0 for kind in CONDITION_KINDS}
    stating = 0
    for question in dataset.questions:
        found = value_conditions(question.text, [names.get(t, t) for t in question.topic_entities])
        stating += bool(found)
        for kind in found:
            kinds[kind] += 1
    return {"questions": len(dataset.questions), "stating": stating, "by_kind": kinds,
            "kg_literal_share": literal_share(names.get(e, e) for e in index.entities)}


def _evidence_bound(dataset: Any, index: Any, max_hops: int = 2) -> dict[str, Any] | None:
    """The evidence bound (``plan.branches.evidence_bounds``) over every question of the split and by kind of
    question (topic entities in the KG: several, one, none found), with one row per question; None when the split
    has no answers to bound or is too large to enumerate here."""
    if not any(q.answers for q in dataset.questions):
        return None
    if len(dataset.questions) > EVIDENCE_BOUND_MAX_QUESTIONS:
        print(f"\nevidence bound: not computed for {len(dataset.questions)} questions (over "
              f"{EVIDENCE_BOUND_MAX_QUESTIONS}); pass --limit to bound a sample")
        return None
    names = dataset.entity_names or {}
    rows = bound_rows(dataset, evidence_bounds(dataset, index=index, max_hops=max_hops),
                      [names.get(e, e) for e in index.entities])
    kinds = bound_by_kind(rows)
    return {"n": kinds["all"]["n"], "max_hops": max_hops, "exact": kinds["all"]["exact"] / 100,
            "best_f1": kinds["all"]["best_f1"] / 100, "hit": kinds["all"]["hit"] / 100, "by_kind": kinds,
            "questions": rows}


def cmd_data_stats(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    dataset, index = load(args, config)
    degree = index.degree
    print(f"degree: mean {degree.mean():.1f}, p99 {np.percentile(degree, 99):.0f}, max {degree.max()} "
          f"({index.entities[int(degree.argmax())]!r}); hubs over hub_cap={config.subgraph.hub_cap}: "
          f"{int((degree > config.subgraph.hub_cap).sum())}")
    with progress(len(dataset.questions), "subgraphs", "q", enabled=not args.no_progress) as bar:
        report = question_subgraph_sizes(dataset.questions, index, config.subgraph, bar)
    print("\nPer-question subgraphs (k-hop neighbourhood of the topic entity, k = hop count; hub cap "
          f"{config.subgraph.hub_cap}):\n")
    print(_subgraph_table(report))
    payload = {"meta": run_metadata(), "dataset": dataset.name, "split": args.split, "config": as_dict(config),
               "skips": dict(dataset.skips.counts), "subgraphs": report}
    upper = _gold_path_upper_bound(dataset, index)
    if upper is not None:
        rewrite = ", the topic dropped from every set as the data's answers never include it" if dataset.excludes_topic else ""
        print(f"\nThe data's own bound (gold relation path walked as written from the topic entity{rewrite}):\n")
        print(_upper_bound_table(upper))
        payload["gold_path_upper_bound"] = upper
        from stem_jax.eval.bound import engine_bound

        conventions, source = _engine_conventions(args, config, dataset, index)
        engine = engine_bound(dataset.questions, index, dataset.entity_names, **conventions)
        print(f"\nBound under the engine's conventions ({', '.join(f'{k}={v}' for k, v in conventions.items())}; "
              f"from {source}):\n")
        print(_upper_bound_table(engine))
        payload["engine_bound"] = {"conventions": conventions, "source": source, **engine}
    evidence = _evidence_bound(dataset, index, config.planner.path_max_hops)
    if evidence is not None:
        print(f"\nEvidence bound (the best schema graph over the KG per question: a main relation path from one "
              f"topic plus a branch from each other topic, {evidence['max_hops']} steps at most "
              f"(--planner.path_max_hops); over every question, a dropped one a miss):\n")
        labels = {"all": "all", "several": "several topic entities", "one": "one topic entity",
                  "none": "no topic entity found (misses)"}
        print(markdown_table(["questions", "n", "exact gold set %", "best F1 %", "any gold answer %"],
                             [[labels[kind], row["n"], round(row["exact"], 1), round(row["best_f1"], 1),
                               round(row["hit"], 1)] for kind, row in evidence["by_kind"].items()]))
        short = [r for r in evidence["questions"] if r["best_f1"] < 1]
        print(f"\n{len(short)} of {evidence['n']} questions have no schema graph that yields exactly their gold "
              "answers (best F1 below 100)" + ("; --out lists each with its best graph" if not args.out else
                                                "; listed with their best graph in the JSON report"))
        payload["evidence_bound"] = evidence
    conditions = _value_conditions(dataset, index)
    if conditions is not None and conditions["stating"]:
        kinds = ", ".join(f"{kind} {n}" for kind, n in conditions["by_kind"].items() if n)
        holds = ("holds almost no literal values, so no schema graph can apply them"
                 if conditions["kg_literal_share"] < 0.01 else "holds literal values")
        print(f"\n{conditions['stating']} of {conditions['questions']} questions state a value condition ({kinds}); "
              f"the KG {holds} ({100 * conditions['kg_literal_share']:.2f}% of entity names read as values)")
        payload["value_conditions"] = conditions
    if args.out:
        paths = write_report(args.out, f"data-stats-{dataset.name}-{args.split}", payload, _subgraph_table(report))
        print(f"\nwrote {paths[0]} and {paths[1]}")
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    dataset, index = load(args, config)
    start = time.perf_counter()
    encoder, _, rows = embed(args, config, dataset, index)
    print(markdown_table(["table", "rows", "dim", "encoded now", "seconds", "strings/s"], _numbers(rows)))
    truncated = getattr(encoder, "truncated", 0)
    if truncated:
        print(f"note: {truncated} string(s) were longer than encoder.max_length={config.encoder.max_length} tokens "
              "and were truncated")
    print(f"index ready in {time.perf_counter() - start:.1f}s")
    return 0


def _anchor_accuracy(dataset: Dataset, index: KGIndex, encoder, entity_table) -> dict[str, float]:
    """Share of questions whose topic mention's nearest entity embedding is the topic entity."""
    names = dataset.entity_names or {}
    mentions = [names.get(q.topic_entities[0], q.topic_entities[0]) for q in dataset.questions]
    queries = encoder.encode(mentions)
    scores = queries @ entity_table.array.astype(np.float32).T
    best = scores.argmax(axis=1)
    truth = np.asarray([index.entity_id(q.topic_entities[0]) for q in dataset.questions])
    return {"top1": float((best == truth).mean()), "questions": len(mentions)}


def cmd_demo(args: argparse.Namespace) -> int:
    """The embedded default end to end: generated KG, index, encoder cache, tracer, metrics, one answered
    question with its chain, and the commands to try next."""
    import dataclasses

    from stem_jax.progress import labelled

    config = config_from_args(args)
    args.dataset, args.planner = "demo", "oracle"
    start = time.perf_counter()
    dataset, index = load(args, config)
    encoder, embeddings, embed_rows = embed(args, config, dataset, index)
    print("\nEncoder cache (all-MiniLM-L6-v2 in Flax, float16 in TensorStore zarr3):\n")
    print(markdown_table(["table", "rows", "dim", "encoded now", "seconds", "strings/s"], _numbers(embed_rows)))
    report = question_subgraph_sizes(dataset.questions, index, config.subgraph)
    print("\nPer-question subgraphs:\n")
    print(_subgraph_table(report))
    anchors = _anchor_accuracy(dataset, index, encoder, embeddings.entities)
    upper = _gold_path_upper_bound(dataset, index)
    out = args.out or Path("runs/demo")
    # the configuration a user should use first; the paper-literal engine second
    variants = {"default": config}
    if config.engine.preset != "paper":
        variants["paper-literal"] = dataclasses.replace(config, engine=dataclasses.replace(config.engine, preset="paper"))
    results, thetas = {}, {}
    for name, variant in variants.items():
        engine = open_engine(args, variant, loaded=(dataset, index, encoder, embeddings, embed_rows),
                             log=lambda _: None)
        folder = out / name.replace(" ", "-")
        with labelled(f"{name} engine"):  # the two runs' bars told apart
            # overwrite: the demo always recomputes, it is the smoke test
            results[name] = engine.evaluate(folder, overwrite=True)
        thetas[name] = engine.method("stem").settings.theta
    print("\nGold-path upper bound (follow the gold relation path; percent):\n")
    print(_upper_bound_table(upper))
    tables = []
    for name, summary in results.items():
        t, e = variants[name].tracer, variants[name].engine
        title = (f"STEM tracer, oracle planner, λ={t.lam}, τ={t.tau}, θ={thetas[name]:g}, N={t.top_n}, "
                 + ("paper-literal engine (--engine.preset=paper: paper T-Score, cosine anchoring, topic kept, "
                    "best-score ranking, the plan's strategy)" if e.preset == "paper" else
                    f"engine defaults (relation bonus {'on' if e.relation_bonus else 'off'}, exact anchoring, "
                    f"topic excluded, beam ranking, strategy {e.strategy})"))
        tables.append(f"{title}; percent:\n\n{summary_table(summary, decimals=1)}")
        print(f"\nResult: {tables[-1]}")
    print("\nRows: questions by hop count (relations between the topic and the answer) and all together. Hit: a gold "
          "answer is among the answers; Hit@1: the first answer is gold; F1/precision/recall: the answer set against "
          "the gold set. The oracle planner plans from each question's gold relation path, so these rows measure "
          "retrieval (anchoring and tracing) with a perfect plan: the upper bound of what a planner can reach.")
    example = _demo_example(dataset, out / "default")
    if example:
        print("\nOne question, as the default engine answered it:\n")
        print("\n".join(f"  {line}" for line in example))
    payload = {"meta": run_metadata(), "config": as_dict(config), "subgraphs": report, "anchoring": anchors,
               "gold_path_upper_bound": upper, "results": results, "seconds": time.perf_counter() - start}
    paths = write_report(out, "demo", payload, "\n\n".join(tables))
    print(f"\nwrote {paths[0]} and {paths[1]}  [{time.perf_counter() - start:.1f}s]")
    question = next((q for q in dataset.questions if q.hops == 2 and q.topic_entities), None)
    asked = (question.text.replace(question.topic_entities[0], f"[{question.topic_entities[0]}]", 1)
             if question else "which actors appear in [The Rimloumjaith]")
    print(f"\nNext: ask a question yourself (the pattern planner, trained on first use, plans from its words):\n"
          f"  stem-jax ask \"{asked}\"\n"
          "or bring your own KG (triples.tsv and test.jsonl in a folder; docs/your-own-kg.md):\n"
          "  stem-jax eval --dataset files --data-dir DIR --planner oracle")
    return 0


def _demo_example(dataset: Dataset, folder: Path) -> list[str]:
    """A 2-hop question of the demo's run folder: its text, answers, gold and the chain behind the first answer."""
    import json

    from stem_jax.answer.chains import answer_chains

    by_qid = {q.qid: q for q in dataset.questions}
    try:
        lines = (folder / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        record = json.loads(line)
        question = by_qid.get(record.get("id"))
        if question is None or question.hops != 2 or not record.get("prediction"):
            continue
        names = dataset.entity_names or {}
        topics = [names.get(t, t) for t in question.topic_entities]
        chains = answer_chains([tuple(t) for t in record.get("evidence", [])], topics, record["prediction"][:1])
        shown = ", ".join(record["prediction"][:5]) + (" ..." if len(record["prediction"]) > 5 else "")
        return [f"question: {record['question']}   ({question.qid})", f"answer:   {shown}",
                f"gold:     {', '.join(record.get('ground_truth', []))}",
                f"why:      {chains[0] if chains else '(no chain in the evidence)'}"]
    return []


def cmd_config(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    print(markdown_table(["option", "value"], [[f"--{name}", str(value)] for name, value, _ in config_fields(config)]))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Full-split evaluation with a retrieval method and a planner, resumable, into --out."""
    workers = parse_workers(getattr(args, "workers", 1))
    if workers > 1:
        return eval_on_workers(args, workers, _eval_share)
    _eval_share(args)
    return 0


def _eval_share(args: argparse.Namespace) -> Path:
    """Evaluate this process's share of the run (all of it for one process); returns the run folder."""
    config = config_from_args(args)
    check_out_path(args.out)
    start = time.perf_counter()
    pid, processes = join_processes(args)  # with N processes, each evaluates every N-th question
    with collector_paused():
        engine = open_engine(args, config, method_options=method_options(args))
    method = getattr(args, "method", "stem")
    label = engine.planner_spec.label if method != "scr" else "scr"
    folder = f"{label if method == 'stem' else f'{method}-{label}'}-{short_hash(engine.results_fingerprint(method))}"
    out = args.out or default_run_folder(args, engine.dataset.name, folder)
    questions, run_folder = None, out
    if processes > 1:  # into its own resumable shard folder; `stem-jax score --out` merges them
        questions, out = share(engine.dataset.questions, pid, processes), shard_folder(out, pid, processes)
    # writes predictions.jsonl, fingerprint.json, metrics.json and metrics.md, as the API does
    summary = engine.evaluate(out, method=method, questions=questions, overwrite=getattr(args, "overwrite", False),
                              overlap=getattr(args, "overlap", 1))
    wall = time.perf_counter() - start
    table = summary_table(summary)
    print(f"\n{engine.dataset.name}/{args.split}, method {method}, planner {label} (percent; F1/precision/recall are "
          "strict set metrics over normalised entity names):\n")
    print(table)
    if summary.get("plan_skips"):
        print(f"runs not traced: {summary['plan_skips']}")
    for line in unscored_lines(questions or engine.dataset.questions, (summary.get("overall") or {}).get("skipped") or {}):
        print(line)
    print(f"overflow (matches dropped by capacities) per hop: {summary['overflow_total']}")
    print(f"\nwrote {out / 'predictions.jsonl'}, {out / 'metrics.json'} and {out / 'metrics.md'}  [{wall:.1f}s]")
    return Path(run_folder)


def method_options(args: argparse.Namespace) -> dict[str, dict]:
    """Per-method options from flags (checkpoints of learned methods)."""
    options: dict[str, dict] = {}
    if getattr(args, "scr_checkpoint", None) is not None:
        options["scr"] = {"checkpoint": args.scr_checkpoint}
    return options


def cmd_ask(args: argparse.Namespace) -> int:
    """Answer one question (or several) with a loaded engine; print answers, evidence chains and timings.

    Exit status 1 when a question could not be planned (its ``no answer:`` line says why), else 0."""
    questions = list(args.question)
    _check_quoted(questions)
    config = config_from_args(args)
    engine = open_engine(args, config, method_options=method_options(args))
    if args.warm:  # the first call compiles; time the second
        engine.retrieve(questions, method=args.method)
    answers = engine.retrieve(questions, method=args.method)
    for answer in answers:
        print(f"\nQ: {answer.question.text}")
        if answer.topic_link:
            link = answer.topic_link
            print(f"topic: {', '.join(link['entities'])} (mention {', '.join(map(repr, link['mentions']))}, "
                  f"{', '.join(link['match'])} match)")
        plans = answer.record.get("plans")
        if plans:
            print("plans: " + " || ".join(plans[: args.top]))
        condition = answer.record.get("value_condition")
        if condition:
            print(f"value condition: {condition['words']!r} through {condition['relation']}: "
                  + (f"{condition['dropped']} answer(s) that fail it dropped" if condition["applied"]
                     else "no answer meets it, so the answers are left as they are"))
        if not answer.answers:
            print(f"no answer: {answer.reason}" if answer.reason else "no answer found")
        elif answer.reason:  # answers that do not follow the plan (a relation that matched no edge)
            print(f"note: {answer.reason}")
        for rank, (name, score) in enumerate(answer.answers[: args.top], 1):
            print(f"  {rank:2d}. {name}  ({score:.3f})")
        if answer.chains:
            print("evidence chains:")
            for chain in answer.chains[: args.top]:
                print(f"  {chain}")
        timing = ", ".join(f"{k} {v:.1f}" for k, v in answer.stage_ms.items())
        print(f"ms: {timing}" + ("" if args.warm else "  (this process's first call: compiling included; --warm "
                                                      "times a second call)"))
    # a question the planner could not plan at all (the oracle without a gold path) is a failure, not
    # an empty answer: scripts see it in the exit status
    return 1 if any(answer.reason and not answer.answers for answer in answers) else 0


def _check_quoted(questions: list[str]) -> None:
    """Several positional words, some of them single words, are one question typed without quotes."""
    if len(questions) > 1 and any(len(q.split()) == 1 for q in questions):
        joined = " ".join(questions)
        raise StemError(f"ask got {len(questions)} questions ({', '.join(map(repr, questions[:4]))}"
                        f"{', ...' if len(questions) > 4 else ''}): the question's words are separate arguments\n"
                        f"  how to fix: quote the question, e.g. stem-jax ask {shlex.quote(joined)} (several "
                        "questions: quote each one)")


def cmd_bench_trace(args: argparse.Namespace) -> int:
    """JAX tracer vs reference tracer on the same runs; writes experiments/results/bench-trace-*."""
    from stem_jax.bench.trace import bench_trace

    config = config_from_args(args)
    check_out_path(args.out)
    args.planner = "oracle"  # the tracers are compared on gold plans
    engine = open_engine(args, config)
    dataset = engine.dataset
    stride = max(1, len(dataset.questions) // args.num_questions)  # evenly spread over the hops
    questions = dataset.questions[::stride][: args.num_questions]
    method = engine.method("stem")
    method.prepare(questions, show_progress=not args.no_progress)  # plans, grounds and embeds the schema texts
    runs = [run for question in questions for run in method.runs[question.qid]]
    pipeline = method.resources
    result = bench_trace(pipeline, runs, repeats=args.repeats)
    rows = [[k, round(v, 4) if isinstance(v, float) else v] for k, v in result.items() if not isinstance(v, (dict, list))]
    table = markdown_table(["measure", "value"], rows)
    print(table)
    print(f"compiles: {result['compiles']}")
    meta = run_metadata()
    payload = {"meta": meta, "command": "stem-jax " + " ".join(args.argv), "dataset": dataset.name,
               "split": args.split, "hops": list(args.hops), "questions": len(questions), "config": as_dict(config),
               "effective": {**pipeline.settings.as_dict(), "hyper": pipeline.hyper.as_dict()}, **result}
    bonus = "-relation-bonus" if config.engine.relation_bonus else ""
    name = f"bench-trace-{dataset.name}-{'-'.join(map(str, args.hops))}hop-{len(questions)}q{bonus}-{meta['backend']}"
    out = Path("experiments/results") if args.record else (args.out or Path("runs/bench"))
    paths = write_report(out, name, payload, f"Command: `{payload['command']}`\n\n{table}")
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0

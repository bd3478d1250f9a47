"""Strategy ablation (paper Table 11 analogue): greedy only, threshold only, adaptive (the planner's choice).

Command (repo root; needs the MetaQA index):

    STEM_DATA_DIR=../shared/data nice python experiments/paper_strategy.py --subset 200

MetaQA-partial test, stratified ``--subset`` questions per hop, oracle planner, no guidance, engine
defaults otherwise. Greedy only: every schema graph traced with Precision (Algorithm 2, one binding
per node); threshold only: every one with Breadth (T >= θ, ``--engine.strategy=breadth``); adaptive:
the planner's strategy (``--engine.strategy=planner``). Evaluated through ``stem_jax.Engine`` into
runs/paper/strategy-*/ (resumable). Writes experiments/results/paper-strategy-metaqa.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses

from paper_common import COLUMNS, RUNS, Base, metric_rows, replace_engine, save, table


def force_precision(method, questions) -> None:
    """Prepare (plan) the questions, then mark every run's schema graph Precision."""
    method.prepare(questions, show_progress=False)
    for runs in method.runs.values():
        for run in runs:
            schema = dataclasses.replace(run.plan.schema, strategy="Precision")
            run.plan = dataclasses.replace(run.plan, schema=schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=200)
    args = parser.parse_args(argv)
    base = Base(subset=args.subset)
    variants = {"greedy only (Precision)": "planner", "threshold only (Breadth)": "breadth",
                "adaptive (planner's strategy)": "planner"}
    results, rows = {}, []
    for name, mode in variants.items():
        engine = base.engine("oracle", cfg=replace_engine(base.config, strategy=mode))
        if name.startswith("greedy"):
            force_precision(engine.method("stem"), engine.dataset.questions)
        out = RUNS / f"strategy-{name.split()[0]}-s{args.subset}"
        summary = engine.evaluate(out, overwrite=True)
        results[name] = {"run": str(out), **summary}
        rows += metric_rows(summary, COLUMNS, [name])
    markdown = table(["variant", "hops", "questions"] + [t for _, t in COLUMNS], rows)
    print(markdown)
    save("paper-strategy-metaqa", {"subset_per_hop": args.subset, "results": results},
         f"MetaQA-partial test, stratified {args.subset} per hop, oracle planner, no guidance (percent)\n\n{markdown}",
         f"python experiments/paper_strategy.py --subset {args.subset}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

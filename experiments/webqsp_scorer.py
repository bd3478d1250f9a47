"""Which beams should the answer scorer learn from? Candidates from several beam sources, scorers trained on each mix,
all measured on webqsp-r dev (every question; the test split is never read).

    STEM_DATA_DIR=../shared/data python experiments/webqsp_scorer.py [--folds 4] [--variants in,oof,oof+oracle]

Beam sources for the training questions (the planner's own held-out 10% is never trained on; it chooses each
scorer's temperature and cut, planned by the stored planner, which never saw them):

* ``in``: the stored pattern planner's beams for its own training questions (what train-planner used to do);
* ``oof``: out-of-sample beams, each fold of the training questions planned by a planner trained on the other folds
  (``stem_jax.answer.training.out_of_sample_candidates``, which train-planner calls only with ``folds`` > 1);
* ``oracle``: the gold paths; ``rog``: RoG's three LLM plans that the training file carries (``rog_plans``).

Each scorer is measured in-process on dev candidates from the default planner (beam 4 and 8), gold plans and RoG's
plans: Hit / Hit@1 / F1 over all 163 questions, gold matched by KG id or name (the F1 here counts only gold answers
the KG has, so it reads higher than eval's). Writes ``experiments/results/webqsp-scorer.{json,md}``; candidates are
cached under ``runs/webqsp-scorer`` (delete it after changing the features). Needs `stem-jax index` and
`stem-jax train-planner` on webqsp-r. Tens of minutes on a CPU, most of it the fold planners.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stem_jax.answer.features import NUMERIC, NUMERIC_V1, CandidateFeaturizer, TypeVocabulary  # noqa: E402
from stem_jax.answer.scorer import _subset, concat_candidates, set_metrics, train_answer_scorer  # noqa: E402
from stem_jax.answer.training import collect_candidates, gold_entities, out_of_sample_candidates  # noqa: E402
from stem_jax.config import StemConfig, apply_overrides, default_cache_dir, default_data_dir  # noqa: E402
from stem_jax.data.registry import DatasetSpec  # noqa: E402
from stem_jax.data.splits import qid_bucket  # noqa: E402
from stem_jax.engine import Engine  # noqa: E402
from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402
from stem_jax.plan.factory import PlannerSpec  # noqa: E402

FEATURES = {"v1": NUMERIC_V1, "all": NUMERIC}
DEV_SOURCES = ("pattern", "pattern-b8", "oracle", "rog")


class Sources:
    def __init__(self, data: Path, cache: Path, runs: Path) -> None:
        self.data, self.cache, self.runs = data, cache, runs
        runs.mkdir(parents=True, exist_ok=True)

    def engine(self, split: str, planner: PlannerSpec, overrides: dict | None = None) -> Engine:
        config = apply_overrides(StemConfig(), {"engine.answer_scorer": "off", **(overrides or {})})
        return Engine.open(DatasetSpec(name="files", data_dir=self.data, split=split), config=config, planner=planner,
                           cache_dir=self.cache)

    def cached(self, name: str, make) -> dict:
        """The candidate source ``name`` pickled under ``runs``; else ``make()`` = (engine, candidates, planned
        questions), stored there with the questions' gold entities."""
        path = self.runs / f"{name}.pkl"
        if path.exists():
            return pickle.loads(path.read_bytes())
        began = time.perf_counter()
        engine, candidates, planned = make()
        result = {"cands": candidates, "qids": [q.qid for q in planned],
                  "gold": gold_entities(planned, engine.index.entities, engine.dataset.entity_names),
                  "n_all": len(engine.dataset.questions) + len(engine.dataset.dropped)}
        path.write_bytes(pickle.dumps(result))
        print(f"{name}: {len(planned)} questions [{time.perf_counter() - began:.0f}s]", flush=True)
        return result

    def collect(self, name: str, split: str, planner: PlannerSpec, keep=None, overrides: dict | None = None) -> dict:
        def make() -> tuple:
            engine = self.engine(split, planner, overrides)
            featurizer = CandidateFeaturizer(engine.index, engine.dataset.entity_names, TypeVocabulary.of(engine.index),
                                             engine.encoder.encode)
            questions = [q for q in engine.dataset.questions if keep is None or keep(q.qid)]
            return (engine, *collect_candidates(engine.method("stem"), questions, featurizer))

        return self.cached(name, make)

    def out_of_sample(self, folds: int, keep) -> dict:
        """Candidates for the training questions ``keep`` accepts from ``folds`` fold planners, each planning the
        questions it did not train on (:func:`stem_jax.answer.training.out_of_sample_candidates`, as train-planner
        does with ``folds`` > 1; planners trained with the default config in a scratch folder under ``runs``)."""
        import tempfile

        def make() -> tuple:
            engine = self.engine("train", PlannerSpec("oracle"))  # its dataset, index and encoder; no planner
            config = apply_overrides(StemConfig(), {"engine.answer_scorer": "off"})
            spec = DatasetSpec(name="files", data_dir=self.data, split="train")
            questions = [q for q in engine.dataset.questions if keep(q.qid)]
            with tempfile.TemporaryDirectory(prefix="folds-", dir=self.runs) as work:
                return (engine, *out_of_sample_candidates(engine, spec, config, questions, folds, Path(work),
                                                          log=lambda line: print(line, flush=True)))

        return self.cached(f"train-pattern-oof-k{folds}", make)


def pick(source: dict, keep) -> tuple:
    rows = np.asarray([i for i, q in enumerate(source["qids"]) if keep(q)], np.int64)
    return _subset(source["cands"], rows), [source["gold"][i] for i in rows]


def merged(parts: list[tuple]) -> tuple:
    return concat_candidates([p[0] for p in parts]), [g for p in parts for g in p[1]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--variants", default="in,oof,oof+oracle,oof+oracle+rog")
    parser.add_argument("--features", default="v1,all")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "webqsp-scorer")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    if default_data_dir() is None:
        raise SystemExit("webqsp-r needs STEM_DATA_DIR (the folder holding webqsp-r/)")
    data = default_data_dir() / "webqsp-r"
    cache = default_cache_dir()
    src = Sources(data, cache, args.runs)
    dev = {"pattern": src.collect("dev-pattern", "dev", PlannerSpec("pattern")),
           "pattern-b8": src.collect("dev-pattern-b8", "dev", PlannerSpec("pattern"), overrides={"planner.beam": 8}),
           "oracle": src.collect("dev-oracle", "dev", PlannerSpec("oracle")),
           "rog": src.collect("dev-rog", "dev", PlannerSpec(plans_file=data / "dev.jsonl"))}
    def held_out(q: str) -> bool:
        return qid_bucket(q) < 0.1  # train-planner's held-out questions

    def trained_on(q: str) -> bool:
        return not held_out(q)

    pattern_in = src.collect("train-pattern-in", "train", PlannerSpec("pattern"))
    held = pick(pattern_in, held_out)
    wanted = {s for v in args.variants.split(",") for s in v.split("+")}
    train = {"in": pick(pattern_in, trained_on)}
    if "oof" in wanted:
        train["oof"] = pick(src.out_of_sample(args.folds, trained_on), trained_on)
    if "oracle" in wanted:
        train["oracle"] = pick(src.collect("train-oracle", "train", PlannerSpec("oracle")), trained_on)
    if "rog" in wanted:
        train["rog"] = pick(src.collect("train-rog", "train", PlannerSpec(plans_file=data / "train.jsonl")), trained_on)
    vocabulary = TypeVocabulary.of(src.engine("dev", PlannerSpec("oracle")).index)
    rows, table = [], []
    for variant in args.variants.split(","):
        cands, gold = merged([train[s] for s in variant.split("+")])
        for features in args.features.split(","):
            scorer = train_answer_scorer(cands, gold, held[0], held[1], vocabulary, encoder_name="minilm",
                                         features=FEATURES[features], log=lambda _: None)
            row = {"variant": variant, "features": features, "temperature": scorer.temperature, "cut": scorer.cut,
                   "held_out": scorer.report["held_out_scorer"], "dev": {}}
            for name, source in dev.items():
                m = set_metrics(scorer.rerank(source["cands"]), source["gold"])
                share = len(source["gold"]) / source["n_all"]  # questions without candidates are misses
                row["dev"][name] = {k: 100 * v * share for k, v in m.items()}
            rows.append(row)
            table.append([variant, features, f"{scorer.temperature:g} / {scorer.cut:g}",
                          f"{100 * row['held_out']['hit_at_1']:.1f}",
                          *[f"{row['dev'][n]['hit']:.1f} / {row['dev'][n]['hit_at_1']:.1f} / {row['dev'][n]['f1']:.1f}"
                            for n in DEV_SOURCES]])
            print(" | ".join(map(str, table[-1])), flush=True)
    md = ("webqsp-r dev (all 163 questions), answer scorers trained on different beam sources; Hit / Hit@1 / F1 in "
          "percent, in-process (F1 over the gold answers the KG has). Held-out: train-planner's 10% of the training "
          f"questions, planned by the stored planner. Folds: {args.folds}.\n\n"
          + markdown_table(["training beams", "features", "T / cut", "held-out Hit@1",
                            *[f"dev {n}" for n in DEV_SOURCES]], table))
    write_report(args.out, "webqsp-scorer", {"meta": run_metadata(), "folds": args.folds, "rows": rows}, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

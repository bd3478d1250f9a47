"""Training the pattern planner from a dataset's training split: the library side of ``stem-jax train-planner``.

:func:`train_default_planner` is what the :class:`~stem_jax.engine.Engine` runs on first use of the
demo KG (whose planner trains in seconds), so ``stem-jax ask ... --dataset demo`` and
``Engine.open("demo").ask(...)`` answer on a fresh checkout; it writes the planner where
``stem-jax train-planner`` would, with the same defaults, so either one can replace the other.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.config import MAX_PATH_HOPS, StemConfig, field_problem
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.data.types import Dataset
from stem_jax.errors import StemError

# datasets whose pattern planner trains in seconds on a laptop: trained on first use instead of
# asking the user to run `stem-jax train-planner` (measured on the demo KG: 4.5 s of training)
AUTO_TRAIN_DATASETS = frozenset({"demo"})


VAL_FRACTION = 0.1  # of the training split, held out (by question id) to choose and calibrate planners on


def masked_question_embedder(cache_root: Path, dataset_name: str, encoder: Any, config: StemConfig, *,
                             progress: bool = False) -> Callable[[list[str]], np.ndarray]:
    """The planners' text embedder: float32 [N, d] vectors of ``texts`` (masked questions), kept in the cache
    under ``<cache_root>/<dataset>/question-texts`` keyed by the texts, so training again reads them back."""
    from stem_jax.encoder.cache import open_or_build, texts_fingerprint

    folder = Path(cache_root) / dataset_name / "question-texts"

    def embed(texts: list[str]) -> np.ndarray:
        table = open_or_build(folder / f"masked-{texts_fingerprint(texts)[:16]}.zarr", texts, encoder,
                              config.encoder.chunk_rows, progress=progress, desc="encode questions")
        return table.array.astype(np.float32)

    return embed


def planner_candidates(templates: Any, ranker: Any, weights: Sequence[float], beam: int, side: str = "",
                       ) -> dict[str, Any]:
    """The planners train-planner compares for one path ranker: ``paths<side>`` (the ranker alone) and
    ``both<side>@<w>`` (mixed with the template classifier at each of ``weights``), each with a beam of ``beam``."""
    from stem_jax.plan.mixed import MixedPlanner

    ranker.beam = beam
    return {f"paths{side}": ranker,
            **{f"both{side}@{w:g}": MixedPlanner(templates, ranker, weight=w, beam=beam) for w in weights}}


def train_and_save(dataset: Dataset, split: str, config: StemConfig, out: Path, *, cache_root: Path,
                   encoder: Any = None, val_fraction: float = VAL_FRACTION, epochs: int | None = None,
                   show_progress: bool = False, log: Callable[[str], None] = print,
                   report: dict[str, Any] | None = None) -> Any:
    """Train the pattern planner on ``dataset``'s questions (``split`` names them in the report), holding
    ``out`` with :func:`~stem_jax.plan.pattern.planner_lock` from before training (a concurrent writer is a
    :class:`StemError` naming its pid), and save it there atomically. ``report`` adds keys to
    ``planner.report``. The one training path of ``stem-jax train-planner`` and of first use."""
    from stem_jax.data.splits import hash_split
    from stem_jax.encoder import get_encoder
    from stem_jax.plan.pattern import TrainConfig, planner_lock, train_pattern_planner

    train, val = hash_split(dataset.questions, val_fraction)
    encoder = encoder or get_encoder(config.encoder)
    if few_shot_applies(dataset, train, val, encoder):
        with planner_lock(Path(out)):
            ranker = train_few_shot(dataset, train, val, config, encoder=encoder,
                                    embed=masked_question_embedder(cache_root, dataset.name, encoder, config,
                                                                   progress=show_progress), log=log)
            ranker.report.update({"dataset": dataset.name, "split": split, **(report or {})})
            save_few_shot(ranker, Path(out))
        return ranker
    train_config = TrainConfig(seed=config.seed)
    if epochs is not None:
        train_config = dataclasses.replace(train_config, epochs=epochs)
    embed = masked_question_embedder(cache_root, dataset.name, encoder, config, progress=show_progress)
    with planner_lock(Path(out)):
        began = time.perf_counter()
        planner = train_pattern_planner(train, val, encoder, names=dataset.entity_names, config=train_config,
                                        embed=embed, log=log)
        selection = select_planner(dataset, train, val, planner, config, Path(out), encoder=encoder, embed=embed,
                                   log=log)
        selection["branches"] = train_branches(dataset, train, val, planner, config, Path(out),
                                               mode=selection.get("mode"), encoder=encoder, log=log)
        planner.report.update({"dataset": dataset.name, "split": split, "val_fraction": val_fraction,
                               "seconds": time.perf_counter() - began, "selection": selection, **(report or {})})
        planner.save(Path(out))
    return planner


# fewer training questions with a gold plan than this cannot train the template classifier: the pretrained path
# planner is adapted to the questions' answers instead (few-shot)
FEW_SHOT_GOLD_PLANS = 50


def few_shot_applies(dataset: Dataset, train: list, val: list, encoder: Any) -> bool:
    """Whether ``train-planner`` adapts the pretrained path planner instead of training the template classifier
    and a ranker from scratch: the pretrained model is installed and reads this encoder's vectors, and there are too
    few gold plans for templates. A small KG with enough gold plans keeps its template classifier: on templated
    questions it learns from a few dozen plans what the pretrained ranker does not (the zero-shot table in
    docs/your-own-kg.md)."""
    from stem_jax.plan import pretrained
    from stem_jax.plan.oracle import gold_paths

    if not pretrained.available() or pretrained.shipped_encoder() != getattr(encoder, "name", None):
        return False
    with_plans = sum(1 for q in train if gold_paths(q).paths)
    return with_plans < FEW_SHOT_GOLD_PLANS


# fewer held-out questions with a right path than this keep the pretrained planner's temperature (few-shot)
MIN_TEMPERATURE_QUESTIONS = 20


def train_few_shot(dataset: Dataset, train: list, val: list, config: StemConfig, *, encoder: Any,
                   embed: Callable[[list[str]], np.ndarray], log: Callable[[str], None] = print,
                   base: Path | None = None) -> Any:
    """The pretrained path planner (or the one saved in ``base``) adapted to ``dataset``'s questions: trained from
    its parameters on the questions' answers (each candidate path's target is the F1 of its end set; a gold path,
    where given, counts as right), its temperature fitted on ``val`` when there is one. Returns the adapted
    PathRanker. The temperature is refitted only when ``val`` has at least :data:`MIN_TEMPERATURE_QUESTIONS`
    questions with a right candidate path."""
    from stem_jax.kg.index import build_index
    from stem_jax.plan import pretrained
    from stem_jax.plan.path_ranker import PathRanker, train_path_ranker

    base = PathRanker.load(base or pretrained.model_folder())
    index = build_index(dataset.triples)
    catalog = pretrained.make_catalog(index, dataset.entity_names, base.config)
    ranker = train_path_ranker(train, val, index, encoder_name=encoder.name, embed=embed, names=dataset.entity_names,
                               extra_pairs=extra_pairs(dataset) if config.planner.path_pairs else (),
                               config=dataclasses.replace(base.config, seed=config.seed), log=log, catalog=catalog,
                               init=base.params)
    if ranker.report.get("val", {}).get("with_right_path", 0) < MIN_TEMPERATURE_QUESTIONS:
        # a temperature fitted on a handful of held-out questions is noise that reweighs the beam's answers: the
        # pretrained one, fitted on hundreds, is kept
        ranker.temperature = base.temperature
    ranker.report.update(pretrained_from=pretrained.describe(base), few_shot=True)
    return ranker


def save_few_shot(ranker: Any, out: Path, base: Path | None = None) -> None:
    """Save an adapted path planner as ``out``'s only planner (a template classifier of an earlier training is
    removed: its planner.json would otherwise be loaded instead), with the constraint-branch model of the planner
    it was adapted from (``base``, default the shipped one) when that has one: a few questions with answers adapt
    the path ranker, not the branch model."""
    import shutil

    from stem_jax.plan import pretrained
    from stem_jax.plan.branch_planner import BRANCHES_FOLDER
    from stem_jax.plan.pattern import PLANNER_FILE

    (Path(out) / PLANNER_FILE).unlink(missing_ok=True)
    for name in ("paths", BRANCHES_FOLDER):
        shutil.rmtree(Path(out) / name, ignore_errors=True)
    ranker.save(Path(out))
    branches = Path(base or pretrained.model_folder()) / BRANCHES_FOLDER
    if branches.is_dir():
        shutil.copytree(branches, Path(out) / BRANCHES_FOLDER)


def train_branches(dataset: Dataset, train: list, val: list, planner: Any, config: StemConfig, out: Path, *,
                   mode: str | None, encoder: Any, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Where the path ranker plans (the chosen ``mode`` is not ``templates``) and ``config.planner.branches`` is
    not ``off``: train the constraint-branch model (:func:`~stem_jax.plan.branch_planner.train_branch_model`) and
    store it in ``out/branches`` when it raises held-out answer F1; a stale one is removed otherwise. Returns what
    was done, for the planner's report."""
    import shutil

    from stem_jax.kg.mediators import mediator_mask
    from stem_jax.plan.branch_planner import BRANCHES_FOLDER, train_branch_model
    from stem_jax.plan.relation_paths import PathCatalog

    folder = Path(out) / BRANCHES_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    if config.planner.branches == "off":
        return {"trained": False, "reason": "planner.branches=off"}
    index = getattr(planner, "index", None)
    if index is None or mode in (None, "templates"):
        return {"trained": False, "reason": "the template classifier plans this KG"}
    catalog = PathCatalog(index, mediators=mediator_mask(index.entities, dataset.entity_names))
    model = train_branch_model(train, val, index, catalog, encoder.encode, dataset.entity_names, log=log)
    if model is None:
        return {"trained": False, "reason": "too few questions with a second topic, or no held-out F1 gain"}
    model.save(folder)
    return {"trained": True, "threshold": model.threshold, **model.report}


# a template classifier that plans this share of held-out questions right needs no path ranker (templated data:
# MetaQA, WorldCup2014, the demo KG, where it sits at the data's bound)
TEMPLATES_SUFFICE = 0.9
MIN_HELD_OUT = 20  # fewer held-out questions than this cannot tell the planners apart: keep the templates
MIX_WEIGHTS = (0.3, 0.5, 0.7)  # the templates' shares of a mixed beam that train-planner compares


def select_planner(dataset: Dataset, train: list, val: list, planner: Any, config: StemConfig, out: Path, *,
                   encoder: Any, embed: Callable[[list[str]], np.ndarray],
                   log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train the KG-constrained path ranker beside the template classifier where it may help, and choose
    which of the two ``--planner pattern`` runs on this KG by the held-out questions (``val``).
    ``config.planner.path_question``: the ranker's question side, ``frozen`` (the sentence encoder's vectors),
    ``tuned`` (its top ``path_tune_layers`` layers fine-tuned with the ranker) or ``auto`` (both trained, the tuned
    one's candidates paths+tuned and both+tuned@w compared with the rest); the chosen candidate's ranker is saved.

    ``config.planner.paths``: ``templates`` never trains the ranker, ``paths`` always uses it, ``auto``
    trains it when the templates' held-out top-1 accuracy is below :data:`TEMPLATES_SUFFICE` and then keeps
    the planner (templates, paths, or both mixed at one of :data:`MIX_WEIGHTS`) whose beam, walked exactly from
    the topic, ranks a gold answer first for more held-out questions (:func:`beam_answer_hit`; ties keep the
    simpler planner). With ``config.planner.path_hops`` ``auto`` a second ranker, of paths one step longer than
    ``path_max_hops``, joins the comparison (``paths+3steps``, ``both+3steps@w``), so the held-out questions also
    choose the path length. Returns the choice and the measurements behind it."""
    from stem_jax.kg.index import build_index
    from stem_jax.plan.path_ranker import PATHS_FOLDER, PathRankerConfig, train_path_ranker

    mode = config.planner.paths
    template_top1 = float(planner.report.get("mlp", {}).get("template", {}).get("top1", 0.0) or 0.0)
    selection: dict[str, Any] = {"requested": mode, "template_val_top1": template_top1}

    def templates(reason: str) -> dict[str, Any]:
        import shutil

        shutil.rmtree(out / PATHS_FOLDER, ignore_errors=True)  # a ranker of an earlier training is not this one's
        selection.update(mode="templates", reason=reason)
        log(f"planner choice: templates ({reason})")
        return selection

    keep = None
    if mode == "templates":
        keep = "templates requested"
    elif mode == "auto" and len(val) < MIN_HELD_OUT:
        keep = f"{len(val)} held-out questions are too few to choose on (at least {MIN_HELD_OUT})"
    elif mode == "auto" and template_top1 >= TEMPLATES_SUFFICE:
        keep = f"template top-1 on held-out questions {template_top1:.3f} >= {TEMPLATES_SUFFICE}"
    if keep is not None:
        return templates(keep)
    index = build_index(dataset.triples)
    # every ranker compared below learns from the same questions and pairs; only its config (and side) differs
    train_ranker = functools.partial(train_path_ranker, train, val, index, encoder_name=encoder.name, embed=embed,
                                     names=dataset.entity_names, log=log,
                                     extra_pairs=extra_pairs(dataset) if config.planner.path_pairs else ())
    try:
        ranker = train_ranker(config=PathRankerConfig(seed=config.seed, max_hops=config.planner.path_max_hops))
    except StemError as err:
        if mode == "paths":
            raise
        return templates(f"no path ranker: {str(err).splitlines()[0]}")
    planner.index = index
    rankers = {"": ranker}
    longer = config.planner.path_max_hops + 1
    if config.planner.path_hops == "auto" and longer <= MAX_PATH_HOPS:  # the held-out questions choose the length
        try:
            rankers[f"+{longer}steps"] = train_ranker(config=dataclasses.replace(ranker.config, max_hops=longer))
        except StemError as err:
            log(f"planner choice: no {longer}-step path ranker ({str(err).splitlines()[0]})")
    question_side = config.planner.path_question
    if problem := field_problem("planner.path_question", question_side):
        raise StemError(problem)
    tune = config.planner.path_tune_layers
    if question_side != "frozen":  # a ranker whose question side is the encoder's top layers fine-tuned
        try:
            tuned = train_ranker(config=dataclasses.replace(ranker.config, tune_layers=tune), catalog=ranker.catalog,
                                 encoder=encoder)
            rankers = {"+tuned": tuned} if question_side == "tuned" else {**rankers, "+tuned": tuned}
        except StemError as err:
            if question_side == "tuned":
                raise
            log(f"planner choice: no tuned question side ({str(err).splitlines()[0]})")
    weights = [config.planner.mix_weight] if config.planner.mix_weight else list(MIX_WEIGHTS)
    candidates: dict[str, Any] = {"templates": planner}
    for side, r in rankers.items():
        candidates.update(planner_candidates(planner, r, weights, config.planner.beam, side))
    scores = {name: beam_answer_hit(p, val, index) for name, p in candidates.items()}
    allowed = [n for n in scores if mode == "auto" or n.split("@")[0].partition("+")[0] == mode]
    best = max(allowed, key=lambda n: (scores[n], -list(scores).index(n)))  # ties: the simpler planner
    chosen, _, side = best.split("@")[0].partition("+")
    side = f"+{side}" if side else "+tuned" if question_side == "tuned" else ""
    rankers[side].save(out / PATHS_FOLDER)
    selection["question_side"] = "tuned" if side == "+tuned" else "frozen"
    selection["path_max_hops"] = rankers[side].config.max_hops
    if side == "+tuned":
        selection["tune_layers"] = tune
    selection.update(mode=chosen, val_questions=len(val), beam_answer_hit=scores,
                     reason=f"{mode} requested" if mode != "auto" else
                     "best answer of the beam, walked exactly, is right: " +
                     ", ".join(f"{k} {v:.3f}" for k, v in scores.items()))
    if chosen == "both":
        selection["mix_weight"] = float(best.split("@")[1])
    log(f"planner choice: {chosen} ({selection['reason']}, {len(val)} held-out questions)")
    return selection


def beam_answer_hit(planner: Any, questions: list, index: Any) -> float:
    """Share of ``questions`` whose best answer is right when each planned schema, walked exactly from the topic,
    gives every entity it reaches the plan's probability, summed over the beam. A cheap proxy for Hit@1 on
    held-out questions, before any embedding exists: no tracer, so no similarity matches, gap or cut."""
    from stem_jax.kg.paths import walk_relation_path
    from stem_jax.plan.schema_paths import chain_path

    if not questions:
        return 0.0
    hits = 0
    for question, beam in zip(questions, planner.plan_batch(questions), strict=True):
        topic = index.entity_ids.get(question.topic_entities[0]) if question.topic_entities else None
        if topic is None:
            continue
        support: dict[int, float] = {}
        for entry in beam:
            path = chain_path(entry.schema)
            if path is None:
                continue
            reached, _ = walk_relation_path(index, topic, path)
            for entity in reached.tolist():
                if entity != topic:
                    support[entity] = support.get(entity, 0.0) + entry.score
        if support:
            best = max(support.values())
            top = [e for e, v in support.items() if v >= best - 1e-9]
            gold = {index.entity_ids[a] for a in question.answers if a in index.entity_ids}
            hits += len(gold.intersection(top)) / len(top)  # a tie is a fair draw among the tied
    return hits / len(questions)


def extra_pairs(dataset: Dataset) -> list:
    """Question -> relation path pairs without a topic, from ``relation-paths.jsonl`` beside a files KG (RoG's
    ``ground_paths``, each written forward from the topic), for the path ranker; [] when there is none."""
    import json

    from stem_jax.data.types import PathStep

    folder = getattr(dataset, "folder", None)
    if folder is None:
        return []
    pairs = []
    for name in ("relation-paths.jsonl", "relation_paths.jsonl"):
        path = Path(folder) / name
        if not path.is_file():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            paths = record.get("ground_paths") or record.get("paths") or []
            if isinstance(record.get("question"), str) and paths and all(isinstance(r, str) for r in paths[0]):
                pairs.append((record["question"], tuple(PathStep(r, True) for r in paths[0])))
    return pairs


def train_default_planner(dataset_spec: DatasetSpec, config: StemConfig, out: Path, *, encoder: Any = None,
                          cache_root: Path, show_progress: bool = False,
                          log: Callable[[str], None] = print) -> Any:
    """Train the pattern planner on ``dataset_spec``'s training split (all hops, no limit) as
    ``stem-jax train-planner`` does with its defaults, and save it to ``out``. Returns it."""
    from stem_jax.plan.factory import training_split

    spec = dataclasses.replace(dataset_spec, split=training_split(dataset_spec.name, None), hops=DatasetSpec().hops,
                               limit=None, questions=None, qtypes=None)
    return train_and_save(load_dataset(spec), spec.split, config, out, cache_root=cache_root, encoder=encoder,
                          show_progress=show_progress, log=log, report={"trained_on_first_use": True})

"""The pretrained path ranker shipped with the package: a planner for a KG nobody wrote questions for.

The KG-constrained path ranker (:mod:`stem_jax.plan.path_ranker`) reads only KG-agnostic text features: the
masked question's and each step's sentence embedding (the relation's text, averaged with a text naming a few of
the entities the step reaches in its orientation, so "directed by" forward and backward read differently and
"which club" can match a step that reaches clubs), the share of a relation's words the question uses, a step's
orientation, the path's length and how many entities it ends at. Its training credits a path only when no
shorter candidate reaches the answers as well, and its candidates leave out relations stored as another's exact
reverse (``plays_in_club_inverse``). A ranker trained on the questions of
several KGs therefore ranks the paths of a KG it never saw; ``--planner pattern`` uses it whenever the KG has
no trained planner of its own (:func:`stem_jax.plan.factory.build_planner`), and ``stem-jax train-planner``
starts from it (a warm start), so a few questions with answers adapt it.

The model lives in ``stem_jax/plan/models/<version>/`` (``ranker.json`` naming ``ranker-<sha>.npz``; the
arrays' sha256 is checked on load). It holds no relation embeddings: a KG's relations are embedded from their
names (or derived from their ids) and their frequent targets' names when it is first used. ``experiments/train_pretrained_planner.py`` trains
it; :func:`train_multi_kg_ranker` is the training, one listwise loss over the questions of every KG given.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stem_jax.data.types import Dataset, PathStep, Question
from stem_jax.errors import StemError
from stem_jax.kg.index import KGIndex, relation_text

VERSION = "path-ranker-v2"
MODELS_FOLDER = Path(__file__).parent / "models"
# a KG with at most this many relations gets 3-step candidate paths (MetaQA's 3-hop questions); a larger schema
# (Freebase) keeps 2 steps: the number of paths grows with the relation count to the power of the steps
SMALL_SCHEMA_RELATIONS = 100
MAX_HOPS = 3  # the model's path length (its input width); enumeration may stop earlier (above)


def model_folder(version: str = VERSION) -> Path:
    """The shipped model's folder."""
    return MODELS_FOLDER / version


def available() -> bool:
    """Whether the shipped model is installed (its manifest is in the package)."""
    from stem_jax.plan.path_ranker import RANKER_FILE

    return (model_folder() / RANKER_FILE).is_file()


def catalog_hops(index: KGIndex) -> int:
    """How many steps the candidate paths of ``index``'s topics take (see :data:`SMALL_SCHEMA_RELATIONS`)."""
    return MAX_HOPS if index.num_relations <= SMALL_SCHEMA_RELATIONS else 2


def make_catalog(index: KGIndex, names: dict[str, str] | None, config: Any, hops: int | None = None) -> Any:
    """A :class:`~stem_jax.plan.relation_paths.PathCatalog` of ``index`` with the pretrained ranker's bounds."""
    from stem_jax.kg.mediators import mediator_mask
    from stem_jax.plan.relation_paths import PathCatalog, mirrored_relations

    skip = mirrored_relations(index) if getattr(config, "skip_mirrors", False) else {}
    return PathCatalog(index, max_hops=hops or catalog_hops(index), fan_cap=config.fan_cap, hub_cap=config.hub_cap,
                       max_paths=config.max_paths, mediators=mediator_mask(index.entities, names), skip_relations=skip)


_OPAQUE = re.compile(r"^[A-Za-z]{0,2}\d+$")  # P57, r12, 17: an identifier whose text says nothing


def opaque_relations(index: KGIndex) -> list[str]:
    """The KG's relations whose text is an opaque identifier (``P57``): the ranker cannot read them."""
    return [r for r in index.relations if _OPAQUE.match(relation_text(r).replace(" ", ""))]


def load_pretrained(*, index: KGIndex, names: dict[str, str] | None, encoder: Any, beam: int, min_prob: float,
                    folder: Path | None = None) -> Any:
    """The shipped ranker (or the one saved in ``folder``) as a planner over ``index``."""
    from stem_jax.plan.path_ranker import RANKER_FILE, PathRanker

    folder = Path(folder) if folder is not None else model_folder()
    if not (folder / RANKER_FILE).is_file():
        raise StemError(f"the pretrained path planner is not installed ({folder / RANKER_FILE} missing)\n  how to "
                        "fix: reinstall stem-jax, or train a planner for this KG with `stem-jax train-planner`")
    ranker = PathRanker.load(folder, beam=beam, min_prob=min_prob, names=names, index=index, encoder=encoder)
    ranker._catalog = make_catalog(index, names, ranker.config)
    ranker.name = "pattern-pretrained"
    return ranker


def shipped_encoder() -> str | None:
    """The encoder name whose vectors the shipped model reads (None when it is not installed)."""
    import json

    from stem_jax.plan.path_ranker import RANKER_FILE

    if not available():
        return None
    return str(json.loads((model_folder() / RANKER_FILE).read_text())["encoder"])


def describe(ranker: Any) -> dict[str, Any]:
    """What ``planner_info`` says about a pretrained ranker: version, what it was trained on."""
    report = ranker.report
    if report.get("few_shot"):  # adapted to a KG's own questions
        return {**report.get("pretrained_from", {}), "adapted_on": report.get("dataset"),
                "adapted_questions": report.get("train_questions"), "temperature": ranker.temperature}
    return {"version": report.get("version", VERSION), "trained_on": report.get("families", {}),
            "questions": report.get("train_questions"), "temperature": ranker.temperature}


_warned: set[str] = set()


def notice(message: str) -> None:
    """``message`` on stderr, once per process (a server builds planners per request)."""
    if message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# Training on several KGs
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class KGPart:
    """One KG's training material: its questions (train and held out), the KG, relation-path pairs."""

    name: str
    family: str
    dataset: Dataset
    train: list[Question]
    val: list[Question]
    pairs: list[tuple[str, tuple[PathStep, ...]]] = dataclasses.field(default_factory=list)
    hops: int | None = None  # candidate path steps (default :func:`catalog_hops`)


@dataclasses.dataclass
class _Prepared:
    part: KGPart
    ranker: Any  # a PathRanker over the part's KG (its relation table, catalog)
    examples: Any  # path_ranker.PathExamples, relation ids local to the part's table


def _prepare(part: KGPart, config: Any, embed: Callable[[list[str]], np.ndarray], encoder_name: str,
             log: Callable[[str], None]) -> _Prepared:
    from stem_jax.kg.index import build_index
    from stem_jax.plan.path_ranker import PathRanker, concat_examples, init_params, training_examples

    began = time.perf_counter()
    index = build_index(part.dataset.triples)
    d = int(np.asarray(embed(["x"])).shape[1])
    ranker = PathRanker(params=init_params(d, config), config=config, encoder_name=encoder_name,
                        names=part.dataset.entity_names, index=index, embed_fn=embed,
                        _catalog=make_catalog(index, part.dataset.entity_names, config, part.hops))
    ranker.relation_table()
    rng = np.random.default_rng(config.seed)
    data, extra, kept, _ = training_examples(ranker, part.train, ranker.question_vectors(part.train), part.pairs,
                                             config, rng)
    data = concat_examples(data, extra)
    log(f"  {part.name}: {len(kept)} of {len(part.train)} questions with a path to their answers, "
        f"{0 if extra is None else len(extra.qvec)} path pairs, {index.num_relations} relations "
        f"[{time.perf_counter() - began:.1f}s]")
    return _Prepared(part, ranker, data)


def _merged(prepared: Sequence[_Prepared]) -> tuple[np.ndarray, Any]:
    """One relation table for all parts (each part's rows, then one zero row: no step) and their examples with
    relation ids moved into it; each family's examples weigh as much in all as the square root of their count."""
    from stem_jax.plan.path_ranker import PathExamples

    tables, parts, offset = [], [], 0
    zero_row = sum(p.ranker.relation_table().shape[0] - 1 for p in prepared)
    family_counts: dict[str, int] = {}
    for p in prepared:
        family_counts[p.part.family] = family_counts.get(p.part.family, 0) + len(p.examples.qvec)
    for p in prepared:
        table = p.ranker.relation_table()
        r = table.shape[0] - 1
        rel = np.where(p.examples.rel == r, zero_row, p.examples.rel + offset).astype(np.int32)
        n = family_counts[p.part.family]
        scale = np.sqrt(n) / n  # a family of n examples weighs sqrt(n): large sets lead, small ones still count
        fields = dataclasses.asdict(p.examples)
        fields.update(rel=rel, weight=(p.examples.weight * scale).astype(np.float32), qrow=np.zeros_like(p.examples.qrow))
        parts.append(PathExamples(**fields))
        tables.append(table[:-1])
        offset += r
    table = np.concatenate([*tables, np.zeros((1, tables[0].shape[1]), np.float32)]).astype(np.float32)
    data = PathExamples(*(np.concatenate(cols) for cols in zip(*(dataclasses.astuple(e) for e in parts), strict=True)))
    mean_weight = float(data.weight.mean())
    data.weight = (data.weight / mean_weight).astype(np.float32)
    return table, data


def prepare_parts(parts: Sequence[KGPart], config: Any, embed_for: Callable[[KGPart], Callable], encoder_name: str,
                  log: Callable[[str], None] = print) -> list[_Prepared]:
    """Each part's KG index, candidate paths and training arrays (what every leave-one-out fit reuses)."""
    return [_prepare(p, config, embed_for(p), encoder_name, log) for p in parts]


def train_multi_kg_ranker(prepared: Sequence[_Prepared], config: Any, *, log: Callable[[str], None] = print,
                          exclude_family: str | None = None) -> Any:
    """One path ranker trained on the questions of every prepared KG (those of ``exclude_family`` left out), its
    temperature fitted on their held-out questions. Returns a PathRanker with no KG and no relation bank."""
    from stem_jax.plan.path_ranker import PathRanker, fit_ranker, fit_temperature, init_params, path_targets

    began = time.perf_counter()
    used = [p for p in prepared if p.part.family != exclude_family]
    if not used:
        raise StemError(f"no KG left to train on once {exclude_family} is excluded")
    table, data = _merged(used)
    params, history = fit_ranker(init_params(table.shape[1], config), table, data, config, log)
    params = {k: np.asarray(v) for k, v in params.items()}
    scored, targets = [], []
    for p in used:
        ranker = dataclasses.replace(p.ranker, params=params, temperature=1.0, _forward=None)
        for q, (cands, probs, _) in zip(p.part.val, ranker.score(p.part.val), strict=True):
            target = path_targets(q, cands, ranker.index, shortest=config.shortest_targets) if cands else np.zeros(0, np.float32)
            if target.any():
                scored.append(probs)
                targets.append(target)
    temperature = fit_temperature(scored, targets)
    families: dict[str, dict[str, int]] = {}
    for p in used:
        families.setdefault(p.part.family, {})[p.part.name] = len(p.part.train)
    report = {"version": VERSION, "families": families, "excluded_family": exclude_family,
              "train_questions": sum(len(p.part.train) for p in used), "train_examples": len(data.qvec),
              "loss_history": history, "val_with_right_path": len(targets), "seconds": time.perf_counter() - began}
    return PathRanker(params=params, config=config, encoder_name=used[0].ranker.encoder_name,
                      temperature=temperature, report=report)


# ---------------------------------------------------------------------------------------------------
# The constraint-branch model beside it
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class BranchPart:
    """One KG's constraint-branch training examples (:class:`~stem_jax.plan.branch_planner.BranchExample`)."""

    name: str
    family: str
    train: list[Any]
    held: list[Any]


def prepare_branch_parts(parts: Sequence[KGPart], embed: Callable[[list[str]], np.ndarray],
                         log: Callable[[str], None] = print) -> list[BranchPart]:
    """Each KG's branch examples (:func:`~stem_jax.plan.branch_planner.branch_examples` over the catalog
    ``train-planner``'s branch model walks), built once and shared by every model the run trains. ``embed``: the
    encoder's text embedder, as ``train-planner`` uses it."""
    from stem_jax.kg.index import build_index
    from stem_jax.kg.mediators import mediator_mask
    from stem_jax.plan.branch_planner import branch_examples
    from stem_jax.plan.relation_paths import PathCatalog

    out = []
    for part in parts:
        began = time.perf_counter()
        index, names = build_index(part.dataset.triples), part.dataset.entity_names
        catalog = PathCatalog(index, mediators=mediator_mask(index.entities, names))
        train, held = branch_examples(part.train, part.val, index, catalog, embed, names)
        out.append(BranchPart(part.name, part.family, train, held))
        log(f"  {part.name}: {len(train)} + {len(held)} branch examples [{time.perf_counter() - began:.1f}s]")
    return out


def train_multi_kg_branch_model(parts: Sequence[BranchPart], *, exclude_family: str | None = None,
                                log: Callable[[str], None] = print) -> Any:
    """One constraint-branch model (:class:`~stem_jax.plan.branch_planner.BranchModel`) fitted on the branch
    examples of every KG (those of ``exclude_family`` left out) by
    :func:`~stem_jax.plan.branch_planner.fit_branch_model`, as ``train-planner`` fits one KG's; None when no KG
    given names a second entity often enough, or when attaching branches does not raise answer F1 out of fold."""
    from stem_jax.plan.branch_planner import fit_branch_model

    used = [p for p in parts if p.family != exclude_family]
    # labelled by the best branch of each example: one model serves KGs whose branches differ in how many answers
    # they keep (a 2-step branch through a country keeps a club's players' compatriots too), and the pointwise
    # label ("it helps") taught it to prefer the branch that keeps more
    report = {"version": VERSION, "trained_on": {p.name: len(p.train) for p in used if p.train},
              "excluded_family": exclude_family, "labels": "best branch"}
    return fit_branch_model([e for p in used for e in p.train], [e for p in used for e in p.held], best_only=True,
                            report=report, log=log)

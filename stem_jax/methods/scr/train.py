"""Training SCR: InfoNCE over teacher-forced reasoning steps (eqs. 10-11), optax, orbax, resumable.

Data: a MetaQA split (the dev split by default, through the project's one ``hash_split`` so the
validation tenth is the same as the planners'; test is never read). Each optimiser step takes
``train_batch`` questions, samples a gold walk per question (:mod:`.supervision`) and scores every
step of it: the GNN runs over the whole KG (its features do not depend on the question), the
question head over each step's context. Batches are pure functions of (seed, step), so a run
resumed from its last checkpoint sees exactly the batches an uninterrupted run sees.

The run folder holds ``scr.json`` (the :class:`~.model.ScrSpec` and data fingerprint),
``checkpoints/<step>/`` (orbax: params, optimizer state, history), ``history.json``,
``curves.png`` and ``train-summary.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from stem_jax.checkpoints import CheckpointStore
from stem_jax.config import ScrConfig
from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.jraph_compat import jraph
from stem_jax.kg.index import KGIndex
from stem_jax.methods.scr.graph import NeighbourTable, build_neighbour_table
from stem_jax.methods.scr.model import ScrModel, ScrSpec, frozen_layers, scr_model
from stem_jax.methods.scr.search import SearchTables, candidate_log_probs
from stem_jax.methods.scr.supervision import GoldSteps, StepItems, gold_steps, step_items, walkable
from stem_jax.methods.scr.text import EncoderTables

SPEC_FILE = "scr.json"
CHECKPOINTS = "checkpoints"
VAL_SEED_OFFSET = 10**9


def spec_from_config(config: ScrConfig, text_dim: int, num_relations: int) -> ScrSpec:
    minilm = config.question_encoder == "minilm"
    return ScrSpec(layers=config.layers, dim=config.dim, head_layers=0 if minilm else config.head_layers,
                   text_dim=text_dim, num_relations=num_relations, max_steps=config.max_steps, tau=config.tau,
                   neighbours=config.neighbours, relation_aware=config.relation_aware,
                   question_encoder=config.question_encoder, finetune_layers=config.finetune_layers if minilm else 0,
                   context_tokens=config.context_tokens if minilm else 0)


def kg_graph(neighbours: NeighbourTable, entity_text: np.ndarray) -> jraph.GraphsTuple:
    """The whole KG as one GraphsTuple: nodes = frozen entity vectors, edges = directed relation ids."""
    senders, receivers, relations = neighbours.gnn_edges()
    return jraph.GraphsTuple(nodes=jnp.asarray(entity_text, jnp.float32), edges=jnp.asarray(relations),
                             senders=jnp.asarray(senders), receivers=jnp.asarray(receivers),
                             n_node=jnp.asarray([entity_text.shape[0]]), n_edge=jnp.asarray([senders.size]),
                             globals=None)


def init_params(spec: ScrSpec, key: jax.Array) -> Any:
    """Parameters of ``spec`` (shapes never depend on the graph), randomly initialised; a minilm encoder's
    trainable layers get their pretrained values from :func:`with_pretrained_layers`."""
    graph = jraph.GraphsTuple(nodes=jnp.zeros((2, spec.text_dim)), edges=jnp.zeros(2, jnp.int32),
                              senders=jnp.asarray([0, 1], jnp.int32), receivers=jnp.asarray([0, 1], jnp.int32),
                              n_node=jnp.asarray([2]), n_edge=jnp.asarray([2]), globals=None)
    length = spec.context_length
    model = scr_model(spec)
    width = model.bert.hidden_size if spec.minilm else spec.text_dim
    return model.init(key, graph, jnp.zeros((spec.num_relations, spec.text_dim)), jnp.zeros((1, length, width)),
                      jnp.zeros((1, length), jnp.int32), jnp.ones((1, length), bool))


def with_pretrained_layers(params: Any, spec: ScrSpec, pre: Any = None) -> Any:
    """``params`` with a minilm encoder's trainable MiniLM layers set to the pretrained weights (the paper's
    question BERT "shares initial weights" with the frozen one); other specs are returned unchanged."""
    if not spec.minilm or not spec.finetune_layers:
        return params
    from stem_jax.methods.scr.text import pretrained

    pre = pre or pretrained()
    context = dict(params["params"]["context"])
    for i in range(frozen_layers(scr_model(spec)), pre.cfg.num_hidden_layers):
        context[f"layer_{i}"] = jax.tree.map(jnp.asarray, pre.layer(i))
    return {**params, "params": {**params["params"], "context": context}}


def params_fingerprint(params: Any) -> str:
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        digest.update(np.asarray(leaf).tobytes())
    return digest.hexdigest()[:12]


def step_loss(model: ScrModel, params: Any, graph: jraph.GraphsTuple, entity_text: jax.Array,
              relation_text: jax.Array, questions: jax.Array, items: dict[str, jax.Array],
              encoder: EncoderTables | None = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Mean multi-positive InfoNCE over valid items, with step accuracy (argmax is a positive).

    ``questions``: frozen question vectors [Q, text], or word pieces [Q, Lq] with ``encoder`` (minilm)."""
    features = model.apply(params, graph, relation_text, method=ScrModel.entities)
    tables = SearchTables(features, entity_text, relation_text, encoder)
    logp = candidate_log_probs(model, params, tables, questions[items["question"]], items["path_entities"],
                               items["path_relations"], items["length"], items["cand_entities"],
                               items["cand_relations"], items["cand_valid"])
    positive = items["positive"] & jnp.isfinite(logp)
    valid = items["valid"] & positive.any(-1)
    per_item = -jax.nn.logsumexp(jnp.where(positive, logp, -jnp.inf), axis=-1)
    n = jnp.maximum(valid.sum(), 1)
    loss = jnp.where(valid, per_item, 0.0).sum() / n
    best = jnp.argmax(jnp.where(jnp.isfinite(logp), logp, -jnp.inf), axis=-1)
    hit = jnp.take_along_axis(positive, best[:, None], axis=1)[:, 0]
    stop = items["positive"][:, 0]
    return loss, {"accuracy": jnp.where(valid, hit, False).sum() / n,
                  "stop_accuracy": (hit & stop & valid).sum() / jnp.maximum((stop & valid).sum(), 1),
                  "items": valid.sum()}


def _schedule(lr: float, steps: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, lr, max(1, min(50, steps // 10)), max(steps, 2),
                                              end_value=lr * 0.1)


def _is_pretrained(path: tuple) -> bool:
    """A leaf of a minilm encoder's MiniLM layers (``params/context/layer_i/...``), not its new projection."""
    keys = [getattr(k, "key", str(k)) for k in path]
    return "context" in keys and any(str(k).startswith("layer_") for k in keys)


def make_optimizer(config: ScrConfig) -> optax.GradientTransformation:
    """AdamW with warm-up and cosine decay; a minilm encoder's pretrained layers take ``encoder_lr``."""
    main = optax.adamw(_schedule(config.lr, config.steps), weight_decay=1e-4)
    if config.question_encoder != "minilm":
        return optax.chain(optax.clip_by_global_norm(1.0), main)
    encoder = optax.adamw(_schedule(config.encoder_lr, config.steps), weight_decay=1e-4)
    labels = lambda params: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda path, _: "encoder" if _is_pretrained(path) else "main", params)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.multi_transform({"main": main, "encoder": encoder},
                                                                             labels))


@dataclasses.dataclass
class TrainData:
    """Everything a run needs, loaded once: graph, text tables, question vectors, gold steps."""

    neighbours: NeighbourTable
    graph: jraph.GraphsTuple
    entity_text: jax.Array
    relation_text: jax.Array
    questions: jax.Array  # [Q, text] frozen MiniLM question vectors, or [Q, Lq] word pieces (minilm)
    train: list[GoldSteps]
    val: list[GoldSteps]
    skipped: Counter
    fingerprint: dict[str, Any]
    encoder: EncoderTables | None = None  # minilm: token tables and the frozen MiniLM bottom
    pretrained: Any = None  # minilm: the text.Pretrained those came from (the sentence encoder's weights when shared)


def question_vectors(encoder: Any, questions: Sequence[Question], cache: Path | None) -> np.ndarray:
    """Frozen question vectors, cached in ``cache`` (keyed by the encoder and the question texts)."""
    digest = hashlib.sha256(encoder.name.encode())
    for q in questions:
        digest.update(q.text.encode() + b"\x1e")
    key = digest.hexdigest()[:16]
    if cache is not None:
        path = cache / f"questions-{key}.npy"
        if path.is_file():
            return np.load(path)
    vectors = np.asarray(encoder.encode([q.text for q in questions]), np.float32)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, vectors)
        tmp.replace(path)
    return vectors


def encoder_inputs(config: ScrConfig | ScrSpec, index: KGIndex, names: dict[str, str] | None,
                   texts: Sequence[str], pre: Any = None) -> tuple[np.ndarray, EncoderTables]:
    """minilm: (question word pieces [Q, Lq], :class:`EncoderTables`) from the KG's own entity and relation texts;
    ``pre``: the :class:`~stem_jax.methods.scr.text.Pretrained` MiniLM to use (default: the installed one's)."""
    from stem_jax.kg.embeddings import kg_texts
    from stem_jax.methods.scr.text import pretrained, question_tokens, token_tables

    pre = pre or pretrained()
    kg = kg_texts(_text_only(index), names)
    frozen = pre.cfg.num_hidden_layers - config.finetune_layers
    return question_tokens(pre, texts), token_tables(pre, kg["entities"], kg["relations"], frozen)


def _text_only(index: KGIndex) -> Any:
    """``index`` without its triples, for :func:`kg_texts` (which serialises every triple otherwise)."""
    from types import SimpleNamespace

    return SimpleNamespace(entities=index.entities, relations=index.relations, triples=np.zeros((0, 3), np.int64))


def prepare_data(train_questions: Sequence[Question], val_questions: Sequence[Question], index: KGIndex,
                 embeddings: Any, encoder: Any, config: ScrConfig, *, seed: int = 0,
                 cache: Path | None = None, names: dict[str, str] | None = None) -> TrainData:
    """Graph, text tables, questions and gold steps; ``names`` (entity id -> display name) feed the minilm
    encoder's context strings as they feed the KG embeddings."""
    neighbours = build_neighbour_table(index, config.neighbours, seed, per_edge=config.relation_aware)
    entity_text = np.asarray(embeddings.entities.array, np.float32)
    relation_text = np.asarray(embeddings.relations.array, np.float32)
    questions = list(train_questions) + list(val_questions)
    tables = pre = None
    if config.question_encoder == "minilm":
        from stem_jax.methods.scr.text import pretrained_for

        pre = pretrained_for(encoder)  # the sentence encoder's loaded weights, when it is MiniLM
        vectors, tables = encoder_inputs(config, index, names, [q.text for q in questions], pre)
    else:
        vectors = question_vectors(encoder, questions, cache)
    skipped: Counter = Counter()
    golds = walkable(gold_steps(questions, index, skipped), neighbours, max_steps=config.max_steps, skipped=skipped)
    n_train = len(train_questions)
    train = [g for g in golds if g.question < n_train]
    val = [g for g in golds if g.question >= n_train]
    if not train:
        raise StemError("no training question has a usable gold relation path\n"
                        "  how to fix: train on MetaQA (or the demo dataset), whose questions carry gold paths")
    fingerprint = {"train_questions": len(train_questions), "val_questions": len(val_questions),
                   "usable_train": len(train), "usable_val": len(val), "entities": index.num_entities,
                   "triples": index.num_triples, "capped_entities": neighbours.capped,
                   "gnn_edges": int(neighbours.edge_entity.size), "candidate_entries": int(neighbours.entity.size),
                   "skipped": dict(skipped)}
    return TrainData(neighbours, kg_graph(neighbours, entity_text), jnp.asarray(entity_text),
                     jnp.asarray(relation_text), jnp.asarray(vectors), train, val, skipped, fingerprint, tables, pre)


def batch_items(data: TrainData, config: ScrConfig, step: int, seed: int, skipped: Counter | None = None
                ) -> StepItems:
    """The items of optimiser step ``step``: a pure function of (seed, step)."""
    rng = np.random.default_rng([seed, step])
    size = min(config.train_batch, len(data.train))
    picks = rng.choice(len(data.train), size=size, replace=False)
    # One candidate width for every batch: one compile of the gradient.
    return step_items([data.train[i] for i in picks], data.neighbours, rng, max_steps=config.max_steps,
                      rows=config.train_batch * config.max_steps, width=data.neighbours.max_width,
                      skipped=skipped)


def spread_by_hops(golds: Sequence[GoldSteps], limit: int) -> list[GoldSteps]:
    """At most ``limit`` of ``golds``, taken round robin from each path length in their own order. MetaQA's
    questions come grouped by hop, so the first ``limit`` validation paths were all 1-hop and validation
    (and early stopping) never saw a 2- or 3-hop step."""
    groups: dict[int, list[GoldSteps]] = {}
    for gold in golds:
        groups.setdefault(len(gold.relations), []).append(gold)
    columns = [groups[hops] for hops in sorted(groups)]
    picked = []
    for row in range(max(map(len, columns), default=0)):
        for column in columns:
            if row < len(column) and len(picked) < limit:
                picked.append(column[row])
    return picked


def validation_items(data: TrainData, config: ScrConfig, seed: int, limit: int = 512) -> StepItems | None:
    if not data.val:
        return None
    rng = np.random.default_rng([seed, VAL_SEED_OFFSET])
    golds = spread_by_hops(data.val, limit)
    return step_items(golds, data.neighbours, rng, max_steps=config.max_steps, rows=len(golds) * config.max_steps,
                      width=data.neighbours.max_width)


def _device(items: StepItems) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in dataclasses.asdict(items).items()}


def make_trainer(spec: ScrSpec, config: ScrConfig) -> Trainer:
    """One :class:`Trainer` per (architecture, optimiser settings) per process: a resumed or repeated run
    in the same process reuses the compiled functions."""
    return _trainer(spec, config.lr, config.steps, config.encoder_lr)


@functools.lru_cache(maxsize=4)
def _trainer(spec: ScrSpec, lr: float, steps: int, encoder_lr: float) -> Trainer:
    return Trainer(spec, make_optimizer(ScrConfig(lr=lr, steps=steps, encoder_lr=encoder_lr,
                                                  question_encoder=spec.question_encoder)))


class Trainer:
    """Jitted gradient (candidate width is fixed in training, so one compile) and update."""

    def __init__(self, spec: ScrSpec, optimizer: optax.GradientTransformation):
        model = scr_model(spec)
        self.model = model
        self.optimizer = optimizer

        def loss_fn(params, graph, entity_text, relation_text, questions, items, encoder=None):
            return step_loss(model, params, graph, entity_text, relation_text, questions, items, encoder)

        def update(params, opt_state, grads):
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        self.grad = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
        self.evaluate = jax.jit(loss_fn)
        self.update = jax.jit(update)


def _plot(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [h for h in history if "loss" in h]
    val = [h for h in history if "val_loss" in h]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    axes[0].plot([h["step"] for h in train], [h["loss"] for h in train], label="train", alpha=0.6)
    axes[0].plot([h["step"] for h in val], [h["val_loss"] for h in val], "o-", label="validation")
    axes[0].set(xlabel="step", ylabel="InfoNCE loss", title="SCR loss")
    axes[0].legend()
    axes[1].plot([h["step"] for h in train], [h["accuracy"] for h in train], label="train", alpha=0.6)
    axes[1].plot([h["step"] for h in val], [h["val_accuracy"] for h in val], "o-", label="validation")
    axes[1].plot([h["step"] for h in val], [h["val_stop_accuracy"] for h in val], "s--", label="validation (stop)")
    axes[1].set(xlabel="step", ylabel="step accuracy", title="next-entity argmax is a positive", ylim=(0, 1))
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SEARCH_ONLY = ("beam", "threshold", "min_hops", "batch_questions", "answer_cut", "patience")
BEST = "best"


MINILM_ONLY = ("finetune_layers", "context_tokens", "encoder_lr")


def _training_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The config fields that change training (search-only ones, and the minilm encoder's when the run has the
    segments head, may differ on resume)."""
    unused = MINILM_ONLY if config.get("question_encoder", "segments") != "minilm" else ()
    return {k: v for k, v in config.items() if k not in SEARCH_ONLY and k not in unused}


def _better(record: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Early-stopping order: higher validation step accuracy, then lower validation loss."""
    if best is None:
        return True
    return (record["val_accuracy"], -record["val_loss"]) > (best["val_accuracy"], -best["val_loss"])


def train_scr(data: TrainData, config: ScrConfig, out_dir: Path, *, seed: int = 0, stop_at: int | None = None,
              log: Callable[[str], None] = print, plot: bool = True) -> dict[str, Any]:
    """Train (or resume) into ``out_dir``; ``stop_at`` ends after that many total steps (tests, budgets).

    Every ``eval_every`` steps: validation loss and step accuracy, a checkpoint, a progress line (steps/s
    and the time left at that pace). The best validation so far is also kept under ``best/``, which
    :func:`load_run` restores; with ``patience`` > 0 training ends after that many validations without a
    better one (early stopping; the stop is recorded and a resume does not train further)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = spec_from_config(config, int(data.entity_text.shape[1]), int(data.relation_text.shape[0]))
    spec_path = out_dir / SPEC_FILE
    if spec_path.is_file():
        saved = json.loads(spec_path.read_text())
        # Fields added since a run was written take their defaults (what that run trained with).
        saved_config = {**dataclasses.asdict(ScrConfig()), **(saved.get("config") or {})}
        if ScrSpec(**saved["spec"]) != spec or _training_fields(saved_config) != _training_fields(
                dataclasses.asdict(config)):
            raise StemError(f"{out_dir} holds a run with another configuration\n"
                            "  how to fix: pass the same --scr.* values, or a new --out folder")
    else:
        written = {"spec": spec.as_dict(), "config": dataclasses.asdict(config), "seed": seed, "data": data.fingerprint}
        if spec.minilm:
            from stem_jax.methods.scr.text import pretrained

            # the frozen bottom's weights, checked on load
            written["text_encoder"] = (data.pretrained or pretrained()).name
        spec_path.write_text(json.dumps(written, indent=2))
    trainer = make_trainer(spec, config)
    params = with_pretrained_layers(init_params(spec, jax.random.key(seed)), spec, data.pretrained)
    opt_state = trainer.optimizer.init(params)
    store = CheckpointStore(out_dir / CHECKPOINTS)
    best_store = CheckpointStore(out_dir / BEST, keep=1)
    history: list[dict[str, Any]] = []
    seconds = 0.0
    start_step = 0
    best: dict[str, Any] | None = None
    stale, stopped_early = 0, None
    walk_failures: Counter = Counter()
    latest = store.latest_step()
    if latest is not None:
        params, opt_state, meta = store.restore(latest, params, opt_state)
        history, seconds, start_step = meta["history"], meta["seconds"], latest
        best, stale, stopped_early = meta.get("best"), int(meta.get("stale", 0)), meta.get("stopped_early")
        walk_failures.update(meta.get("walk_failures", {}))
        log(f"resuming {out_dir} from step {latest} ({seconds:.0f}s so far)")
    val = validation_items(data, config, seed)
    val_device = _device(val) if val is not None else None
    overflow = None
    if spec.minilm and val is not None:  # how many validation contexts exceed context_tokens (cut at the end)
        from stem_jax.methods.scr.text import context_overflow

        rows = val.valid
        cut, longest = context_overflow(np.asarray(data.questions)[val.question[rows]],
                                        np.asarray(data.encoder.entity_tokens), np.asarray(data.encoder.relation_tokens),
                                        val.path_entities[rows], val.path_relations[rows], val.length[rows],
                                        spec.context_tokens)
        overflow = {"contexts": int(rows.sum()), "longer_than_context_tokens": cut, "longest": longest}
        log(f"validation contexts: {cut} of {int(rows.sum())} longer than {spec.context_tokens} tokens "
            f"(longest {longest})")
    last = min(config.steps, stop_at) if stop_at is not None else config.steps
    if stopped_early is not None:
        log(f"{out_dir} stopped early at step {stopped_early} (patience {config.patience}); nothing to train")
        last = start_step
    began = time.perf_counter()
    for step in range(start_step, last):
        items = batch_items(data, config, step, seed, walk_failures)
        (loss, aux), grads = trainer.grad(params, data.graph, data.entity_text, data.relation_text, data.questions,
                                          _device(items), data.encoder)
        params, opt_state = trainer.update(params, opt_state, grads)
        record = {"step": step + 1, "loss": float(loss), "accuracy": float(aux["accuracy"]), "items": int(aux["items"])}
        if (step + 1) % config.eval_every == 0 or step + 1 == last:
            if val_device is not None:
                val_loss, val_aux = trainer.evaluate(params, data.graph, data.entity_text, data.relation_text,
                                                     data.questions, val_device, data.encoder)
                record.update(val_loss=float(val_loss), val_accuracy=float(val_aux["accuracy"]),
                              val_stop_accuracy=float(val_aux["stop_accuracy"]))
            now = time.perf_counter() - began
            elapsed = seconds + now
            pace = (step + 1 - start_step) / max(now, 1e-9)
            history.append(record)
            improved = "val_loss" in record and _better(record, best)
            if improved:
                best, stale = dict(record), 0
                best_store.save(step + 1, params, opt_state, {"best": best})
            elif "val_loss" in record:
                stale += 1
            if config.patience and stale >= config.patience:
                stopped_early = step + 1
            log(f"step {step + 1}/{config.steps}: loss {record['loss']:.3f}, accuracy {record['accuracy']:.3f}"
                + (f", val loss {record['val_loss']:.3f}, val accuracy {record['val_accuracy']:.3f} "
                   f"(stop {record['val_stop_accuracy']:.3f}){' *' if improved else ''}" if "val_loss" in record else "")
                + f" [{elapsed:.0f}s, {pace:.2f} steps/s, ~{(last - step - 1) / max(pace, 1e-9):.0f}s left]")
            store.save(step + 1, params, opt_state, {"history": history, "seconds": elapsed, "best": best,
                                                     "stale": stale, "stopped_early": stopped_early,
                                                     "walk_failures": dict(walk_failures)})
            if stopped_early is not None:
                log(f"early stop at step {stopped_early}: {stale} validations without a better one; best step "
                    f"{best['step'] if best else None}")
                last = step + 1
                break
        else:
            history.append(record)
            if spec.minilm and (step + 1) % 5 == 0:  # slow steps: a heartbeat between validations
                now = time.perf_counter() - began
                log(f"step {step + 1}/{config.steps}: loss {record['loss']:.3f}, accuracy {record['accuracy']:.3f} "
                    f"[{seconds + now:.0f}s, {now / (step + 1 - start_step):.1f} s/step]")
    seconds += time.perf_counter() - began
    store.close()
    best_store.close()
    (out_dir / "history.json").write_text(json.dumps(history))
    if plot and history:
        _plot(history, out_dir / "curves.png")
    skipped = dict(data.skipped)
    if walk_failures:
        skipped.update({f"training walks: {k}": v for k, v in walk_failures.items()})
    summary = {"steps": last, "seconds": round(seconds, 1), "params_sha": params_fingerprint(params),
               "final": history[-1] if history else None, "best": best, "stopped_early": stopped_early,
               "spec": spec.as_dict(), "data": data.fingerprint, "usable_train": len(data.train),
               "usable_val": len(data.val), "skipped": skipped,
               **({"validation_context_overflow": overflow} if overflow else {})}
    (out_dir / "train-summary.json").write_text(json.dumps(summary, indent=2))
    return {"params": params, **summary}  # summary["spec"] is the spec as a dict


@functools.lru_cache(maxsize=4)
def _abstract(spec: ScrSpec) -> Any:
    """Shape/dtype tree of ``spec``'s parameters (``CheckpointStore.restore_params`` places it on a
    local device, so a run trained on a CPU loads on a GPU machine)."""
    return jax.eval_shape(lambda: init_params(spec, jax.random.key(0)))  # random init: no weights read


def load_run(folder: Path) -> tuple[ScrSpec, Any, dict[str, Any]]:
    """(spec, params, info) of the last checkpoint of a ``train-scr`` run folder."""
    folder = Path(folder)
    spec_path = folder / SPEC_FILE
    if not spec_path.is_file():
        raise StemError(f"{folder} is not a train-scr run (no {SPEC_FILE})\n"
                        "  how to fix: train one with `stem-jax train-scr --dataset metaqa --out runs/scr-metaqa`")
    saved = json.loads(spec_path.read_text())
    spec = ScrSpec(**saved["spec"])
    best = folder / BEST
    use_best = best.is_dir() and any(best.iterdir())
    with CheckpointStore(best if use_best else folder / CHECKPOINTS, keep=1 if use_best else 2) as store:
        step = store.latest_step()
        if step is None:
            raise StemError(f"{folder} has no checkpoint yet\n  how to fix: let `stem-jax train-scr` run to its "
                            "first checkpoint (every --scr.eval_every steps)")
        params = store.restore_params(step, _abstract(spec))
    return spec, params, {"step": step, "best": use_best, "params_sha": params_fingerprint(params),
                          "folder": str(folder), "text_encoder": saved.get("text_encoder"),
                          "config": saved.get("config"), "seed": int(saved.get("seed", 0))}

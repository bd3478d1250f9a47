"""Training the Triple-GNN (paper appendix C.1-C.2): AdamW on balanced BCE, orbax, resumable.

Each step takes ``graphs_per_step`` examples. A slot is a random-walk example (Phase-1 reverse
generation, :mod:`stem_jax.plan.walks`) with probability ``synthetic_ratio``, else the next
question of a per-epoch permutation; both are pure functions of (seed, step, slot), so a run
resumed from a checkpoint at step k sees exactly the batches an uninterrupted run sees from k on.

Loss: the paper's eq. 37 keeps only the positive term of BCE, which a model can minimise by
predicting 1 everywhere. We use both terms, each averaged within its graph (positives are a few
nodes among thousands, so a plain node mean would be all negatives), then the mean over real
graphs that have at least one positive:
``L = mean_g [ mean_{pos}(-log p) + mean_{neg}(-log(1 - p)) ]``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from stem_jax.atomic import write_text_atomic
from stem_jax.checkpoints import CheckpointStore
from stem_jax.data.sampling import sample_per_hop
from stem_jax.data.types import Question
from stem_jax.errors import ConfigError, StemError
from stem_jax.eval.run_folder import lock_folder
from stem_jax.gnn.batching import GraphExample, pad_batch
from stem_jax.gnn.checkpoint import CHECKPOINTS, MODEL_FILE, params_fingerprint, restore_latest_good
from stem_jax.gnn.data import ExampleFactory
from stem_jax.gnn.guidance import guidance_size, select_top
from stem_jax.gnn.infer import predict
from stem_jax.gnn.model import ModelSpec, TripleGNN, build_model, init_params, node_graph_index
from stem_jax.jraph_compat import jraph
from stem_jax.plan.schema import SchemaGraph
from stem_jax.progress import progress


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and data mixing. The paper trains 2 epochs at lr 1e-5 on GPUs; a CPU budget
    of a few hundred steps needs a larger rate (1e-3 with warm-up and cosine decay)."""

    steps: int = 300
    graphs_per_step: int = 8
    lr: float = 1e-3
    warmup: int = 20
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    synthetic_ratio: float = 0.25  # share of slots filled with random-walk examples
    walk_hops: int = 3
    val_questions: int = 192  # validation questions per evaluation (stratified by hop)
    val_every: int = 50
    ckpt_every: int = 50
    k_prime: int = 4  # K' for the validation recall
    seed: int = 0

    def problems(self) -> list[str]:
        """Every out-of-range field, one line each naming its ``train-gnn`` flag (empty: usable)."""
        return train_config_problems(self)

    def check(self) -> TrainConfig:
        """``self``, or :class:`~stem_jax.errors.ConfigError` listing :meth:`problems`."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems)
        return self


# field: (flag, kind, low, low inclusive, high); kind "int" or "float"; floats must be finite
_TRAIN_RANGES = {
    "steps": ("--steps", "int", 1, True, None),
    "graphs_per_step": ("--graphs-per-step", "int", 1, True, 4096),
    "lr": ("--lr", "float", 0.0, False, None),
    "warmup": ("warmup", "int", 0, True, None),
    "weight_decay": ("weight_decay", "float", 0.0, True, None),
    "grad_clip": ("grad_clip", "float", 0.0, False, None),
    "synthetic_ratio": ("--synthetic-ratio", "float", 0.0, True, 1.0),
    "walk_hops": ("walk_hops", "int", 1, True, None),
    "val_questions": ("--val-questions", "int", 0, True, None),
    "val_every": ("--val-every", "int", 1, True, None),
    "ckpt_every": ("--ckpt-every", "int", 1, True, None),
    "k_prime": ("--guidance.k_prime", "int", 1, True, None),
    "seed": ("--seed", "int", 0, True, (1 << 32) - 1),
}
# What changes the trained parameters: a resumed run must keep these (validation and checkpoint
# cadence, and K' of the validation recall, may change between runs).
RESUME_KEYS = ("steps", "graphs_per_step", "lr", "warmup", "weight_decay", "grad_clip", "synthetic_ratio",
               "walk_hops", "seed")


def train_config_problems(config: TrainConfig) -> list[str]:
    """See :meth:`TrainConfig.problems`."""
    problems = []
    for name, (flag, kind, low, low_in, high) in _TRAIN_RANGES.items():
        value = getattr(config, name)
        if kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
            allowed = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
        else:
            ok = (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
                  and (value >= low if low_in else value > low) and (high is None or value <= high))
            allowed = (f"a number in [{low:g}, {high:g}]" if high is not None else
                       f"a finite number {'>=' if low_in else '>'} {low:g}")
        if not ok:
            problems.append(f"{flag} {value}: expected {allowed}")
    return problems


def bce_loss(logits: jax.Array, graph: jraph.GraphsTuple) -> tuple[jax.Array, jax.Array]:
    """(loss, number of graphs that counted); see the module docstring."""
    n_graph = graph.n_node.shape[0]
    node_mask = graph.nodes["valid"].astype(logits.dtype)
    graph_mask = graph.globals["valid"]
    label = graph.nodes["label"]
    seg = node_graph_index(graph)
    total = lambda x: jax.ops.segment_sum(x, seg, num_segments=n_graph)  # noqa: E731
    n_pos = total(label * node_mask)
    n_neg = total((1.0 - label) * node_mask)
    pos = total(jax.nn.softplus(-logits) * label * node_mask) / jnp.maximum(n_pos, 1.0)
    neg = total(jax.nn.softplus(logits) * (1.0 - label) * node_mask) / jnp.maximum(n_neg, 1.0)
    counted = graph_mask & (n_pos > 0)
    n = counted.sum()
    return jnp.where(counted, pos + neg, 0.0).sum() / jnp.maximum(n, 1), n


def make_optimizer(config: TrainConfig) -> optax.GradientTransformation:
    """Clipped AdamW with warm-up and cosine decay, over the flattened parameter vector
    (``optax.flatten``: one fused update instead of one per parameter leaf, faster to compile)."""
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, config.lr, max(1, min(config.warmup, config.steps - 1)), max(config.steps, 2), end_value=config.lr * 0.1
    )
    return optax.flatten(optax.chain(optax.clip_by_global_norm(config.grad_clip),
                                     optax.adamw(schedule, weight_decay=config.weight_decay)))


class TrainStep:
    """One optimisation step as two jitted functions: the loss gradient, compiled once per graph
    shape bucket, and the optimizer update, compiled once (its shapes never change). Splitting
    them keeps the per-bucket compile small, which on CPU is most of a short run's time."""

    def __init__(self, model: TripleGNN, optimizer: optax.GradientTransformation):
        def loss_fn(params, graph, relation_emb):
            return bce_loss(model.apply(params, graph, relation_emb), graph)

        def update(params, opt_state, grads):
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        self.grad = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
        self.update = jax.jit(update)

    def __call__(self, params, opt_state, graph, relation_emb):
        (loss, counted), grads = self.grad(params, graph, relation_emb)
        params, opt_state = self.update(params, opt_state, grads)
        return params, opt_state, loss, counted

    def compiled_shapes(self) -> int:
        return self.grad._cache_size()


@functools.lru_cache(maxsize=8)
def make_train_step(spec: ModelSpec, config: TrainConfig) -> TrainStep:
    """The (cached) training step of one architecture and optimiser setting: a resumed or repeated
    run in the same process reuses its compiled shapes."""
    return TrainStep(build_model(spec), make_optimizer(config))


class StepData:
    """The examples of training step ``s``: a pure function of (seed, s) (see the module docstring)."""

    def __init__(self, factory: ExampleFactory, pairs: Sequence[tuple[Question, SchemaGraph]], config: TrainConfig):
        if not pairs and config.synthetic_ratio < 1.0:
            raise StemError("no training questions (all skipped?) and --synthetic-ratio < 1")
        self.factory = factory
        self.pairs = pairs
        self.config = config
        self._perms: dict[int, np.ndarray] = {}

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            self._perms = {epoch: np.random.default_rng([self.config.seed, 7, epoch]).permutation(len(self.pairs))}
        return self._perms[epoch]

    def __call__(self, step: int) -> list[GraphExample]:
        config = self.config
        chooser = np.random.default_rng([config.seed, 1, step])
        out: list[GraphExample] = []
        for slot in range(config.graphs_per_step):
            example = None
            if not self.pairs or chooser.random() < config.synthetic_ratio:
                rng = np.random.default_rng([config.seed, 2, step, slot])
                example = self.factory.from_walk(rng, config.walk_hops, key=f"walk/{step}/{slot}")
            if example is None and self.pairs:
                count = step * config.graphs_per_step + slot
                epoch, position = divmod(count, len(self.pairs))
                question, schema = self.pairs[int(self._perm(epoch)[position])]
                example = self.factory.for_plan(question, schema, labels=True)
            if example is not None:
                out.append(example)
        return out


def stratified(pairs: Sequence[tuple[Question, SchemaGraph]], limit: int) -> list[tuple[Question, SchemaGraph]]:
    """Up to ``limit`` pairs, the same number per hop count, lowest question ids first, grouped by hop."""
    by_qid = sorted(pairs, key=lambda p: p[0].qid)
    per = max(1, limit // max(1, len({p[0].hops for p in pairs})))
    chosen = sample_per_hop(by_qid, per, rule="first", group=lambda p: p[0].hops)
    return sorted(chosen, key=lambda p: str(p[0].hops))


def guidance_recall(examples: Sequence[GraphExample], probs: Sequence[np.ndarray], k_prime: int) -> list[float]:
    """Per example: share of gold entities (inside or outside the subgraph) in the top |T|·K'."""
    out = []
    for example, p in zip(examples, probs, strict=True):
        n_gold = int(example.labels.sum()) + example.positives_outside
        if n_gold == 0:
            out.append(float("nan"))
            continue
        top, _ = select_top(p, np.arange(example.n_node), guidance_size(example.schema.shape[0], k_prime))
        out.append(float(example.labels[top].sum()) / n_gold)
    return out


def _plot(history: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.6))
    if history["loss"]:
        steps, losses = zip(*history["loss"], strict=True)
        ax_loss.plot(steps, losses, lw=0.6, alpha=0.5, label="step")
        smooth, value = [], losses[0]
        for loss in losses:
            value = 0.9 * value + 0.1 * loss
            smooth.append(value)
        ax_loss.plot(steps, smooth, lw=1.5, label="EMA 0.9")
        ax_loss.legend()
    ax_loss.set(xlabel="step", ylabel="balanced BCE", title="training loss")
    if history["val"]:
        steps = [v["step"] for v in history["val"]]
        ax_val.plot(steps, [v["recall"] for v in history["val"]], "o-", label="all")
        for hop in sorted({h for v in history["val"] for h in v["per_hop"]}):
            ax_val.plot(steps, [v["per_hop"].get(hop, math.nan) for v in history["val"]], ".--", label=hop)
        ax_val.legend()
    ax_val.set(xlabel="step", ylabel="recall", ylim=(0, 1.02), title="val recall of gold entities in top |T|·K'")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train(
    factory: ExampleFactory,
    train_pairs: Sequence[tuple[Question, SchemaGraph]],
    val_pairs: Sequence[tuple[Question, SchemaGraph]],
    spec: ModelSpec,
    config: TrainConfig,
    out_dir: Path,
    *,
    run_info: dict[str, Any] | None = None,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    stop_at: int | None = None,
) -> dict[str, Any]:
    """Train (or resume) into ``out_dir``; returns a summary (losses, recall, steps/s, wall time).

    ``out_dir`` gets ``model.json`` (architecture and data description), ``checkpoints/<step>``
    (orbax), ``history.json`` and ``curves.png``. ``stop_at`` ends the run after that many steps
    as if it had been killed (tests use it to check that resuming gives the same result).

    ``out_dir`` is locked while the run writes it (a second ``train-gnn`` on it is refused with the
    holder's pid). A rerun resumes only a run of the same architecture, optimisation settings
    (:data:`RESUME_KEYS`) and data; anything else is refused with the values that differ. A damaged
    latest checkpoint is moved to ``out_dir/damaged-checkpoints/`` (kept, not deleted) and the run
    resumes from the newest checkpoint that reads.
    """
    config.check()
    began = time.perf_counter()
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StemError(f"--out {out_dir}: cannot create the run folder ({err.strerror})\n"
                        "  how to fix: pass --out a writable folder path") from None
    lock = lock_folder(out_dir)
    try:
        return _train_locked(factory, train_pairs, val_pairs, spec, config, out_dir, run_info=run_info,
                             show_progress=show_progress, log=log, stop_at=stop_at, began=began)
    finally:
        os.close(lock)


def _check_resumable(out_dir: Path, found: dict[str, Any], info: dict[str, Any]) -> None:
    """Refuse to continue the run ``found`` (its model.json) with the settings ``info``."""
    if found.get("spec") != info["spec"]:
        raise StemError(f"{out_dir} holds a run of another architecture ({found.get('spec')} vs {info['spec']})\n"
                        "  how to fix: pass a new --out folder or the same --preset / --gnn.* flags")
    old_train = found.get("train") if isinstance(found.get("train"), dict) else {}
    diffs = [f"{_TRAIN_RANGES[k][0]} {old_train.get(k)} (this command: {info['train'][k]})"
             for k in RESUME_KEYS if old_train.get(k) != info["train"][k]]
    diffs += [f"{k} {found.get(k)!r} (this command: {info[k]!r})" for k in sorted(info)
              if k not in ("spec", "train", "train_questions") and k in found and found[k] != info[k]]
    if diffs:
        raise StemError(f"{out_dir} holds a run trained with {'; '.join(diffs[:4])}: continuing it would mix "
                        "two settings in one model\n"
                        "  how to fix: rerun with the run's own values to resume it, or pass a new --out")


def _train_locked(factory, train_pairs, val_pairs, spec, config, out_dir, *, run_info, show_progress, log, stop_at,
                  began) -> dict[str, Any]:
    model_file = out_dir / MODEL_FILE
    info = {"spec": spec.as_dict(), "train": dataclasses.asdict(config), **(run_info or {})}
    has_checkpoints = (out_dir / CHECKPOINTS).is_dir() and any((out_dir / CHECKPOINTS).iterdir())
    if model_file.exists():
        try:
            found = json.loads(model_file.read_bytes())
            if not isinstance(found, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as err:
            if has_checkpoints:
                raise StemError(f"{model_file}: damaged ({str(err).splitlines()[0] if str(err) else err!r}), so the "
                                "checkpoints beside it cannot be resumed safely\n"
                                "  how to fix: restore model.json from a copy, or pass a new --out") from None
            found = None  # nothing was trained: start afresh
        if found is not None:
            _check_resumable(out_dir, found, info)  # what trains the parameters is equal; the rest may change
    elif has_checkpoints:
        raise StemError(f"{out_dir} holds checkpoints without {MODEL_FILE}, so their settings are unknown\n"
                        "  how to fix: restore model.json from a copy, or pass a new --out")
    write_text_atomic(model_file, json.dumps(info, indent=1, sort_keys=True) + "\n")

    optimizer = make_optimizer(config)
    params = init_params(spec, jax.random.key(config.seed))
    opt_state = optimizer.init(params)
    train_step = make_train_step(spec, _without_schedule_free_fields(config))
    history: dict[str, Any] = {"loss": [], "val": [], "skipped_graphs": 0}
    store = CheckpointStore(out_dir / CHECKPOINTS)
    start, restored, damaged = restore_latest_good(store, lambda s: store.restore(s, params, opt_state), log=log)
    if damaged:  # keep the damaged steps out of orbax's sight (and out of the way of new saves), never delete
        store.close()
        aside = out_dir / "damaged-checkpoints"
        aside.mkdir(exist_ok=True)
        for step in damaged:
            target = aside / f"{step}-{int(time.time())}"
            (out_dir / CHECKPOINTS / str(step)).rename(target)
            log(f"moved damaged checkpoint step {step} to {target}")
        store = CheckpointStore(out_dir / CHECKPOINTS)
    if start is None and damaged:
        log("no readable checkpoint left: training starts again from step 0")
    start = start or 0
    if start:
        params, opt_state, history = restored
        log(f"resuming from checkpoint step {start} in {out_dir / CHECKPOINTS}")
    relation_emb = jnp.asarray(factory.featurizer.relation_matrix())
    data = StepData(factory, train_pairs, config)
    val_examples = [ex for ex in (factory.for_plan(q, s, labels=True) for q, s in val_pairs) if ex is not None]
    val_keys = [ex.key for ex in val_examples]
    hop_of = {q.qid: q.hops for q, _ in val_pairs}

    def validate(step: int) -> None:
        if not val_examples:
            return
        probs = predict(params, spec, val_examples, relation_emb)
        recalls = guidance_recall(val_examples, probs, config.k_prime)
        per_hop: dict[str, list[float]] = {}
        for key, r in zip(val_keys, recalls, strict=True):
            if not math.isnan(r):
                per_hop.setdefault(f"{hop_of.get(key)}-hop", []).append(r)
        values = [r for r in recalls if not math.isnan(r)]
        history["val"].append({"step": step, "recall": float(np.mean(values)) if values else math.nan,
                               "per_hop": {h: float(np.mean(v)) for h, v in sorted(per_hop.items())}})

    end = config.steps if stop_at is None else min(config.steps, stop_at)
    step_seconds: list[float] = []
    compiles_before = train_step.compiled_shapes()
    compile_steps = 0
    if start == 0 and not history["val"]:
        validate(0)
    with progress(config.steps, "train-gnn", "step", enabled=show_progress, initial=start) as bar:
        for step in range(start, end):
            examples = data(step)
            graph = pad_batch(examples, n_graph=_graph_bucket(config.graphs_per_step))
            t0 = time.perf_counter()
            cache = train_step.compiled_shapes()
            params, opt_state, loss, counted = train_step(params, opt_state, graph, relation_emb)
            loss = float(loss)
            elapsed = time.perf_counter() - t0
            if train_step.compiled_shapes() > cache:
                compile_steps += 1
            else:
                step_seconds.append(elapsed)
            history["skipped_graphs"] += len(examples) - int(counted)
            history["loss"].append([step + 1, loss])
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            bar.update(1)
            done = step + 1
            if done % config.val_every == 0 or done == config.steps:
                validate(done)
            if done % config.ckpt_every == 0 or done == end:
                store.save(done, params, opt_state, history)
    store.close()
    (out_dir / "history.json").write_text(json.dumps(history, indent=1) + "\n")
    _plot(history, out_dir / "curves.png")
    wall = time.perf_counter() - began
    ran = end - start
    summary = {
        "steps_total": end,
        "steps_this_run": ran,
        "wall_seconds_this_run": wall,
        "steps_per_second_steady": (len(step_seconds) / sum(step_seconds)) if step_seconds else None,
        "steps_per_second_overall": ran / wall if wall > 0 else None,
        "compiled_shapes": train_step.compiled_shapes() - compiles_before,
        "compile_steps": compile_steps,
        "first_loss": history["loss"][0][1] if history["loss"] else None,
        "last_loss": history["loss"][-1][1] if history["loss"] else None,
        "val": history["val"],
        "params_sha": params_fingerprint(params),
    }
    (out_dir / "train-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _without_schedule_free_fields(config: TrainConfig) -> TrainConfig:
    """``config`` with the fields the compiled step does not depend on reset, so runs that differ
    only in data, validation or checkpoint settings share one cached :class:`TrainStep`."""
    return dataclasses.replace(config, synthetic_ratio=0.0, walk_hops=0, val_questions=0, val_every=0,
                               ckpt_every=0, k_prime=0, seed=0, graphs_per_step=0)


def _graph_bucket(graphs_per_step: int) -> int:
    return max(2, 1 << graphs_per_step.bit_length())  # > graphs_per_step: room for the padding graph

"""Distil the one-layer question student (stem_jax/encoder/student.py) into all-MiniLM-L6-v2's vector space.

    STEM_DATA_DIR=../shared/data python experiments/encoder_distill.py [--epochs 12] [--no-write-model]

Training texts: the masked question wordings (as the pattern planner masks them) of MetaQA dev (every hop; the
shipped MetaQA has no train questions), WorldCup2014 dev, the demo KG's train split, webqsp-r train and cwq-e train; never a test split or a
dev split the accuracy tables report (webqsp-r dev, cwq-e dev). Targets: MiniLM's float32 vectors of the same
texts. The student starts from MiniLM's first layer and a least-squares projection of its pooled output, then
Adam minimises 1 - cosine, each wording
seen 1 + log2(its count in the training splits) times an epoch (templated wordings that many questions share weigh more). Reports the cosine to MiniLM's vector on the held-out wordings (MetaQA test, WorldCup2014
test, webqsp-r dev, cwq-e dev, the hand-written MetaQA paraphrases) and writes the weights to
stem_jax/encoder/models/question-student.npz (float16) and experiments/results/encoder-distill.{json,md}.
About 15 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paper_common import load_averages  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402

TRAIN = ("metaqa/dev", "wc2014/dev", "demo/train", "webqsp-r/train", "cwq-e/train")
HELD_OUT = ("metaqa/test", "wc2014/test", "demo/test", "webqsp-r/dev", "cwq-e/dev", "paraphrases")
PAD = (16, 24, 40, 64)  # training row lengths


def masked_texts(data_dir: Path) -> dict[str, list[str]]:
    """{"<kg>/<split>": masked question wordings, in file order} for the training and held-out splits."""
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.plan.question_text import MASK_TOKEN, mask_topics, topic_names

    specs = {
        "metaqa": lambda split: DatasetSpec(name="metaqa", split=split, hops=(1, 2, 3)),
        "wc2014": lambda split: DatasetSpec(name="wc2014", split=split),
        "demo": lambda split: DatasetSpec(name="demo", split=split),
        "webqsp-r": lambda split: DatasetSpec(name="files", data_dir=data_dir / "webqsp-r", split=split),
        "cwq-e": lambda split: DatasetSpec(name="files", data_dir=data_dir / "cwq-e", split=split),
    }
    out = {}
    for key in TRAIN + HELD_OUT[:-1]:
        kg, split = key.split("/")
        loaded = load_dataset(specs[kg](split))
        names = getattr(loaded, "entity_names", None)
        out[key] = [mask_topics(q.text, topic_names(q, names))[0] for q in loaded.questions]
    lines = (ROOT / "experiments" / "data" / "metaqa_paraphrases.tsv").read_text().splitlines()
    out["paraphrases"] = [re.sub(r"\[[^\]]*\]", MASK_TOKEN, line.split("\t")[1])
                          for line in lines if line.strip() and not line.startswith("#")]
    return out


def padded(ids: list[list[int]], length: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.zeros((len(ids), length), np.int32)
    mask = np.zeros((len(ids), length), np.int32)
    for r, seq in enumerate(ids):
        tokens[r, : len(seq)] = seq
        mask[r, : len(seq)] = 1
    return tokens, mask


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write-model", action="store_true", help="report only; keep the shipped weights")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import optax

    from stem_jax.config import EncoderConfig, default_data_dir
    from stem_jax.encoder.base import get_encoder
    from stem_jax.encoder.student import save_student, shipped_student_path, student_vectors

    began = time.time()
    load_before = load_averages()
    texts = masked_texts(Path(default_data_dir()))
    encoder = get_encoder(EncoderConfig(dot_dtype="float32"))
    cfg = encoder.cfg
    distinct = sorted({t for v in texts.values() for t in v})
    teacher = dict(zip(distinct, encoder.encode_exact(distinct), strict=True))
    ids = dict(zip(distinct, encoder.tokenizer.tokenize(distinct), strict=True))
    print(f"{len(distinct)} distinct wordings encoded by MiniLM in {time.time() - began:.0f} s", flush=True)
    train = sorted({t for key in TRAIN for t in texts[key]})
    minilm = encoder.params["params"]
    embeddings = {k: minilm[k] for k in ("word", "position", "token_type", "embed_ln")}

    def batches(pool: list[str], rng: np.random.Generator | None, size: int):
        """Same-bucket batches of ``pool`` (shuffled when ``rng``): (tokens, mask, targets, texts)."""
        by_len: dict[int, list[str]] = {}
        for t in pool:
            by_len.setdefault(next(b for b in PAD if b >= len(ids[t])), []).append(t)
        out = []
        for length, members in by_len.items():
            if rng is not None:
                members = [members[i] for i in rng.permutation(len(members))]
            for s in range(0, len(members), size):
                chunk = members[s : s + size]
                out.append((*padded([ids[t] for t in chunk], length), np.stack([teacher[t] for t in chunk]), chunk))
        if rng is not None:
            out = [out[i] for i in rng.permutation(len(out))]
        return out

    # Start: MiniLM's first layer, and the least-squares projection of its pooled output onto MiniLM's vectors.
    identity = {"kernel": jnp.eye(cfg.hidden_size), "bias": jnp.zeros(cfg.hidden_size)}
    params = {"layer": minilm["layer_0"], "proj": identity}

    @jax.jit
    def vectors(params, tokens, mask):
        return student_vectors(embeddings, params, cfg, tokens, mask)

    feats = np.concatenate([np.asarray(vectors(params, tk, m)) for tk, m, _, _ in batches(train, None, 256)])
    targets = np.concatenate([y for _, _, y, _ in batches(train, None, 256)])
    a = np.concatenate([feats, np.ones((len(feats), 1), np.float32)], 1)
    w = np.linalg.solve(a.T @ a + 0.1 * np.eye(a.shape[1]), a.T @ targets)
    params = jax.tree.map(jnp.asarray, {"layer": minilm["layer_0"], "proj": {"kernel": w[:-1], "bias": w[-1]}})

    def cosines(params, pool: list[str]) -> np.ndarray:
        got = {}
        for tk, m, y, chunk in batches(pool, None, 256):
            got.update(zip(chunk, (np.asarray(vectors(params, tk, m)) * y).sum(1), strict=True))
        return np.asarray([got[t] for t in pool])

    def summary(params) -> dict[str, dict[str, float]]:
        rows = {}
        for key in TRAIN + HELD_OUT:
            wordings = sorted(set(texts[key]))
            c = cosines(params, wordings)
            rows[key] = {"wordings": len(wordings), "mean": float(c.mean()), "min": float(c.min()),
                         "p05": float(np.quantile(c, 0.05))}
        return rows

    start = summary(params)
    @jax.jit
    def step(params, state, tokens, mask, y):
        def loss(p):
            return jnp.mean(1.0 - jnp.sum(vectors(p, tokens, mask) * y, axis=-1))

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = optimiser.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    counts: dict[str, int] = {}
    for key in TRAIN:
        for t in texts[key]:
            counts[t] = counts.get(t, 0) + 1
    # a wording many questions share is seen more often: accuracy is counted per question, not per wording
    weighted = [t for t in train for _ in range(1 + int(np.log2(counts[t])))]
    steps = args.epochs * (len(weighted) // args.batch + len(PAD))
    schedule = optax.cosine_decay_schedule(args.lr, steps)
    optimiser = optax.adam(schedule)
    state = optimiser.init(params)
    rng = np.random.default_rng(args.seed)
    history = []
    for epoch in range(args.epochs):
        losses = []
        for tk, m, y, _ in batches(weighted, rng, args.batch):
            params, state, value = step(params, state, tk, m, y)
            losses.append(float(value))
        history.append(float(np.mean(losses)))
        print(f"epoch {epoch + 1}: train loss {history[-1]:.5f} ({time.time() - began:.0f} s)", flush=True)
    final = summary(params)
    params = jax.tree.map(np.asarray, params)
    if not args.no_write_model:
        path = shipped_student_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        save_student(params, path)
        print(f"wrote {path}")
    payload = {"command": "python experiments/encoder_distill.py " + " ".join(sys.argv[1:]),
               "meta": run_metadata(), "load_average_before": load_before, "load_average_after": load_averages(),
               "seconds": time.time() - began, "train_splits": TRAIN, "held_out": HELD_OUT,
               "train_wordings": len(train), "weighted_wordings": len(weighted), "epochs": args.epochs, "batch": args.batch, "lr": args.lr,
               "loss_per_epoch": history, "cosine_start": start, "cosine_final": final}
    rows = [[key, "train" if key in TRAIN else "held out", final[key]["wordings"], f"{start[key]['mean']:.4f}",
             f"{final[key]['mean']:.4f}", f"{final[key]['p05']:.4f}", f"{final[key]['min']:.4f}"]
            for key in TRAIN + HELD_OUT]
    markdown = "\n".join([
        f"Command: `{payload['command']}`", "",
        f"Machine: {payload['meta']}", "",
        f"Load average before / after: {load_before} / {payload['load_average_after']}; "
        f"{payload['seconds']:.0f} s in all.", "",
        "Cosine between the question student's vector and MiniLM's float32 vector, per distinct masked wording "
        "(start: MiniLM's first layer with a least-squares projection; final: after training):", "",
        markdown_table(["split", "role", "wordings", "start mean", "final mean", "final p05", "final min"], rows),
    ])
    write_report(args.out, "encoder-distill", payload, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

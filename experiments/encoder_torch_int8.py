"""MiniLM in PyTorch on CPU, float32 and with dynamic int8 linear layers, against MiniLM's float32 vectors.

    STEM_DATA_DIR=../shared/data python experiments/encoder_torch_int8.py [--calls 200] [--threads 1]

PyTorch is not a dependency of stem_jax; this measures whether a CPU inference runtime's int8 kernels would make
a faster question encoder. The model is written here from the shipped MiniLM weights (no transformers package):
one question a call, no padding, attention on its own tokens. ``torch.ao.quantization.quantize_dynamic`` turns
every linear layer into int8 weights (one scale a tensor) with int8 activations quantised per call. Reports wall
and process CPU p50 per call over ``--calls`` masked MetaQA 2-hop test questions, and the cosine of each vector
to MiniLM's float32 one (the JAX encoder's). Writes ``experiments/results/encoder-torch-int8.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from paper_common import load_averages  # noqa: E402

from stem_jax.eval.report import markdown_table, run_metadata, write_report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F
    from torch import nn

    from stem_jax.config import EncoderConfig
    from stem_jax.data.registry import DatasetSpec, load_dataset
    from stem_jax.encoder.base import get_encoder
    from stem_jax.plan.question_text import mask_topics, topic_names

    encoder = get_encoder(EncoderConfig(dot_dtype="float32"))
    cfg, p = encoder.cfg, encoder.params["params"]
    p = {k: np.asarray(v) if not isinstance(v, dict) else v for k, v in p.items()}
    heads, h = cfg.num_attention_heads, cfg.hidden_size

    def linear(d):
        layer = nn.Linear(*np.asarray(d["kernel"]).shape)
        layer.weight.data = torch.tensor(np.asarray(d["kernel"]).T.copy())
        layer.bias.data = torch.tensor(np.asarray(d["bias"]))
        return layer

    def norm(d):
        layer = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        layer.weight.data, layer.bias.data = torch.tensor(np.asarray(d["scale"])), torch.tensor(np.asarray(d["bias"]))
        return layer

    class Layer(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.qkv, self.out_attn, self.ln1 = linear(d["qkv"]), linear(d["attn_out"]), norm(d["attn_ln"])
            self.inner, self.out, self.ln2 = linear(d["intermediate"]), linear(d["out"]), norm(d["out_ln"])

        def forward(self, x):
            n = x.shape[0]
            q, k, v = self.qkv(x).view(n, 3, heads, h // heads).unbind(1)
            weights = torch.softmax(torch.einsum("qnd,knd->nqk", q, k) / math.sqrt(h // heads), -1)
            x = self.ln1(x + self.out_attn(torch.einsum("nqk,knd->qnd", weights, v).reshape(n, h)))
            return self.ln2(x + self.out(F.gelu(self.inner(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = torch.tensor(np.asarray(p["word"]["embedding"]))
            self.position = torch.tensor(np.asarray(p["position"]))
            self.type0 = torch.tensor(np.asarray(p["token_type"])[0])
            self.ln = norm(p["embed_ln"])
            self.layers = nn.ModuleList([Layer(p[f"layer_{i}"]) for i in range(cfg.num_hidden_layers)])

        def forward(self, ids):
            x = self.ln(self.word[ids] + self.position[: len(ids)] + self.type0)
            for layer in self.layers:
                x = layer(x)
            pooled = x.mean(0)
            return pooled / pooled.norm()

    torch.set_num_threads(args.threads)
    float_model = Model().eval()
    int8_model = torch.ao.quantization.quantize_dynamic(float_model, {nn.Linear}, dtype=torch.qint8)
    loaded = load_dataset(DatasetSpec(name="metaqa", split="test", hops=(2,)))
    wordings = sorted({mask_topics(q.text, topic_names(q, None))[0] for q in loaded.questions})
    reference = encoder.encode_exact(wordings)
    ids = [torch.tensor(r) for r in encoder.tokenizer.tokenize(wordings)]
    load_before, rows, summary = load_averages(), [], {}
    with torch.inference_mode():
        for name, model in (("float32", float_model), ("int8 dynamic", int8_model)):
            vectors = np.stack([model(i).numpy() for i in ids])
            cos = (vectors * reference).sum(1)
            wall, cpu = [], []
            for j in range(args.calls + 20):
                w, c = time.perf_counter(), time.process_time()
                model(ids[j % len(ids)])
                if j >= 20:
                    wall.append(time.perf_counter() - w)
                    cpu.append(time.process_time() - c)
            summary[name] = {"wall_p50_ms": round(1e3 * float(np.median(wall)), 3),
                             "cpu_p50_ms": round(1e3 * float(np.median(cpu)), 3),
                             "cosine_min": round(float(cos.min()), 5), "cosine_mean": round(float(cos.mean()), 5)}
            s = summary[name]
            rows.append([name, args.threads, s["wall_p50_ms"], s["cpu_p50_ms"], s["cosine_min"], s["cosine_mean"]])
    meta = run_metadata()
    payload = {"meta": meta, "command": "python experiments/encoder_torch_int8.py " + " ".join(sys.argv[1:]),
               "torch": torch.__version__, "wordings": len(wordings), "calls": args.calls,
               "load_average_before": load_before, "load_average_after": load_averages(), "summary": summary}
    table = markdown_table(["forward", "threads", "wall p50 ms", "CPU p50 ms", "min cosine to float32",
                            "mean cosine"], rows)
    write_report(args.out, "encoder-torch-int8", payload,
                 f"Command: `{payload['command']}`\n\nMachine: {meta}; torch {torch.__version__}\n\n"
                 f"Load average before / after: {load_before} / {payload['load_average_after']}.\n\n"
                 f"MiniLM in PyTorch, one masked MetaQA 2-hop test question a call ({len(wordings)} wordings):\n\n"
                 f"{table}\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

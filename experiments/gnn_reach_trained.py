"""Triple-GNN guidance inference with a trained checkpoint: plain batched forward (method=full) vs the exact
reach-aware forward (method=reach), on the oracle plans of the first N MetaQA test questions per hop, no cache.

    STEM_DATA_DIR=../shared/data python experiments/gnn_reach_trained.py N [METHODS]   (N=0: the full split;
    METHODS default full,reach,full,reach; GNN_CHECKPOINT=RUN, default /work/runs/gnn-metaqa)

Each listed pass runs in turn (the first pass of a method compiles); prints seconds, questions/s, load averages
and the differences between the last full and reach passes.
"""
import os
import sys
import time

import numpy as np

from stem_jax import Engine

limit = int(sys.argv[1]) or None
methods = (sys.argv[2] if len(sys.argv) > 2 else "full,reach,full,reach").split(",")
engine = Engine.open("metaqa", planner="oracle", split="test", limit=limit, guidance=os.environ.get("GNN_CHECKPOINT", "/work/runs/gnn-metaqa"))
g = engine.guidance
g.cache_dir = None
qs = [q for q in engine.dataset.questions]
planner = engine.planner
plans = planner.plan_batch(qs)
pairs = []
for q, beams in zip(qs, plans, strict=True):
    for s in (beams if isinstance(beams, list) else [beams]):
        pairs.append((q, getattr(s, "schema", s)))
print("pairs", len(pairs), flush=True)
out = {}
for method in methods:
    g.method = method
    began = time.perf_counter()
    # 1,024 pairs per call, as the provider's cached path does (all 38,851 subgraphs at once need > 24 GB)
    parts = [g.table(pairs[i : i + 1024], show_progress=False) for i in range(0, len(pairs), 1024)]
    table = type(parts[0])(ids=np.concatenate([t.ids for t in parts]), probs=np.concatenate([t.probs for t in parts]),
                           path=parts[0].path, computed_rows=len(pairs), seconds=sum(t.seconds for t in parts))
    dt = time.perf_counter() - began
    out[method] = table
    print(method, f"{dt:.1f}s {len(qs)/dt:.1f} q/s", os.getloadavg(), flush=True)
if "full" not in out or "reach" not in out:
    sys.exit(0)
a, b = out["full"], out["reach"]
print("max prob diff", float(np.abs(a.probs - b.probs).max()), "rows with differing ids", int((a.ids != b.ids).any(1).sum()), "of", len(pairs))

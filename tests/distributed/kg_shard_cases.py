"""Random KGs traced by the one-device tracer and by the KG-sharded tracer at several device counts.

Run as a script in a fresh interpreter (the forced host device count must be set before JAX starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/distributed/kg_shard_cases.py --cases 12 --seed 0

Prints one JSON line per case ({"case", "devices", ..., "identical"}) and exits 1 when any case differs.
With ``--process-id I --processes P --coordinator HOST:PORT`` it joins a ``jax.distributed`` job and traces
over a mesh of every process's devices; process 0 writes the sharded outputs to ``--out`` (npz) for the
caller to compare with its own one-device trace (:func:`case_inputs` rebuilds the same case anywhere).

Embeddings lie on a dyadic grid (every score exact, so ties happen and must break the same way) or are
random float16 rows; the KG has a hub, paired inverse relations and self-loops; every convention
(direction, used-triple rule), both strategies, the relation bonus, τ-free admission, guidance,
halted overflow and a compact row format (int8 codes with a scale, or a pca projection) are drawn.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

N_NODES, N_TRIPLES, DIM, MAX_STEPS, BATCH = 16, 96, 8, 3, 3
SHAPES = [dict(frontier=4, node_matches=2, window=8, guidance=4), dict(frontier=16, node_matches=16, window=16, guidance=4)]


def case_inputs(seed: int) -> dict:
    """Case ``seed``: the KG, rows, batch and static options (deterministic, host arrays only)."""
    from stem_jax.kg.index import build_index

    rng = np.random.default_rng(seed)
    triples = [(f"e{i}", "r0", f"e{i}") for i in range(0, N_NODES, 5)]
    triples += [(f"e{i}", "r1", f"e{(i + 1) % N_NODES}") for i in range(N_NODES)]
    while len(dict.fromkeys(triples)) < N_TRIPLES:
        h, t, r = int(rng.integers(0, N_NODES)), int(rng.integers(0, N_NODES)), int(rng.integers(0, 3))
        h = 0 if rng.random() < 0.3 else h  # a hub
        triples.append((f"e{h}", f"r{r}", f"e{t}"))
        if rng.random() < 0.4:
            triples.append((f"e{t}", f"r{r}_inverse", f"e{h}"))
    index = build_index(list(dict.fromkeys(triples))[:N_TRIPLES])
    grid = bool(rng.random() < 0.7)

    def draw(*shape):
        if grid:
            return (rng.integers(-2, 3, shape) / 4).astype(np.float32)
        x = rng.standard_normal(shape).astype(np.float32)
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float16).astype(np.float32)

    rows = draw(index.num_triples, DIM)
    row_format = str(rng.choice(["float", "float", "int8", "pca4-int8"]))
    steps = np.full((BATCH, MAX_STEPS, 3), -1, np.int32)
    mask = np.zeros((BATCH, MAX_STEPS), bool)
    for b in range(BATCH):
        n_steps = int(rng.integers(1, MAX_STEPS + 1))
        parents = [0] + [int(rng.integers(0, s + 1)) for s in range(1, n_steps)]
        for s in range(n_steps):
            steps[b, s] = (parents[s], s + 1, int(rng.integers(-1, index.num_relations)))
        mask[b, :n_steps] = True
    shapes = SHAPES[int(rng.integers(0, 2))]
    guidance = np.full((BATCH, shapes["guidance"]), -1, np.int32)
    if rng.random() < 0.4:
        guidance[:, :3] = rng.integers(0, index.num_entities, (BATCH, 3))
    anchor = rng.integers(0, index.num_entities, BATCH).astype(np.int32)
    anchor[-1] = -1 if rng.random() < 0.3 else anchor[-1]  # a padding run
    return {
        "index": index, "rows": rows, "row_format": row_format, "shapes": shapes,
        "batch": dict(steps=steps, step_mask=mask, step_emb=draw(BATCH, MAX_STEPS, DIM), anchor=anchor,
                      anchor_score=np.ones(BATCH, np.float32), guidance=guidance,
                      forward=rng.random((BATCH, MAX_STEPS)) < 0.5),
        "tau": float(rng.choice([0.0, 0.5])), "theta": float(rng.choice([0.0, 0.25, 0.5])),
        "static": dict(precision=bool(rng.random() < 0.4), relation_bonus=bool(rng.random() < 0.3),
                       tau_admits=bool(rng.random() < 0.7), direction=str(rng.choice(["undirected", "directed"])),
                       used=str(rng.choice(["run", "branch", "step"])), halt_overflowed=bool(rng.random() < 0.2)),
        "backend": str(rng.choice(["blocks", "flat"])),  # how the shards read their edges (one device: blocks)
    }


def stored_rows(case: dict):
    """The case's rows as the tracer stores them: float32, or a compact format."""
    from stem_jax.encoder.compact import CompactRows, RowFormat, encode_rows, fit_projection

    rows = case["rows"]
    if case["row_format"] == "float":
        return rows
    fmt = RowFormat.parse(case["row_format"])
    basis = mean = None
    if fmt.dims is not None:
        basis, mean, _ = fit_projection(rows, fmt.dims)
    codes, scale = encode_rows(rows, fmt, basis, mean)
    return CompactRows(fmt.name, codes, scale, basis, mean)


def one_device(case: dict):
    """The one-device tracer's outputs (host arrays) for ``case``."""
    import jax.numpy as jnp

    from stem_jax.trace.tracer import Hyper, KGArrays, TraceBatch, TracerShapes, trace_batch

    kg = KGArrays.from_index(case["index"], stored_rows(case))
    out = trace_batch(kg, TraceBatch(**case["batch"]), Hyper(jnp.float32(case["tau"]), jnp.float32(case["theta"])),
                      shapes=TracerShapes(**case["shapes"]), backend="blocks", **case["static"])
    return [np.asarray(a) for a in out]


def sharded(case: dict, devices) -> list[np.ndarray]:
    """The KG-sharded tracer's outputs over ``devices`` for ``case``."""
    from stem_jax.shard import kg_mesh, local_result, shard_kg, trace_batch_sharded
    from stem_jax.trace.tracer import Hyper, TraceBatch, TracerShapes

    mesh = kg_mesh(devices)
    kg, _ = shard_kg(case["index"], stored_rows(case), mesh)
    out = trace_batch_sharded(kg, TraceBatch(**case["batch"]),
                              Hyper(np.float32(case["tau"]), np.float32(case["theta"])), mesh=mesh,
                              shapes=TracerShapes(**case["shapes"]), backend=case["backend"], **case["static"])
    return list(local_result(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default="2,3,8",
                        help="device counts to shard over, one per case in turn (local runs; 'all' tries each)")
    parser.add_argument("--process-id", dest="process_id", type=int, default=None)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--coordinator", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import jax

    if args.process_id is not None:  # one process of a jax.distributed job: shard over every process's devices
        jax.distributed.initialize(args.coordinator, args.processes, args.process_id)
        results = {}
        for seed in range(args.seed, args.seed + args.cases):
            for i, a in enumerate(sharded(case_inputs(seed), jax.devices())):
                results[f"{seed}_{i}"] = a
        if args.process_id == 0:
            np.savez(args.out, **results)
        print(json.dumps({"process": args.process_id, "devices": jax.device_count(),
                          "local_devices": jax.local_device_count(), "cases": args.cases}), flush=True)
        return 0
    failed = 0
    every = args.devices == "all"
    counts = [1, 2, 3, 8] if every else [int(c) for c in args.devices.split(",")]
    for seed in range(args.seed, args.seed + args.cases):
        case = case_inputs(seed)
        want = one_device(case)
        for count in counts if every else [counts[seed % len(counts)]]:
            got = sharded(case, jax.devices()[:count])
            same = all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
            failed += not same
            print(json.dumps({"case": seed, "devices": count, "format": case["row_format"], "backend": case["backend"],
                              **case["static"],
                              "bindings": int((want[0] >= 0).sum()), "identical": same}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

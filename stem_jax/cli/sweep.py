"""``stem-jax sweep``: a λ/τ/θ/K' grid in one compiled call per batch, with tables and figures."""

from __future__ import annotations

import argparse
import time

from stem_jax.cli.args import add_run_folder_flag, command_parser, config_from_args, run_folder
from stem_jax.cli.report import markdown_table, run_metadata, write_report
from stem_jax.config import as_dict
from stem_jax.data.sampling import sample_per_hop


def add_sweep_parser(sub) -> None:
    from stem_jax.cli import gnn, planning

    p = command_parser(
        sub, "sweep", help="evaluate a λ/τ/θ/K' grid in one compiled call per batch (resumable, heat maps)",
        description="Plan, embed and compute GNN guidance once, then trace every grid point of the cartesian "
        "product of --lambda, --tau, --theta and --k-prime together (a vmapped grid axis, not a loop). Each "
        "point's predictions.jsonl is written under --out/points/<label>/ chunk by chunk (a rerun resumes) and "
        "scored exactly like `stem-jax eval`. Writes sweep.json, sweep.md and one heat map PNG per metric "
        "(Hit@1, F1, coverage) for each 2-D slice, or a line plot for a 1-D sweep.")
    planning.add_planner_flags(p, plans=True)
    gnn.add_guidance_flags(p)
    grid = p.add_argument_group("grid (an axis left out keeps the configured value)")
    grid.add_argument("--lambda", dest="lams", default=None, help="λ values, e.g. 1.2,1.5,1.8 (anchoring bias)")
    grid.add_argument("--tau", dest="taus", default=None, help="τ values, e.g. 0.2,0.5 (triple bias)")
    grid.add_argument("--theta", dest="thetas", default=None, help="θ values (Breadth threshold)")
    grid.add_argument("--k-prime", dest="k_primes", default=None, help="K' values, e.g. 1,2,4,8 (guidance |T|·K')")
    grid.add_argument("--points-per-call", dest="points_per_call", type=int, default=None,
                      help="grid points per compiled call (default: all; 1 = the point-by-point loop)")
    grid.add_argument("--grid-batch", dest="grid_batch", type=int, default=-1,
                      help="points vmapped together inside a call (default: all on GPU/TPU, 1 on CPU = a scan "
                      "over points; 0 = vmap all)")
    p.add_argument("--subset", type=int, default=None,
                   help="deterministic stratified subset: per hop, the N questions with the lowest sha256(qid)")
    add_run_folder_flag(p, "sweep-<dataset>-<split>")
    p.add_argument("--overwrite", action="store_true",
                   help="drop the predictions of grid points that ran with other settings instead of refusing")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    from stem_jax.cli.engine_args import open_engine
    from stem_jax.errors import StemError
    from stem_jax.methods.stem.sweep import make_grid, parse_values, plot_sweep, run_sweep, sweep_table

    config = config_from_args(args)
    started, cpu_started = time.perf_counter(), time.process_time()
    axes = {"lams": parse_values(args.lams, "--lambda"), "taus": parse_values(args.taus, "--tau"),
            "thetas": parse_values(args.thetas, "--theta"),
            "k_primes": parse_values(args.k_primes, "--k-prime", integer=True)}
    make_grid(config, **axes)  # bad values fail before anything is loaded
    if args.points_per_call is not None and args.points_per_call < 1:
        raise StemError(f"--points-per-call must be 1 or more, got {args.points_per_call}")
    if args.guidance == "none" and (axes["lams"] or axes["taus"] or axes["k_primes"]):
        print("note: --guidance none: λ, τ and K' have no effect without a guidance graph")
    engine = open_engine(args, config)
    # the sweep's own selection: the engine's dataset keeps every loaded question
    questions = sample_per_hop(list(engine.dataset.questions), args.subset, rule="lowest_hash")
    if args.subset is not None:
        print(f"stratified subset: {len(questions)} questions ({args.subset} per hop, lowest sha256(qid))")
    out = run_folder(args, engine.dataset.name)
    method = engine.method("stem")
    points = make_grid(config, **axes, default_theta=method.settings.theta)
    print(f"sweep: {len(points)} grid points x {len(questions)} questions -> {out}")
    result = run_sweep(method, questions, points, out, chunk_size=config.engine.chunk_questions,
                       points_per_call=args.points_per_call,
                       grid_batch=None if args.grid_batch == 0 else args.grid_batch, fingerprint=engine.results_fingerprint("stem"),
                       overwrite=args.overwrite, show_progress=not args.no_progress)
    wall = time.perf_counter() - started
    headers, rows = sweep_table(result["points"])
    table = markdown_table(headers, rows)
    figures = plot_sweep(result["points"], out)
    title = (f"{engine.dataset.name}/{args.split}, planner {engine.planner_spec.label}, guidance {args.guidance}, "
             f"{len(points)} points x {result['questions']} questions (percent)")
    stages = result["stage_seconds_this_run"]
    timing = (f"wall {wall:.1f}s: prepare {result['prepare_seconds']:.1f}s, guidance rows "
              f"{result['guidance_seconds']:.1f}s, anchor {stages['anchor']:.1f}s, trace {stages['trace']:.1f}s, "
              f"answers {stages['answer']:.1f}s, {result['compiled_calls_this_run']} grid calls")
    print(f"\n{title}:\n\n{table}\n\n{timing}")
    payload = {"meta": run_metadata(), "command": "stem-jax " + " ".join(getattr(args, "argv", [])),
               "dataset": engine.dataset.name, "split": args.split, "planner": engine.planner_spec.label,
               "planner_info": engine.planner_info, "guidance": args.guidance, "config": as_dict(config),
               "subset_per_hop": args.subset, "wall_seconds": wall,
               "cpu_seconds": time.process_time() - cpu_started, "figures": [f.name for f in figures], **result}
    paths = write_report(out, "sweep", payload, f"{title}\n\n{table}\n\n{timing}")
    print(f"\nwrote {paths[0]}, {paths[1]} and {len(figures)} figures  [{wall:.1f}s]")
    return 0

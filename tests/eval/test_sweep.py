"""``stem-jax sweep``: a grid traced in one vmapped call equals one ``eval`` per point, and resumes."""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from stem_jax.config import EncoderConfig, StemConfig
from stem_jax.data.registry import DatasetSpec, load_dataset
from stem_jax.encoder import HashingEncoder
from stem_jax.errors import StemError
from stem_jax.eval.scoring import read_finished
from stem_jax.kg.embeddings import build_kg_embeddings
from stem_jax.kg.index import build_index
from stem_jax.methods.stem import StemMethod, StemPipeline, evaluate
from stem_jax.methods.stem.ablation import GUIDANCE_ABLATIONS, run_guidance_ablation
from stem_jax.methods.stem.calibration import calibration_path
from stem_jax.methods.stem.sweep import GridPoint, make_grid, parse_values, plot_sweep, run_sweep
from stem_jax.plan.oracle import OraclePlanner


class FakeGuidance:
    """Deterministic stand-in for the Triple-GNN: per question the topic, the gold answers, then
    pseudo-random entities; a run gets the first |T|·K' (so λ, τ and K' all change results)."""

    def __init__(self, index, k_prime=2):
        self.index, self.k_prime = index, k_prime

    def neighbours(self, entities, limit=6):
        """KG neighbours of ``entities`` (as a GNN marks the topic's surroundings): guided triples of
        other relations, which τ may admit into Breadth or not (``engine.guidance_admits``)."""
        index, found = self.index, []
        for e in entities:
            for t in np.asarray(index.csr_triples)[index.csr_offsets[e] : index.csr_offsets[e + 1]][:limit]:
                h, _, tail = np.asarray(index.triples)[t]
                found.append(int(tail if h == e else h))
        return found

    def with_k_prime(self, k_prime):
        return FakeGuidance(self.index, k_prime)

    def attach(self, questions, runs_per_question, show_progress=False):
        ids = self.index.entity_ids
        for question, runs in zip(questions, runs_per_question, strict=True):
            seed = int(hashlib.sha256(question.qid.encode()).hexdigest()[:8], 16)
            noise = np.random.default_rng(seed).choice(self.index.num_entities, 32, replace=False)
            known = [ids[e] for e in (*question.topic_entities, *question.answers) if e in ids]
            base = list(dict.fromkeys([*known, *self.neighbours(known[:1]), *map(int, noise)]))
            for run in runs:
                run.guidance = np.asarray(base[: len(run.plan.schema.triples) * self.k_prime], np.int32)
        return {}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    dataset = load_dataset(DatasetSpec(name="demo"))
    index = build_index(dataset.triples)
    encoder = HashingEncoder()  # the CLI's hashing encoder: the CLI test reuses these compiled shapes
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb"), chunk_rows=1024, progress=False)
    return dataset, index, encoder, embeddings


def _evaluator(demo, k_prime=2, *, preset="paper", guided=True, **tracer):
    """A pipeline as ``stem-jax eval`` builds it from flags: ``--engine.preset`` (paper: cosine anchoring, so
    λ matters), ``--tracer.*`` overrides, small batches and a 2-level capacity ladder."""
    dataset, index, encoder, embeddings = demo
    config = StemConfig(encoder=EncoderConfig(name="hashing"))
    engine = dataclasses.replace(config.engine, preset=preset, batch_precision=32, batch_breadth=8, frontier=4,
                                 node_matches=2, max_frontier=8, chunk_questions=24)
    config = dataclasses.replace(config, engine=engine, tracer=dataclasses.replace(config.tracer, top_n=8, **tracer),
                                 guidance=dataclasses.replace(config.guidance, k_prime=k_prime))
    return StemPipeline(dataset, index, embeddings, encoder, config,
                        guidance=FakeGuidance(index, k_prime) if guided else None)


class _Scores(list):
    """Answer scores equal within 1e-5: a vmapped dot product may sum in another order. (Rounding both sides to
    5 decimals instead failed on 5.668866 vs 5.668865, a 1e-6 difference across a rounding boundary.)"""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, list) and len(self) == len(other) and bool(np.allclose(self, other, rtol=0, atol=1e-5))

    __hash__ = None


def _records(path):
    """Records without timings and run-folder stamps; answer scores compared within 1e-5."""
    return {qid: {k: (_Scores(v) if k == "scores" else v) for k, v in r.items() if k not in ("ms", "question_sha")}
            for qid, r in read_finished(path).items()}


def _two_hop(demo, n):
    return [q for q in demo[0].questions if q.hops == 2][:n]


# slow: ~25 s: a 2x2 grid and four evals; test_k_prime_axis_equals_evals_with_that_k_prime stays quick
@pytest.mark.slow
def test_two_by_two_grid_equals_four_separate_evals_and_resumes(demo, tmp_path):
    questions = _two_hop(demo, 40)  # one steps bucket: few compilations
    planner = OraclePlanner().plan
    grid = [GridPoint(lam, tau, 0.6, 2) for lam in (1.0, 2.5) for tau in (0.0, 1.0)]
    method = StemMethod.from_pipeline(_evaluator(demo), planner)
    sweep = run_sweep(method, questions, grid, tmp_path / "sweep", chunk_size=24, grid_batch=2, show_progress=False,
                      log=lambda _: None)  # two points vmapped at a time inside one scanned call
    assert sweep["compiled_calls_this_run"] == 2  # one vmapped call per chunk of questions, not one per point
    seen = set()
    for point, result in zip(grid, sweep["points"], strict=True):
        alone = evaluate(_evaluator(demo, lam=point.lam, tau=point.tau), questions, planner,
                         tmp_path / point.label, show_progress=False, log=lambda _: None)
        swept = _records(tmp_path / "sweep" / "points" / point.label / "predictions.jsonl")
        assert swept == _records(tmp_path / point.label / "predictions.jsonl")
        assert result["overall"] == alone["overall"] and result["groups"] == alone["groups"]
        seen.add(json.dumps([swept[q.qid]["prediction"] for q in questions]))
    assert len(seen) > 1, "the grid points should not all give the same answers"

    # a killed sweep: one point lost its last records (and has a torn line), another never started
    first = tmp_path / "sweep" / "points" / grid[0].label / "predictions.jsonl"
    lines = first.read_text().splitlines()
    first.write_text("\n".join(lines[:20]) + '\n{"id": "torn')
    (tmp_path / "sweep" / "points" / grid[3].label / "predictions.jsonl").unlink()
    before = {p.label: _records(tmp_path / "sweep" / "points" / p.label / "predictions.jsonl") for p in grid[1:3]}
    again = run_sweep(StemMethod.from_pipeline(_evaluator(demo), planner), questions, grid, tmp_path / "sweep",
                      chunk_size=24, show_progress=False, log=lambda _: None)
    assert [r["overall"] for r in again["points"]] == [r["overall"] for r in sweep["points"]]
    for p in grid[1:3]:
        assert _records(tmp_path / "sweep" / "points" / p.label / "predictions.jsonl") == before[p.label]


def test_k_prime_axis_equals_evals_with_that_k_prime(demo, tmp_path):
    questions = _two_hop(demo, 24)
    planner = OraclePlanner().plan
    grid = [GridPoint(2.5, 1.0, 0.6, k) for k in (1, 2, 3, 4)]  # 4 points: the 2x2 test's compiled shapes
    sweep = run_sweep(StemMethod.from_pipeline(_evaluator(demo), planner), questions, grid, tmp_path / "s",
                      chunk_size=24, grid_batch=None, show_progress=False, log=lambda _: None)  # all 4 vmapped
    for point, result in zip(grid, sweep["points"], strict=True):
        alone = evaluate(_evaluator(demo, k_prime=point.k_prime, lam=2.5, tau=1.0), questions, planner,
                         tmp_path / point.label, show_progress=False, log=lambda _: None)
        assert _records(tmp_path / "s" / "points" / point.label / "predictions.jsonl") == _records(
            tmp_path / point.label / "predictions.jsonl")
        assert result["overall"] == alone["overall"]
    paths = plot_sweep(sweep["points"], tmp_path)
    assert [p.name for p in paths] == ["sweep-k_prime.png"] and paths[0].stat().st_size > 0


@pytest.fixture(scope="module")
def calibrated(demo, tmp_path_factory):
    """The demo KG with its own embeddings folder holding a dev calibration for the default engine: θ=0.3,
    directed matching, triples used once per step."""
    dataset, index, encoder, _ = demo
    embeddings = build_kg_embeddings(index, encoder, tmp_path_factory.mktemp("emb-calibrated"), chunk_rows=1024,
                                     progress=False)
    engine = StemConfig().engine
    calibration_path(embeddings).write_text(json.dumps(  # conventions other than the defaults: the tools must use them
        {"theta": 0.3, "engine": {"relation_bonus": engine.relation_bonus, "strategy": engine.strategy},
         "conventions": {"direction": "directed", "used_triples": "step"}}))
    return dataset, index, encoder, embeddings


# guided points train and run the GNN (~15-20 s each on 2 cores): slow, run by CI; unguided ones stay quick
@pytest.mark.parametrize("guided", [pytest.param(True, marks=pytest.mark.slow), False], ids=["guided", "unguided"])
@pytest.mark.parametrize("preset", ["default", "paper"])
def test_sweep_points_equal_evals_with_their_flags(calibrated, tmp_path, guided, preset):
    """Each point equals eval with that point's flags, under the default preset (exact anchoring,
    relation bonus, τ outside Breadth's θ test, beam ranking whose gap τ widens; θ the dev calibration) and
    under the paper preset (θ the configured one), with and without guidance."""
    questions = [q for q in calibrated[0].questions if q.hops in (1, 2)][::6][:36]
    planner = OraclePlanner().plan
    base = _evaluator(calibrated, preset=preset, guided=guided)
    theta = 0.3 if preset == "default" else 0.6
    assert base.theta == theta and base.settings.theta_source == ("calibration" if preset == "default" else "config")
    assert base.tracer_switches()["direction"] == ("directed" if preset == "default" else "undirected")
    grid = make_grid(base.config, lams=(1.5,), taus=(0.5, 2.0), default_theta=base.theta)
    assert {p.theta for p in grid} == {theta}
    sweep = run_sweep(StemMethod.from_pipeline(base, planner), questions, grid, tmp_path / "sweep", chunk_size=24,
                      show_progress=False, log=lambda _: None)
    for point, result in zip(grid, sweep["points"], strict=True):
        alone = _evaluator(calibrated, preset=preset, guided=guided, lam=point.lam, tau=point.tau)
        summary = evaluate(alone, questions, planner, tmp_path / point.label, show_progress=False, log=lambda _: None)
        swept = _records(tmp_path / "sweep" / "points" / point.label / "predictions.jsonl")
        assert swept == _records(tmp_path / point.label / "predictions.jsonl")
        assert result["overall"] == summary["overall"]
        assert {r["theta"] for r in swept.values()} == {theta}


def test_every_ablation_row_equals_eval_with_its_flags(calibrated, tmp_path):
    """Each ablate-guidance row traces at the calibrated θ and equals eval with its λ/τ flags."""
    questions = [q for q in calibrated[0].questions if q.hops in (1, 2)][1::6][:24]
    planner = OraclePlanner().plan
    method = StemMethod.from_pipeline(_evaluator(calibrated, preset="default"), planner)
    results = run_guidance_ablation(method, questions, tmp_path / "ablate", show_progress=False, log=lambda _: None)
    for name, folder, lam, tau in GUIDANCE_ABLATIONS:
        flags = {k: v for k, v in (("lam", lam), ("tau", tau)) if v is not None}
        alone = evaluate(_evaluator(calibrated, preset="default", **flags), questions, planner, tmp_path / folder,
                         show_progress=False, log=lambda _: None)
        assert _records(tmp_path / "ablate" / folder / "predictions.jsonl") == _records(
            tmp_path / folder / "predictions.jsonl"), name
        assert results[name]["overall"] == alone["overall"] and results[name]["theta"] == 0.3


def test_one_point_sweep_equals_eval_command(tmp_path):
    from stem_jax.cli.main import main

    common = ["--dataset", "demo", "--hops", "2", "--encoder.name=hashing", "--limit", "8",
              "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--engine.batch_precision=32",
              "--engine.batch_breadth=8", "--engine.frontier=4", "--engine.node_matches=2", "--engine.max_frontier=8",
              "--engine.chunk_questions=24", "--tracer.top_n=8", "--tracer.lam=1.2", "--engine.preset=paper"]
    assert main(["eval", *common, "--out", str(tmp_path / "eval")]) == 0
    assert main(["sweep", *common, "--tau", "0.5", "--out", str(tmp_path / "sweep")]) == 0
    point = GridPoint(1.2, 0.5, 0.6, 4)
    assert _records(tmp_path / "sweep" / "points" / point.label / "predictions.jsonl") == _records(
        tmp_path / "eval" / "predictions.jsonl")
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["points"][0]["point"] == point.as_dict()


def test_grid_values_and_plots(tmp_path):
    config = StemConfig()
    grid = make_grid(config, lams=parse_values("1.2,1.5", "--lambda"), taus=parse_values("0.2,0.5,0.8", "--tau"))
    assert len(grid) == 6 and {p.theta for p in grid} == {config.tracer.theta}
    assert [(p.lam, p.tau) for p in grid[:3]] == [(1.2, 0.2), (1.2, 0.5), (1.2, 0.8)]
    for bad in ("1.2,x", ",", "1,1"):
        with pytest.raises(StemError):
            parse_values(bad, "--lambda")
    with pytest.raises(StemError):
        make_grid(config, k_primes=(0,))
    fake = [{"point": p.as_dict(), "overall": {"mean": {"hit_at_1": 0.1 * i, "f1": 0.05 * i, "coverage": 0.5}},
             "groups": {}} for i, p in enumerate(grid)]
    names = sorted(p.name for p in plot_sweep(fake, tmp_path))
    assert names == ["sweep-coverage-lam-x-tau.png", "sweep-f1-lam-x-tau.png", "sweep-hit_at_1-lam-x-tau.png"]

"""The tables an eval prints and the JSON/Markdown reports it writes (``metrics.json``/``.md`` of a run folder,
the results files of experiments and benchmarks), each file written atomically."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stem_jax import atomic
from stem_jax.errors import StemError


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            if value.is_integer() or abs(value) >= 100:
                return f"{value:.0f}"
            return f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def summary_table(summary: dict, *, decimals: int | None = None) -> str:
    """Per-hop metrics of a scored run (percent), the table `eval` and the demo print; ``decimals``: write
    every percentage with that many decimals (the demo's one), else rounded to 2 and trimmed."""
    columns = [("hit", "Hit"), ("hit_at_1", "Hit@1"), ("f1", "F1"), ("precision", "Precision"), ("recall", "Recall"),
               ("rog_hit", "RoG Hit"), ("coverage", "Coverage"), ("overflow_questions", "overflowed")]
    rows = []
    groups = dict(summary["groups"])
    groups["all"] = summary["overall"]
    for name, stats in groups.items():
        mean = stats["mean"]
        rows.append([name, stats["n"]] + [("-" if k not in mean else round(100 * mean[k], 2) if decimals is None
                                           else f"{100 * mean[k]:.{decimals}f}") for k, _ in columns])
    table = markdown_table(["hops", "questions"] + [title for _, title in columns], rows)
    every = summary.get("all_questions")
    if every and every.get("dropped"):
        mean = every["mean"]
        cells = ", ".join(f"{title} {100 * mean[k]:.2f}" for k, title in columns if k in mean)
        reasons = "; ".join(f"{reason}: {n}" for reason, n in every["dropped"].items())
        table += (f"\nOver every question of the split ({every['n']}; not answerable, counted as misses: {reasons}): "
                  f"{cells}\n")
    return table


def run_metadata() -> dict[str, Any]:
    """Machine, versions and commit, stored beside every number."""
    import jax

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=False, cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    device = jax.devices()[0]
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # a copy of the tree sent elsewhere (the GPU machine's) may carry a stale .git: STEM_COMMIT wins
        "commit": os.environ.get("STEM_COMMIT") or commit,
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device": getattr(device, "device_kind", device.platform),
    }


def portable_paths(value: Any, repo_root: Path | None = None, data_root: Path | None = None) -> Any:
    """``value`` (a string, or dicts and lists of them) with this machine's paths written as ``$STEM_DATA_DIR``
    (``data_root``, else the environment's), ``$STEM_CACHE_DIR`` or relative to ``repo_root``, and this
    interpreter as ``python``, so a results file names no machine."""
    if isinstance(value, dict):
        return {k: portable_paths(v, repo_root, data_root) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_paths(v, repo_root, data_root) for v in value]
    if not isinstance(value, str):
        return value
    if data_root is not None:
        value = value.replace(str(data_root), "$STEM_DATA_DIR")
    for variable in ("STEM_DATA_DIR", "STEM_CACHE_DIR"):
        where = os.environ.get(variable)
        if where:
            value = value.replace(str(Path(where).resolve()), f"${variable}").replace(where, f"${variable}")
    if repo_root is not None:
        value = value.replace(str(Path(repo_root).resolve()) + "/", "")
    return value.replace(sys.executable, "python")


def write_report(out_dir: Path, name: str, payload: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write ``<out_dir>/<name>.json`` and ``.md``, each atomically (a kill never leaves half a report).

    Raises:
      StemError: the folder or a file cannot be written (read-only, full disk): one line naming the
        file, and that the work already in the folder (a run's predictions) is kept.
    """
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    text = json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n"
    target = out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for target, body in ((json_path, text), (md_path, markdown + "\n")):
            atomic.write_text_atomic(target, body)
    except OSError as err:
        kept = " (the predictions beside it are kept)" if (out_dir / "predictions.jsonl").is_file() else ""
        raise StemError(f"{target}: cannot write the {name} report ({err.strerror or err}){kept}\n"
                        "  how to fix: make the folder writable and run the same command again (a run resumes and only "
                        "writes the report), or pass --out a writable folder") from None
    return json_path, md_path

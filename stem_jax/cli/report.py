"""Tables the commands print, and the JSON/Markdown files they write: :mod:`stem_jax.eval.report`, which the
eval loop writes run folders' reports with, under the name the commands and experiment scripts import."""

from stem_jax.eval.report import markdown_table, run_metadata, summary_table, write_report

__all__ = ["markdown_table", "run_metadata", "summary_table", "write_report"]

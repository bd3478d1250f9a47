"""Benchmarks behind `stem-jax bench`: each prints a table and writes JSON + Markdown."""

"""stem_jax: a JAX engine for Structure-Tracing Evidence Mining (STEM) over knowledge graphs."""

__version__ = "0.1.0"

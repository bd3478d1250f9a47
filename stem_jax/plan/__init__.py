"""Planners: questions -> schema graphs (:mod:`stem_jax.plan.schema`), the oracle upper bound first."""

from stem_jax.plan.oracle import (
    METAQA_RELATION_TABLE,
    GoldPaths,
    OraclePlanner,
    derive_metaqa_relation_table,
    gold_path_triples,
    gold_paths,
    metaqa_gold_path,
    schema_from_path,
    shortest_relation_paths,
    strategy_for,
)
from stem_jax.plan.schema import SchemaGraph, SchemaTriple, Strategy

__all__ = [
    "METAQA_RELATION_TABLE",
    "GoldPaths",
    "OraclePlanner",
    "SchemaGraph",
    "SchemaTriple",
    "Strategy",
    "derive_metaqa_relation_table",
    "gold_path_triples",
    "gold_paths",
    "metaqa_gold_path",
    "schema_from_path",
    "shortest_relation_paths",
    "strategy_for",
]

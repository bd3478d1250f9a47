"""Host-side graph building, batching and padding for the Triple-GNN.

Everything that changes shapes happens here, before jit: a question's k-hop subgraph becomes a
:class:`GraphExample` (local node ids, both edge directions, receivers sorted), several examples
are concatenated with ``jraph.batch_np`` and padded with ``jraph.pad_with_graphs`` to
power-of-two node/edge/graph counts, so the compile cache sees a handful of shapes. Padding
nodes and graphs are masked out of losses and outputs with ``nodes["valid"]`` and
``globals["valid"]`` (what ``jraph.get_*_padding_mask`` computes, done on the host), and
``nodes["graph"]`` gives each node's graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from stem_jax.array_fields import axis_length
from stem_jax.errors import StemError
from stem_jax.jraph_compat import jraph
from stem_jax.kg.index import KGIndex
from stem_jax.kg.subgraph import khop_subgraph

MAX_SCHEMA_TRIPLES = 8  # static T of the schema-triple axis; larger schema graphs are an error
MIN_NODES = 64  # smallest node bucket, so tiny batches share one compiled shape
EDGES_PER_NODE = 4  # edge bucket = 4 x node bucket (KG subgraphs have ~2 triples per node)


@dataclasses.dataclass(frozen=True)
class GraphExample:
    """One question's (or sampled walk's) subgraph, ready to batch.

    Attributes:
      key: identifies the example (question id, or ``walk/<seed>/<i>``).
      entities: int32 [n] global KG ids of the nodes, ascending (local id = position).
      question: bool [n] question entities (the GNN starts them at E_Q).
      senders, receivers: int32 [E] local node ids, E = 2 x subgraph triples, receivers ascending.
      relations: int32 [E] relation id, + num_relations for the inverse direction.
      schema: float32 [T, 3 d_pem] concatenated [E_h; E_r; E_t] of each schema triple.
      labels: float32 [n] 1 on gold-evidence entities inside the subgraph, or None (inference).
      positives_outside: gold entities that the subgraph does not contain (they cannot be found).
    """

    key: str
    entities: np.ndarray
    question: np.ndarray
    senders: np.ndarray
    receivers: np.ndarray
    relations: np.ndarray
    schema: np.ndarray
    labels: np.ndarray | None = None
    positives_outside: int = 0

    n_node = axis_length("entities", 0, "Nodes of the subgraph (one per KG entity in it).")
    n_edge = axis_length("senders", 0, "Directed edges of the subgraph, inverse edges included.")


def build_example(
    index: KGIndex,
    seeds: Sequence[int],
    hops: int,
    hub_cap: int,
    schema: np.ndarray,
    *,
    positives: Sequence[int] | None = None,
    key: str = "",
) -> GraphExample:
    """The ``hops``-hop subgraph around ``seeds`` (hub-capped) as a :class:`GraphExample`."""
    if schema.ndim != 2 or schema.shape[0] == 0:
        raise StemError(f"{key}: schema features must be [T>0, 3*d_pem], got shape {schema.shape}")
    if schema.shape[0] > MAX_SCHEMA_TRIPLES:
        raise StemError(f"{key}: schema graph has {schema.shape[0]} triples; the Triple-GNN takes at most "
                        f"{MAX_SCHEMA_TRIPLES} (raise stem_jax.gnn.batching.MAX_SCHEMA_TRIPLES)")
    sub = khop_subgraph(index, seeds, hops, hub_cap)
    entities = sub.nodes.astype(np.int32)
    rows = index.triples[sub.triple_ids]
    head = np.searchsorted(entities, rows[:, 0]).astype(np.int32)
    tail = np.searchsorted(entities, rows[:, 2]).astype(np.int32)
    rel = rows[:, 1].astype(np.int32)
    senders = np.concatenate([head, tail])
    receivers = np.concatenate([tail, head])
    relations = np.concatenate([rel, rel + index.num_relations])
    order = np.argsort(receivers, kind="stable")
    question = np.isin(entities, np.asarray(seeds, dtype=np.int32))
    labels, outside = None, 0
    if positives is not None:
        wanted = np.unique(np.asarray(positives, dtype=np.int32))
        inside = np.isin(entities, wanted)
        labels = inside.astype(np.float32)
        outside = int(len(wanted) - inside.sum())
    return GraphExample(
        key=key, entities=entities, question=question, senders=senders[order], receivers=receivers[order],
        relations=relations[order], schema=np.asarray(schema, np.float32), labels=labels, positives_outside=outside,
    )


def next_pow2(n: int, minimum: int = 1) -> int:
    return max(minimum, 1 << max(0, int(n) - 1).bit_length())


def to_graphs_tuple(example: GraphExample) -> jraph.GraphsTuple:
    """One unpadded graph (numpy leaves); the T axis of the schema is padded to MAX_SCHEMA_TRIPLES."""
    t, width = example.schema.shape
    schema = np.zeros((1, MAX_SCHEMA_TRIPLES, width), np.float32)
    schema[0, :t] = example.schema
    mask = np.zeros((1, MAX_SCHEMA_TRIPLES), bool)
    mask[0, :t] = True
    labels = example.labels if example.labels is not None else np.zeros(example.n_node, np.float32)
    return jraph.GraphsTuple(
        nodes={"question": example.question.astype(np.float32), "label": labels.astype(np.float32)},
        edges={"relation": example.relations.astype(np.int32)},
        senders=example.senders.astype(np.int32),
        receivers=example.receivers.astype(np.int32),
        globals={"schema": schema, "schema_mask": mask},
        n_node=np.asarray([example.n_node], np.int32),
        n_edge=np.asarray([example.n_edge], np.int32),
    )


def pad_sizes(examples: Sequence[GraphExample], n_graph: int | None = None) -> tuple[int, int, int]:
    """(nodes, edges, graphs) that hold ``examples`` plus jraph's padding graph.

    Sizes come from one power-of-two family, ``nodes = 2^k`` and ``edges = EDGES_PER_NODE * 2^k``
    with the smallest k that fits both, so the number of compiled shapes grows with the log of
    the largest batch, not with the product of two independent ladders (each compile of the
    training step costs seconds on CPU).
    """
    nodes = sum(e.n_node for e in examples) + 1
    edges = sum(e.n_edge for e in examples)
    graphs = n_graph if n_graph is not None else next_pow2(len(examples) + 1, 2)
    if graphs < len(examples) + 1:
        raise ValueError(f"n_graph={graphs} cannot hold {len(examples)} graphs plus the padding graph")
    size = max(next_pow2(nodes, MIN_NODES), next_pow2(-(-edges // EDGES_PER_NODE), MIN_NODES))
    return size, EDGES_PER_NODE * size, graphs


def pad_batch(examples: Sequence[GraphExample], n_graph: int | None = None) -> jraph.GraphsTuple:
    """Concatenate ``examples`` and pad to power-of-two sizes (numpy leaves, ready for jit).

    Real graphs come first in the given order; node ``i`` of example ``j`` sits at
    ``sum(n_node[:j]) + i``. Padding edges connect padding nodes only, so real nodes' outputs
    do not depend on the padding (a test checks this against an unpadded run).
    """
    if not examples:
        raise ValueError("pad_batch needs at least one example")
    n_node, n_edge, graphs = pad_sizes(examples, n_graph)
    batched = jraph.batch_np([to_graphs_tuple(e) for e in examples])
    padded = jraph.pad_with_graphs(batched, n_node, n_edge, graphs)
    if np.any(np.diff(padded.receivers) < 0):  # the model's sorted segment sums rely on this
        raise AssertionError("padded batch receivers are not sorted")
    # Node -> graph ids and the padding masks are shape work too: computing them here keeps
    # jnp.repeat (slow to compile on CPU) out of every compiled step.
    real_nodes = sum(e.n_node for e in examples)
    nodes = dict(padded.nodes)
    nodes["graph"] = np.repeat(np.arange(graphs, dtype=np.int32), padded.n_node)
    nodes["valid"] = np.arange(n_node) < real_nodes
    glob = dict(padded.globals)
    glob["valid"] = np.arange(graphs) < len(examples)
    return padded._replace(nodes=nodes, globals=glob)


def pack_by_size(examples: Sequence[GraphExample], max_edges: int, max_graphs: int) -> list[list[int]]:
    """Group example indices into batches of similar size, each within ``max_edges`` edges
    (an example larger than that gets a batch of its own) and ``max_graphs`` graphs.

    Sorting by edge count first keeps the padding waste of each batch small and the set of
    power-of-two shapes short.
    """
    order = sorted(range(len(examples)), key=lambda i: (examples[i].n_edge, examples[i].n_node, i))
    batches: list[list[int]] = []
    current: list[int] = []
    edges = 0
    for i in order:
        size = examples[i].n_edge
        if current and (edges + size > max_edges or len(current) >= max_graphs):
            batches.append(current)
            current, edges = [], 0
        current.append(i)
        edges += size
    if current:
        batches.append(current)
    return batches


def node_offsets(examples: Sequence[GraphExample]) -> np.ndarray:
    """Start of each example's nodes in a batch built by :func:`pad_batch` (plus the end)."""
    return np.concatenate([[0], np.cumsum([e.n_node for e in examples])]).astype(np.int64)

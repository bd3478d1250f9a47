"""The Triple-GNN (paper §3.3 and appendix A) in Flax linen, over a padded jraph GraphsTuple.

Inputs of one batch (built on the host by :mod:`stem_jax.gnn.batching`):

* ``graph.nodes["question"]`` float32 [N]: 1 for question entities (they start at E_Q), else 0;
* ``graph.edges["relation"]`` int32 [E]: relation of each directed edge; a KG triple (h, r, t)
  gives the edge h->t with relation r and t->h with relation r + R (inverse relations are
  distinct rows, initialised from the same text embedding through their own projection);
* ``graph.globals["schema"]`` float32 [G, T, 3·d_pem]: [E_h; E_r; E_t] of each schema triple,
  with ``graph.globals["schema_mask"]`` bool [G, T];
* receivers sorted ascending (the host sorts them), so segment sums use sorted reductions
  (inference may instead sort edges by sender, ``edge_order="sender"``).

``relation_emb`` float32 [R, d_pem] (the KG's relation-text embeddings) is passed separately:
it is the same for every graph.

Computation, with d = d_gnn:

* E_t = MLP_φ2([E_h; E_r; E_t]) (a linear map 3·d_pem -> d, as appendix A says), E_Q = mean_t E_t;
* h_e^0 = E_Q for question entities, 0 otherwise; relations h_r^0 = MLP_φ4(Enc(r)) (forward and
  inverse halves of one d_pem -> 2d linear map);
* L layers: m = DistMult(h_sender, g^l(h_r)) with g^l a 2-layer MLP, mean aggregation over
  incoming edges (:func:`kernels.distmult_mean`), update = MLP([h; agg]). The paper writes the
  update as a plain MLP; like GFM-RAG (the model the paper builds on, via NBFNet's layers) we
  follow it by layer norm and add a short-cut h + update, so six stacked layers keep a gradient;
* P = sigmoid(MLP_φ1(H^L)); the model returns the logits, callers apply the sigmoid.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from kernels import distmult_mean, distmult_sum
from stem_jax.config import GNNConfig
from stem_jax.gnn.batching import MAX_SCHEMA_TRIPLES
from stem_jax.jraph_compat import jraph

PRESETS: dict[str, GNNConfig] = {
    "paper": GNNConfig(layers=6, d_gnn=512),
    # Three layers, not two: a MetaQA 3-hop answer is three edges from the question entity, and
    # nodes farther than L edges never see the query.
    "small": GNNConfig(layers=3, d_gnn=64),
}


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Everything that fixes the parameter shapes; stored beside every checkpoint."""

    layers: int
    d_gnn: int
    d_pem: int
    num_relations: int

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class MLP(nn.Module):
    """Dense layers with ReLU between them (none after the last)."""

    features: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, width in enumerate(self.features):
            x = nn.Dense(width, name=f"dense{i}")(x)
            if i + 1 < len(self.features):
                x = nn.relu(x)
        return x


def node_graph_index(graph: jraph.GraphsTuple) -> jax.Array:
    """int32 [N]: which graph each node belongs to (host-computed by ``pad_batch``)."""
    return graph.nodes["graph"]


class TripleGNN(nn.Module):
    """Query-conditioned relational GNN; returns one logit per node (see the module docstring)."""

    layers: int = 6
    d_gnn: int = 512
    # "receiver": edges arrive sorted by receiver (sorted segment sums, what training uses);
    # "sender": sorted by sender, which makes the per-edge gather h[senders] read memory in
    # order (faster on CPU) at the price of an unsorted segment sum. Same parameters.
    edge_order: str = "receiver"

    @nn.compact
    def __call__(self, graph: jraph.GraphsTuple, relation_emb: jax.Array) -> jax.Array:
        d = self.d_gnn
        schema = graph.globals["schema"]
        mask = graph.globals["schema_mask"].astype(schema.dtype)
        e_t = nn.Dense(d, name="phi2")(schema)  # [G, T, d]
        e_q = (e_t * mask[..., None]).sum(axis=1) / jnp.maximum(mask.sum(axis=1), 1.0)[:, None]
        question = graph.nodes["question"]
        h = question[:, None] * e_q[node_graph_index(graph)]

        r0 = nn.Dense(2 * d, name="phi4")(relation_emb)  # [R, 2d]: forward | inverse
        rel = jnp.concatenate([r0[:, :d], r0[:, d:]], axis=0)  # [2R, d]
        num_nodes = question.shape[0]
        for layer in range(self.layers):
            g = MLP((d, d), name=f"g{layer}")(rel)
            agg = distmult_mean(h, g, graph.senders, graph.receivers, graph.edges["relation"],
                                num_nodes=num_nodes, indices_are_sorted=self.edge_order == "receiver")
            update = MLP((d, d), name=f"update{layer}")(jnp.concatenate([h, agg], axis=-1))
            h = h + nn.LayerNorm(name=f"norm{layer}")(update)
        return nn.Dense(1, name="phi1")(h)[:, 0]


def build_model(spec: ModelSpec, edge_order: str = "receiver") -> TripleGNN:
    return TripleGNN(layers=spec.layers, d_gnn=spec.d_gnn, edge_order=edge_order)


def init_params(spec: ModelSpec, key: jax.Array) -> Any:
    """Parameters for ``spec`` (their shapes never depend on the graph size)."""
    return _init_fn(spec)(key)


@functools.lru_cache(maxsize=8)
def _init_fn(spec: ModelSpec) -> Callable:
    """Jitted ``key -> params`` of one architecture, cached: Flax init compiles slowly on CPU.

    The dummy graph is numpy, not jax: a first call under a transformation (``jax.eval_shape`` in
    :func:`~stem_jax.gnn.checkpoint.abstract_params`) would otherwise cache leaked tracers."""
    graph = jraph.GraphsTuple(
        nodes={"question": np.ones(2, np.float32), "label": np.zeros(2, np.float32), "graph": np.zeros(2, np.int32),
               "valid": np.ones(2, bool)},
        edges={"relation": np.zeros(2, np.int32)},
        senders=np.asarray([0, 1], np.int32), receivers=np.asarray([0, 1], np.int32),
        globals={"schema": np.zeros((1, MAX_SCHEMA_TRIPLES, 3 * spec.d_pem), np.float32),
                 "schema_mask": np.ones((1, MAX_SCHEMA_TRIPLES), bool), "valid": np.ones(1, bool)},
        n_node=np.asarray([2], np.int32), n_edge=np.asarray([2], np.int32),
    )
    relation_emb = np.zeros((spec.num_relations, spec.d_pem), np.float32)
    model = build_model(spec)
    return jax.jit(lambda key: model.init(key, graph, relation_emb))


# --- reach-aware inference (same parameters, same probabilities, much less work) -------------
#
# h^0 is zero off the question entities, so with D(v) the directed distance from the nearest
# question entity (following sender -> receiver):
# * layer 1: a node with D >= 2 has only zero senders, so agg = 0 and its state is the constant
#   c1 = LN(MLP([0; 0])) (h^0 = 0); only D <= 1 rows need the update;
# * layer 2: a sender with D >= 2 holds c1, so its message is c1 * g2(r): the receiver's sum over
#   such edges is cnt[v] @ (c1 * g2), cnt the host-counted [N, 2R] in-relation histogram of those
#   edges. Rows with D >= 3 have only such senders and h = c1, so their first dense collapses to
#   (c1 W1a + b1) + (cnt[v] @ ((c1 * g2) W1b)) / deg (a [2R, d] product instead of [2d, d]);
# * layers >= 3: every row, every edge (the plain update).
# Rows of a batch are ordered [D <= 1 | D = 2 | D >= 3] (each block padded), so "rows with
# D <= l" are static prefixes. Sums are reassociated (W1b applied before the 1/deg scaling for
# far rows, the [h; agg] dense split in two), so logits move by float32 rounding only
# (tests/gnn/test_gnn_reach.py compares against TripleGNN on random graphs).


def _dense(p: dict, x: jax.Array) -> jax.Array:
    return x @ p["kernel"] + p["bias"]


def _mlp2(p: dict, x: jax.Array) -> jax.Array:
    return _dense(p["dense1"], jax.nn.relu(_dense(p["dense0"], x)))


def _layer_norm(p: dict, x: jax.Array) -> jax.Array:
    return nn.LayerNorm().apply({"params": p}, x)


def _update(params: dict, layer: int, h: jax.Array, agg: jax.Array) -> jax.Array:
    """h + LN(MLP([h; agg])) with the first dense split into its h and agg halves (no concat)."""
    d = h.shape[-1]
    p = params[f"update{layer}"]
    w = p["dense0"]["kernel"]
    z = h @ w[:d] + agg @ w[d:] + p["dense0"]["bias"]
    return h + _layer_norm(params[f"norm{layer}"], _dense(p["dense1"], jax.nn.relu(z)))


def reach_logits(params: Any, layers: int, batch: dict[str, jax.Array], relation_emb: jax.Array) -> jax.Array:
    """TripleGNN logits [N] of one reach-ordered batch (:func:`stem_jax.gnn.packing.assemble_reach`).

    ``batch``: ``schema_mean`` [G, 3 d_pem] (mean schema-triple features of each graph slot; phi2
    is linear, so phi2 of the mean is the mean of phi2), ``qgraph`` int32 / ``qflag`` float32
    [N1] (graph slot and question flag of the D <= 1 rows), ``inv_deg`` [N] (1 / max(in-degree,
    1)), ``cnt`` [N, 2R] (in-edges from senders with D >= 2, by relation), edge lists
    ``s1, r1, t1`` (senders with D = 0), ``s2, r2, t2`` (receivers D <= 2, senders D <= 1) and
    ``s, r, t`` (all edges; t = relation); padding edges have receiver = N (dropped). Static
    block sizes come from the array shapes: N1 = len(qgraph), N2 = number of near-2 rows
    (``batch["near2"]`` is a [N2] placeholder).
    """
    p = params["params"]
    n, n1, n2 = batch["inv_deg"].shape[0], batch["qgraph"].shape[0], batch["near2"].shape[0]
    d = p["phi1"]["kernel"].shape[0]
    inv_deg = batch["inv_deg"][:, None]
    r0 = _dense(p["phi4"], relation_emb)
    rel = jnp.concatenate([r0[:, :d], r0[:, d:]], axis=0)  # [2R, d]
    g = [_mlp2(p[f"g{layer}"], rel) for layer in range(layers)]

    def messages(h, g_l, s, r, t, rows):
        return distmult_sum(h, g_l, s, r, t, num_nodes=rows)

    zero = jnp.zeros((1, d), jnp.float32)
    c1 = _update(p, 0, zero, zero)  # [1, d]: layer-1 state of every row with D >= 2
    e_q = _dense(p["phi2"], batch["schema_mean"])  # [G, d]
    h0 = batch["qflag"][:, None] * e_q[batch["qgraph"]]  # [N1, d]; rows past N1 are zero
    agg = messages(h0, g[0], batch["s1"], batch["r1"], batch["t1"], n1) * inv_deg[:n1]
    h = jnp.concatenate([_update(p, 0, h0, agg), jnp.broadcast_to(c1, (n - n1, d))], axis=0)
    if layers >= 2:
        c1g = c1 * g[1]  # [2R, d]: the message of a c1 sender along each relation
        agg = (messages(h, g[1], batch["s2"], batch["r2"], batch["t2"], n2) + batch["cnt"][:n2] @ c1g) * inv_deg[:n2]
        near = _update(p, 1, h[:n2], agg)
        u = p["update1"]
        w = u["dense0"]["kernel"]
        z = (c1 @ w[:d] + u["dense0"]["bias"]) + (batch["cnt"][n2:] @ (c1g @ w[d:])) * inv_deg[n2:]
        far = c1 + _layer_norm(p["norm1"], _dense(u["dense1"], jax.nn.relu(z)))
        h = jnp.concatenate([near, far], axis=0)
    for layer in range(2, layers):
        agg = messages(h, g[layer], batch["s"], batch["r"], batch["t"], n) * inv_deg
        h = _update(p, layer, h, agg)
    return _dense(p["phi1"], h)[:, 0]

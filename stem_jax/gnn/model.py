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

import flax.linen as nn
import jax
import jax.numpy as jnp

from kernels import distmult_mean
from stem_jax.config import GNNConfig
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
    # order (about 3x faster on CPU) at the price of an unsorted segment sum. Same parameters.
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

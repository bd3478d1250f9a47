import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.jraph_compat import jraph


def _graph():
    return jraph.GraphsTuple(
        nodes=jnp.arange(6, dtype=jnp.float32).reshape(3, 2) + 1.0,
        edges=jnp.ones((2, 1), jnp.float32),
        senders=jnp.array([0, 1]),
        receivers=jnp.array([1, 2]),
        n_node=jnp.array([3]),
        n_edge=jnp.array([2]),
        globals=jnp.ones((1, 1), jnp.float32),
    )


def test_zero_out_padding_runs_and_zeroes_only_padding():
    padded = jraph.pad_with_graphs(_graph(), n_node=8, n_edge=4, n_graph=2)
    padded = padded._replace(nodes=padded.nodes + 5.0, edges=padded.edges + 5.0)
    out = jraph.zero_out_padding(padded)
    np.testing.assert_array_equal(np.asarray(out.nodes[3:]), 0.0)
    np.testing.assert_array_equal(np.asarray(out.edges[2:]), 0.0)
    np.testing.assert_array_equal(np.asarray(out.nodes[:3]), np.asarray(_graph().nodes) + 5.0)


def test_get_fully_connected_graph_runs():
    graph = jraph.get_fully_connected_graph(
        n_node_per_graph=3, n_graph=2, node_features=jnp.zeros((6, 2)), add_self_edges=False
    )
    assert int(graph.n_edge.sum()) == 2 * 3 * 2


def test_global_jax_namespace_untouched():
    assert not hasattr(jax, "tree_map") or jax.__version_info__ < (0, 6)

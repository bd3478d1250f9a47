"""A trainable copy of the sentence encoder's top layers: the path ranker's question side, fine-tuned.

The path ranker (:mod:`stem_jax.plan.path_ranker`) reads the masked question through the frozen sentence
encoder. Here the encoder's lower layers stay the shipped ones and run once per text (their hidden states are
cached for training), and its top ``layers`` are a separate, trainable copy; the pooled, unit-norm output
replaces the frozen question vector. Only the planner holds the tuned layers (the tracer and every embedding
cache keep the shipped encoder), and relation texts keep their frozen embeddings, so one relation table
serves any question.

The forward is the encoder's own pieces (:func:`stem_jax.encoder.minilm.embed`, ``run_layers`` and ``pool``,
float32) on padded rows, each row one sequence (segment 1) and its padding (segment 0): a real token attends to
the real tokens of its row only, so its state is the packed forward's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stem_jax.encoder.bert import BertConfig
from stem_jax.ragged import pad_ragged


def _segments(mask):
    # A padded row holds one sequence: segment 1 for its tokens, 0 for the padding (the packed forward's numbering).
    import jax.numpy as jnp

    return jnp.asarray(mask).astype(jnp.int32)


def bottom_states(frozen: dict[str, Any], cfg: BertConfig, split: int, tokens, mask):
    """The states [N, T, h] after the encoder's embeddings and its layers below ``split`` (the frozen part)."""
    import jax.numpy as jnp

    from stem_jax.encoder.bert import attention_bias, embed, layer_params, run_layers

    segments = _segments(mask)
    x = embed(frozen, cfg, tokens, jnp.arange(tokens.shape[1])[None])
    return run_layers(layer_params(frozen, 0, split), cfg, x, attention_bias(segments, x.dtype))


def tower_vectors(tuned: Sequence[dict[str, Any]], cfg: BertConfig, hidden, mask):
    """Unit question vectors [N, h] from the frozen layers' states ``hidden`` [N, T, h] through the tuned layers."""
    from stem_jax.encoder.bert import attention_bias, pool, run_layers

    segments = _segments(mask)
    return pool(run_layers(tuned, cfg, hidden, attention_bias(segments, hidden.dtype)), segments, slots=1)[:, 0]


@dataclasses.dataclass
class QuestionTower:
    """The shipped encoder split at ``split``: layers below run frozen, ``tuned`` (a list of layer parameter
    trees) replaces the layers from ``split`` up. ``tokenize`` gives [CLS] ... [SEP] ids per text."""

    cfg: BertConfig
    frozen: dict[str, Any]  # the encoder's parameters (``MiniLMEncoder.params["params"]``, numpy or on device)
    split: int
    tokenize: Callable[[list[str]], list[list[int]]]
    tuned: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    _bottom: Any = dataclasses.field(default=None, repr=False)
    _top: Any = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.split < self.cfg.num_hidden_layers:
            raise ValueError(f"split {self.split} must leave at least one of {self.cfg.num_hidden_layers} layers tuned")
        if not self.tuned:
            self.tuned = [self.frozen[f"layer_{i}"] for i in range(self.split, self.cfg.num_hidden_layers)]

    @property
    def layers(self) -> int:
        return self.cfg.num_hidden_layers - self.split

    def tokens(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(token ids [N, T], mask [N, T]) padded to a multiple of 8 tokens (few compiled shapes)."""
        ids = self.tokenize(list(texts))
        width = max(8, -(-max((len(r) for r in ids), default=1) // 8) * 8)
        tokens, live = pad_ragged(ids, 0, np.int32, width=width)
        return tokens, live.astype(np.float32)

    def hidden(self, texts: Sequence[str], batch: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """The frozen layers' states [N, T, h] of ``texts`` and their token mask [N, T]."""
        import jax

        if self._bottom is None:
            cfg, split = self.cfg, self.split

            self._bottom = jax.jit(lambda frozen, tokens, mask: bottom_states(frozen, cfg, split, tokens, mask))
        tokens, mask = self.tokens(texts)
        out = np.zeros((*tokens.shape, self.cfg.hidden_size), np.float32)
        for start in range(0, len(tokens), batch):
            stop = min(start + batch, len(tokens))
            rows = -(-(stop - start) // 8) * 8  # pad the last batch to a multiple of 8 rows
            t = np.zeros((rows, tokens.shape[1]), np.int32)
            m = np.zeros((rows, tokens.shape[1]), np.float32)
            t[: stop - start], m[: stop - start] = tokens[start:stop], mask[start:stop]
            out[start:stop] = np.asarray(self._bottom(self.frozen, t, m))[: stop - start]
        return out, mask

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors [N, h] of ``texts`` through the frozen bottom and the tuned top layers."""
        import jax

        if not len(texts):
            return np.zeros((0, self.cfg.hidden_size), np.float32)
        if self._top is None:
            cfg = self.cfg
            self._top = jax.jit(lambda tuned, hidden, mask: tower_vectors(tuned, cfg, hidden, mask))
        hidden, mask = self.hidden(texts)
        return np.asarray(self._top(self.tuned, hidden, mask), np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        """The tuned layers as flat ``layer<k>/<module>/<name>`` arrays (what the planner's folder stores)."""
        import jax

        out = {}
        for k, layer in enumerate(self.tuned):
            for path, leaf in jax.tree_util.tree_flatten_with_path(layer)[0]:
                out[f"layer{k}/" + "/".join(p.key for p in path)] = np.asarray(leaf, np.float32)
        return out

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Set ``tuned`` from :meth:`arrays`' output."""
        tuned: list[dict[str, Any]] = [{} for _ in range(self.layers)]
        for key, value in arrays.items():
            k, *path = key.split("/")
            node = tuned[int(k.removeprefix("layer"))]
            for name in path[:-1]:
                node = node.setdefault(name, {})
            node[path[-1]] = np.asarray(value, np.float32)
        self.tuned = tuned


def minilm_tower(split: int | None = None, *, layers: int = 1, encoder: Any = None) -> QuestionTower:
    """The shipped all-MiniLM-L6-v2 as a :class:`QuestionTower` whose layers from ``split`` up (default: the top
    ``layers``) are trainable. ``encoder``: a :class:`~stem_jax.encoder.minilm.MiniLMEncoder` whose weights (its
    :attr:`~stem_jax.encoder.minilm.MiniLMEncoder.params`, read once and shared) and model folder the tower uses;
    anything else (None, another encoder) reads the installed MiniLM's weights."""
    from stem_jax.encoder.base import minilm_weights
    from stem_jax.encoder.tokenizer import TruncatingTokenizer

    folder, cfg, variables = minilm_weights(encoder)
    frozen = variables["params"]
    tokenizer = TruncatingTokenizer(folder / "tokenizer.json", 64)
    split = cfg.num_hidden_layers - layers if split is None else split
    return QuestionTower(cfg, frozen, split, tokenizer.tokenize)

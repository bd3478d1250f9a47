"""Sizes of array-holding records as one-line, read-only properties.

Embedding tables, compact rows and subgraph examples each report how many rows, nodes or edges an array field
holds; :class:`axis_length` says that once, so a holder writes ``n = axis_length("array", 0, "Rows.")``
instead of a property body per size.
"""

from __future__ import annotations

from typing import Any, overload


class axis_length:  # noqa: N801 - used like ``property``, so named like it
    """A read-only property: ``int(getattr(obj, field).shape[axis])``, documented by ``doc``."""

    def __init__(self, field: str, axis: int, doc: str) -> None:
        self.field = field
        self.axis = axis
        self.__doc__ = doc
        self.name = field

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> axis_length: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> int: ...

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # looked up on the class (help(), dataclass machinery): the descriptor itself
            return self
        return int(getattr(obj, self.field).shape[self.axis])

    def __set__(self, obj: Any, value: Any) -> None:
        # A data descriptor, so an instance cannot shadow the size with a stale number (as with ``property``).
        raise AttributeError(f"property {self.name!r} of {type(obj).__name__!r} object has no setter")

"""Progress bars that stay readable in logs: frequent on a terminal, sparse otherwise."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress(total: int | None = None, desc: str = "", unit: str = "it", enabled: bool = True, **kwargs) -> tqdm:
    interactive = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=not enabled,
        mininterval=0.2 if interactive else 10.0,
        dynamic_ncols=True,
        file=sys.stderr,
        **kwargs,
    )

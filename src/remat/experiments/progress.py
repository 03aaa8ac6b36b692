"""Progress of long experiments: one line per point on stderr, which the pipeline's rule log captures."""

from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], label: str) -> Iterator[T]:
    """Yield ``items``; after each, print ``[label] i/n <item> done (elapsed s)`` to stderr (flushed)."""
    items = list(items)
    start = time.perf_counter()
    for i, item in enumerate(items, 1):
        yield item
        print(f"[{label}] {i}/{len(items)} {item} done ({time.perf_counter() - start:.1f} s)",
              file=sys.stderr, flush=True)

"""Run independent simulations in worker processes, results in submission order.

Simulations are CPU-bound pure Python, so processes (not threads) are what scale; with
one worker everything runs inline, which keeps tests and small runs free of start-up cost.
"""
from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    return os.cpu_count() or 1


def run_parallel(fn: Callable[[T], R], items: Sequence[T], workers: int,
                 on_done: Callable[[int, R], None] | None = None) -> list[R]:
    """fn over items; `on_done(index, result)` fires as each finishes (progress bars)."""
    results: list[R | None] = [None] * len(items)
    if workers <= 1 or len(items) <= 1:
        for i, item in enumerate(items):
            results[i] = fn(item)
            if on_done:
                on_done(i, results[i])  # type: ignore[arg-type]
        return results  # type: ignore[return-value]
    with ProcessPoolExecutor(max_workers=min(workers, len(items))) as ex:
        futures = {ex.submit(fn, item): i for i, item in enumerate(items)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = fut.result()
            if on_done:
                on_done(i, results[i])  # type: ignore[arg-type]
    return results  # type: ignore[return-value]

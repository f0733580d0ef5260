"""Helpers the cache tests share; importable by spawned DataLoader workers (module level)."""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path
from typing import Iterator

_ids = itertools.count()


def unique_job_id() -> int:
    """A job id no other test (or xdist worker) uses: pid and a counter."""
    return os.getpid() * 1000 + next(_ids)


def serving_pid(data: bytes) -> int:
    """DataLoader transform: which process served the sample."""
    return os.getpid()


def write_files(root: Path, n: int, size: int, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    paths = []
    for i in range(n):
        p = root / f"item{i:04d}.bin"
        p.write_bytes(bytes(rng.getrandbits(8) for _ in range(size)))
        paths.append(p)
    return paths


class ListSampler:
    """A sampler whose order the test sets before each epoch (lives in the main process)."""

    def __init__(self, order: list[int]) -> None:
        self.order = order

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.order))

    def __len__(self) -> int:
        return len(self.order)

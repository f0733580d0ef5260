"""A map-style dataset over files, read through a job's MinIO cache.

`CachedFileDataset(paths, cache, transform=None)[i]` returns ``transform(bytes of paths[i])``;
the bytes come from the cache on a hit and from the file on a miss (then admitted if they
fit). Random augmentation stays in `transform` and runs on every read: only the stored bytes
are cached, never a transformed sample (reusing transformed samples across epochs hurts
accuracy, §6 of the paper). A torch `Dataset` when torch is installed, a plain sequence-like
object otherwise; either way a DataLoader of any worker count and start method can use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

from synergy.cache.minio import MinioCache

try:  # torch is the job side's optional extra; the cache works without it.
    from torch.utils.data import Dataset as _Base
except ImportError:  # pragma: no cover - exercised only without torch
    _Base = object  # type: ignore[assignment,misc]


class CachedFileDataset(_Base):  # type: ignore[misc,valid-type]
    """Sample i is `transform` applied to the bytes of `paths[i]`, read through `cache`."""

    def __init__(
        self,
        paths: Sequence[str | os.PathLike[str]],
        cache: MinioCache,
        transform: Callable[[bytes], Any] | None = None,
    ) -> None:
        self.paths = [os.fspath(p) for p in paths]
        self.cache = cache
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        path = self.paths[index]
        data = self.cache.get(path, load=lambda: Path(path).read_bytes())
        return data if self.transform is None else self.transform(data)

"""The wrap and the job's MinIO cache, in-process: the image example's real DataLoader over real
JPEGs, a real /dev/shm cache. As in test_periodic_checkpoints.py no daemon listens at the
contract's address; the tests call what the lease thread does on a RESIZE reply.

Issue 14: the example wraps its `CachedFileDataset`, and the wrap looked only at
`loader.dataset.cache`: no statistics, no resize, a memory-insensitive profile.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from torch.utils.data import DataLoader, Dataset

from synergy.cache import MinioCache, capacity_from_allocation
from synergy.common.contract import JobEnv
from synergy.iterator import SynergyIterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `examples` from the repository root
from examples.image_classification import data  # noqa: E402

IMAGES = 32


@pytest.fixture
def job_env(tmp_path: Path) -> JobEnv:
    # 1 MB of memory with fraction 1 and no process memory: a 1,000,000-byte cache
    return JobEnv(job_id=os.getpid() * 1000 + 999, attempt=1, rank=0, world_size=1, daemon_address="127.0.0.1:1",
                  job_token="t", checkpoint_dir=str(tmp_path / "ckpt"), alloc_mem_gb=0.001)


@pytest.fixture
def cache(job_env: JobEnv) -> Iterator[MinioCache]:
    c = MinioCache.for_job(job_env, fraction=1.0)
    yield c
    c.close()


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    return data.ensure_images(tmp_path / "data", IMAGES, 32)


def wrapped(loader: DataLoader, env: JobEnv, **kw) -> SynergyIterator:
    it = SynergyIterator(loader, state={}, environ=env.to_env(), **kw)
    assert it.lease is not None
    it.lease.report_patience_s = 0
    return it


def test_the_wrap_finds_the_examples_cache_and_a_resize_to_less_memory_shrinks_it(
        job_env: JobEnv, cache: MinioCache, images: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    it = wrapped(data.build_loader(images, batch_size=8, workers=1, cache=cache), job_env)
    try:
        assert it.lease is not None and it.lease.cache is cache
        assert it.cache_files == [str(p) for p in images]  # the profile's memory axis reads these
        assert "found at loader.dataset.images.cache" in capsys.readouterr().err
        for _ in it.loader:  # one epoch: every image admitted (they fit)
            pass
        dataset = sum(p.stat().st_size for p in images)
        assert cache.stats().used_bytes == dataset and cache.stats().items == IMAGES

        # A RESIZE reply with half the dataset's worth of memory: the cache shrinks to it.
        it.lease._resize_cache(dataset / 2 / 1e9)
        s = cache.stats()
        assert s.capacity_bytes == capacity_from_allocation(dataset / 2 / 1e9, 1.0) and s.used_bytes <= s.capacity_bytes
        assert 0 < s.items < IMAGES
        assert "cache resized for" in capsys.readouterr().err
        before = cache.stats().hits
        for _ in it.loader:  # the next epoch hits exactly what survived
            pass
        assert cache.stats().hits - before == s.items
    finally:
        it.lease.close()


#: Caches by name, at module level: a dataset that looks its cache up here holds only a name.
REGISTRY: dict[str, MinioCache] = {}


class RegistryBytes(Dataset):
    """Reads through a cache it finds by name in a module global: nothing leads the walk to it."""

    def __init__(self, paths: list[Path], name: str) -> None:
        self.paths, self.name = paths, name

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> bytes:
        return REGISTRY[self.name].get(str(self.paths[i]), load=self.paths[i].read_bytes)


def test_a_cache_the_walk_cannot_reach_is_given_explicitly(job_env: JobEnv, cache: MinioCache,
                                                           images: list[Path]) -> None:
    REGISTRY["train"] = cache
    loader = DataLoader(RegistryBytes(images, "train"), batch_size=8, collate_fn=list)
    it = wrapped(loader, job_env)
    try:
        assert it.lease is not None and it.lease.cache is None
    finally:
        it.lease.close()
    it = wrapped(loader, job_env, cache=cache)
    try:
        assert it.lease is not None and it.lease.cache is cache and it.cache_files == []
        it.lease._resize_cache(0.0005)  # sized as for_job made it: fraction 1, no process memory
        assert cache.stats().capacity_bytes == 500_000
    finally:
        it.lease.close()
        REGISTRY.clear()

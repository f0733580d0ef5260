"""The image example's data pipeline: generated files, a deterministic loader, the cache's counts."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from examples.image_classification import data
from synergy.cache import MinioCache


def epoch(loader) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]


def test_ensure_images_is_deterministic_idempotent_and_atomic(tmp_path: Path) -> None:
    a = data.ensure_images(tmp_path / "a", 6, 32, seed=3)
    stamps = [p.stat().st_mtime_ns for p in a]
    assert data.ensure_images(tmp_path / "a", 6, 32, seed=3) == a
    assert [p.stat().st_mtime_ns for p in a] == stamps  # nothing rewritten
    b = data.ensure_images(tmp_path / "b", 6, 32, seed=3)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert not any(n.endswith(".tmp") for n in os.listdir(a[0].parent))
    assert [data.label_of(data.index_of(p)) for p in a] == [0, 1, 2, 3, 0, 1]
    assert data.ensure_images(tmp_path / "a", 6, 40, seed=3)[0].parent != a[0].parent  # sizes never mix


def test_loader_decodes_crops_and_is_deterministic_under_a_seed(tmp_path: Path) -> None:
    files = data.ensure_images(tmp_path, 12, 32)
    runs = []
    for workers in (0, 0, 2, 2):
        torch.manual_seed(5)
        runs.append(epoch(data.build_loader(files, 4, workers)))
    crop = int(32 * data.CROP_FRACTION)
    x, y = runs[0][0]
    assert x.shape == (4, 3, crop, crop) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    for first, second in (runs[0:2], runs[2:4]):
        assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))
    torch.manual_seed(6)
    other = epoch(data.build_loader(files, 4, 0))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(runs[0], other))  # the augmentation is random


def test_cache_hits_and_misses_are_the_minio_counts(tmp_path: Path) -> None:
    files = data.ensure_images(tmp_path, 16, 32)
    sizes = [p.stat().st_size for p in files]
    with MinioCache.create(sum(sizes) // 2) as cache:
        torch.manual_seed(0)
        loader = data.build_loader(files, 4, 2, cache=cache)
        epoch(loader)
        first = cache.stats()
        assert (first.hits, first.misses) == (0, 16)  # the first epoch reads everything from disk
        admitted = first.items
        assert 0 < admitted < 16 and first.used_bytes <= sum(sizes) // 2
        epoch(loader)
        second = cache.stats()
        # MinIO: the admitted set never changes, so the next epoch hits exactly those items
        assert (second.hits - first.hits, second.misses - first.misses) == (admitted, 16 - admitted)
        assert second.items == admitted

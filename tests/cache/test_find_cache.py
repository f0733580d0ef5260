"""`find_caches`: the job's MinIO cache is found however its dataset is wrapped (issue 14:
the image example wrapped it and the lease, the profiler and RESIZE never saw it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from cache_helpers import unique_job_id, write_files
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset

from synergy.cache import CachedFileDataset, MinioCache, find_caches

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `examples` from the repository root
from examples.image_classification import data  # noqa: E402


@pytest.fixture
def cache():
    c = MinioCache.create(1 << 20, job_id=unique_job_id())
    yield c
    c.close()


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    return [str(p) for p in write_files(tmp_path, 4, 100)]


class Pairs(Dataset):
    """A user's wrapper holding the cached dataset in an attribute of its own name."""

    def __init__(self, inner: Dataset) -> None:
        self.source = inner
        self.labels = list(range(100_000))  # a long list is not walked item by item

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int):
        return self.source[i], self.labels[i]


class TorchvisionStyle(Dataset):
    """torchvision's wrappers keep the wrapped dataset as `.dataset`."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        return self.dataset[i]


class Slotted:
    __slots__ = ("inner",)

    def __init__(self, inner: object) -> None:
        self.inner = inner


def test_the_image_examples_loader_leads_to_its_cache_and_files(cache, tmp_path: Path) -> None:
    paths = data.ensure_images(tmp_path / "img", 8, 16)
    loader = data.build_loader(paths, batch_size=4, workers=0, cache=cache)
    assert getattr(loader.dataset, "cache", None) is None  # what the old lookup read
    (found,) = find_caches(loader)
    assert found.cache is cache and found.where == "dataset.images.cache"
    assert found.files == [str(p) for p in paths]


@pytest.mark.parametrize("wrap", [
    lambda d: d,
    lambda d: Subset(d, [0, 2]),
    lambda d: ConcatDataset([d, torch.utils.data.TensorDataset(torch.zeros(3))]),
    lambda d: Pairs(d),
    lambda d: TorchvisionStyle(Subset(Pairs(d), [1])),
    lambda d: Pairs(Slotted(d)),  # type: ignore[arg-type]
    lambda d: {"train": d},
])
def test_found_through_any_wrapping(wrap, cache, files) -> None:
    root = DataLoader(wrap(CachedFileDataset(files, cache)), batch_size=2)
    (found,) = find_caches(root)
    assert found.cache is cache and found.files == files


def test_found_in_a_closure_a_bound_method_or_a_partial(cache, files) -> None:
    import functools

    ds = CachedFileDataset(files, cache)
    holder = Pairs(torch.utils.data.TensorDataset(torch.zeros(1)))
    for reader in (lambda i: ds[i], ds.__getitem__, functools.partial(ds.__getitem__)):
        holder.read = reader  # type: ignore[attr-defined]
        (found,) = find_caches(holder)
        assert found.cache is cache and found.files == files


def test_a_bare_cache_is_found_without_files(cache) -> None:
    (found,) = find_caches(Pairs(Slotted(cache)))  # type: ignore[arg-type]
    assert found.cache is cache and found.files == [] and found.where == "source.inner"


def test_two_caches_are_both_reported_nearest_first(cache, files) -> None:
    other = MinioCache.create(1 << 20, job_id=unique_job_id())
    try:
        root = Pairs(ConcatDataset([CachedFileDataset(files[:2], cache),
                                    TorchvisionStyle(CachedFileDataset(files[2:], other))]))
        assert [(f.cache, f.files) for f in find_caches(root)] == [(cache, files[:2]), (other, files[2:])]
    finally:
        other.close()


def test_one_cache_under_two_datasets_is_one_entry_with_both_files(cache, files) -> None:
    root = ConcatDataset([CachedFileDataset(files[:2], cache), CachedFileDataset(files[1:], cache)])
    (found,) = find_caches(root)
    assert found.files == files


def test_nothing_found_without_a_cache_and_cycles_end(files) -> None:
    a = Pairs(torch.utils.data.TensorDataset(torch.zeros(2)))
    a.back = a  # type: ignore[attr-defined]
    assert find_caches(DataLoader(a)) == []
    assert find_caches(None) == [] and find_caches([1, "x", 2.0]) == []


def test_the_walk_stops_at_its_depth(cache, files) -> None:
    root: object = CachedFileDataset(files, cache)
    for _ in range(3):
        root = TorchvisionStyle(root)  # type: ignore[arg-type]
    assert find_caches(root, max_depth=2) == [] and len(find_caches(root, max_depth=3)) == 1

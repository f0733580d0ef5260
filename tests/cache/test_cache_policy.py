"""The MinIO policy in one process: per-epoch hit rate = capacity / dataset, no eviction,
isolation, resize, statistics, bad input, and a Hypothesis property over gets and resizes."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest
from cache_helpers import unique_job_id
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy.common.contract import JobEnv
from synergy.cache import CacheStats, MinioCache, capacity_from_allocation
from synergy.cache.segment import cluster_tag, key_digest
from synergy.scheduler.profiles.minio import MinioModel, hit_rate

ITEM = 1000


@pytest.fixture
def make_cache():
    made: list[MinioCache] = []

    def make(capacity: int, **kw) -> MinioCache:
        c = MinioCache.create(capacity, job_id=unique_job_id(), **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
        assert not os.path.exists(c.path), "segment leaked"


def run_epoch(cache: MinioCache, n: int, seed: int, size: int = ITEM) -> int:
    """Read items 0..n-1 in a shuffled order; return the epoch's hits."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    before = cache.stats().hits
    for i in order:
        assert cache.get(i, load=lambda i=i: bytes([i % 251]) * size) == bytes([i % 251]) * size
    return cache.stats().hits - before


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 1.0])
def test_hit_rate_per_epoch_is_capacity_over_dataset(make_cache, fraction: float) -> None:
    n = 40
    cache = make_cache(int(n * ITEM * fraction))
    assert run_epoch(cache, n, seed=0) == 0  # cold epoch: every read misses and fills
    for epoch in range(1, 4):
        hits = run_epoch(cache, n, seed=epoch)
        assert abs(hits / n - fraction) <= 1 / n, (epoch, hits)
    # ...and it is what the scheduler's model predicts for this much cache memory.
    model = MinioModel(1, 1, 1, dataset_gb=n * ITEM / 1e9, sample_kb=ITEM / 1e3, process_mem_gb=0,
                       storage_mb_s=1, batch_size=1)
    assert abs(hits / n - hit_rate(model, cache.stats().capacity_bytes / 1e9)) <= 1 / n


def test_nonuniform_items_hit_bytes_within_one_item_of_capacity(make_cache) -> None:
    rng = random.Random(3)
    sizes = [rng.randint(100, 3000) for _ in range(60)]
    cache = make_cache(sum(sizes) // 2)
    for epoch in range(3):
        before = cache.stats().hit_bytes
        for i in rng.sample(range(60), 60):
            cache.get(i, load=lambda i=i: b"x" * sizes[i])
        if epoch:
            assert cache.stats().capacity_bytes - max(sizes) <= cache.stats().hit_bytes - before <= cache.stats().capacity_bytes


def test_no_eviction_once_full(make_cache) -> None:
    cache = make_cache(5 * ITEM)
    for i in range(5):
        cache.get(i, load=lambda: b"a" * ITEM)
    first = cache.admission_order()
    for i in range(5, 50):
        assert cache.get(i, load=lambda: b"b" * ITEM) == b"b" * ITEM
    assert cache.admission_order() == first
    assert all(cache.get(i) == b"a" * ITEM for i in range(5))
    assert cache.stats().rejected == 45


def test_two_jobs_are_isolated(make_cache) -> None:
    a, b = make_cache(4 * ITEM), make_cache(4 * ITEM)
    for i in range(4):
        a.get(f"a{i}", load=lambda: b"A" * ITEM)
    order = a.admission_order()
    for i in range(100):
        b.get(f"b{i}", load=lambda: b"B" * ITEM)
    assert a.admission_order() == order
    assert a.stats() == CacheStats(misses=4, miss_bytes=4 * ITEM, items=4, used_bytes=4 * ITEM, capacity_bytes=4 * ITEM)
    assert "a0" not in b and "b0" not in a


def test_shrink_drops_most_recent_first_and_frees_memory(make_cache) -> None:
    cache = make_cache(100 * 4096)
    for i in range(100):
        cache.get(i, load=lambda: b"z" * 4096)
    order = cache.admission_order()
    blocks = os.stat(cache.path).st_blocks
    assert cache.resize(30 * 4096 + 10) == 70
    assert cache.admission_order() == order[:30]
    assert all(i in cache for i in range(30)) and not any(i in cache for i in range(30, 100))
    assert cache.stats().used_bytes == 30 * 4096
    assert os.stat(cache.path).st_blocks < blocks - 60 * 4096 // 512  # pages went back
    # Growing admits more; nothing already cached is touched; re-admission goes at the end.
    assert cache.resize(200 * 4096) == 0
    cache.get(99, load=lambda: b"y" * 4096)
    cache.get(150, load=lambda: b"w" * 8192)
    assert cache.admission_order() == order[:30] + [key_digest(99), key_digest(150)]
    assert cache.get(150) == b"w" * 8192


def test_resize_is_seen_by_another_handle(make_cache) -> None:
    cache = make_cache(2 * ITEM)
    other = MinioCache.attach(cache.path)
    try:
        cache.get(1, load=lambda: b"1" * ITEM)
        assert other.get(1) == b"1" * ITEM
        cache.resize(1000 * 1024 * 1024)  # beyond the mapped region: the other handle remaps
        other.get(2, load=lambda: b"2" * (5 * 1024 * 1024))
        assert cache.get(2) == b"2" * (5 * 1024 * 1024)
        other.resize(ITEM)
        assert 2 not in cache and cache.get(1) == b"1" * ITEM
    finally:
        other.close()
    assert os.path.exists(cache.path), "a non-owner handle must not unlink"


def test_stats_count_hits_misses_and_bytes(make_cache) -> None:
    cache = make_cache(3 * ITEM)
    for _ in range(2):
        for i in range(4):
            cache.get(i, load=lambda: b"s" * ITEM)
    assert cache.get("absent") is None
    s = cache.stats()
    assert (s.hits, s.hit_bytes, s.misses, s.miss_bytes) == (3, 3 * ITEM, 6, 5 * ITEM)
    assert (s.items, s.used_bytes, s.capacity_bytes, s.rejected) == (3, 3 * ITEM, 3 * ITEM, 2)
    assert s.hit_rate == pytest.approx(3 / 9)
    assert cache.local_stats() == s
    d = s.as_dict()
    assert d["hits"] == 3 and d["hit_rate"] == pytest.approx(3 / 9)


def test_sized_from_the_job_memory_allocation() -> None:
    assert capacity_from_allocation(10, 0.5) == 5 * 10**9
    assert capacity_from_allocation(30, 1.0, process_mem_gb=20) == 10 * 10**9
    assert capacity_from_allocation(10, 1.0, process_mem_gb=20) == 0
    env = JobEnv(job_id=unique_job_id(), attempt=2, rank=0, world_size=1, daemon_address="x", job_token="t",
                 alloc_mem_gb=0.001)
    with MinioCache.for_job(env, fraction=0.5) as cache:
        assert cache.stats().capacity_bytes == 500_000
        assert os.path.basename(cache.path) == f"synergy-cache-j{env.job_id}-a2-d{cluster_tag('x')}"
        # another daemon's job of the same id and attempt (two clusters, parallel tests) has its own
        with MinioCache.for_job(replace(env, daemon_address="y"), fraction=0.5) as other:
            assert other.path != cache.path
    assert not os.path.exists(cache.path)


@pytest.mark.parametrize("args, error", [
    ((-1, 0.5), "alloc_mem_gb must be a finite number >= 0"),
    ((float("nan"), 0.5), "alloc_mem_gb"),
    ((4, 0), "fraction must be in (0, 1]"),
    ((4, 1.5), "fraction must be in (0, 1]"),
    ((4, 0.5, -2), "process_mem_gb"),
])
def test_sizing_bad_input(args, error: str) -> None:
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        capacity_from_allocation(*args)


def test_bad_input_gets_a_clear_error_and_changes_nothing(make_cache) -> None:
    with pytest.raises(ValueError, match="capacity_bytes must be >= 0, got -1"):
        MinioCache.create(-1, job_id=unique_job_id())
    with pytest.raises(TypeError, match="capacity_bytes must be an int"):
        MinioCache.create(1.5, job_id=unique_job_id())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capacity_bytes must be an int"):
        MinioCache.create(True, job_id=unique_job_id())  # type: ignore[arg-type]
    cache = make_cache(2 * ITEM)
    cache.get(1, load=lambda: b"1" * ITEM)
    before = (cache.stats(), cache.admission_order())
    with pytest.raises(ValueError, match="capacity_bytes must be >= 0"):
        cache.resize(-5)
    with pytest.raises(TypeError, match="cache key must be"):
        cache.get(1.5, load=lambda: b"")
    with pytest.raises(TypeError, match="load\\(\\) must return bytes"):
        cache.get(7, load=lambda: "text")  # type: ignore[return-value]
    assert (cache.stats(), cache.admission_order()) == before


def test_item_larger_than_capacity_takes_the_miss_path(make_cache) -> None:
    cache = make_cache(ITEM)
    big = b"L" * (ITEM + 1)
    assert cache.get("big", load=lambda: big) == big
    assert cache.get("big", load=lambda: big) == big
    s = cache.stats()
    assert (s.hits, s.misses, s.items, s.rejected) == (0, 2, 0, 2)


def test_capacity_zero_serves_every_read_from_the_loader(make_cache) -> None:
    cache = make_cache(0)
    for _ in range(3):
        assert cache.get("k", load=lambda: b"v") == b"v"
    assert cache.stats().hits == 0 and cache.stats().items == 0


def test_closed_cache_says_so(make_cache) -> None:
    cache = make_cache(ITEM)
    cache.close()
    with pytest.raises(ValueError, match="is closed"):
        cache.get(1)
    cache.close()  # idempotent


ops = st.lists(
    st.one_of(
        st.tuples(st.just("get"), st.integers(0, 15), st.integers(0, 600)),
        st.tuples(st.just("resize"), st.integers(0, 4000)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(initial=st.integers(0, 4000), steps=ops)
def test_property_bytes_within_capacity_and_cached_set_is_an_admission_prefix(initial, steps) -> None:
    cache = MinioCache.create(initial, job_id=unique_job_id(), max_items=8)
    try:
        model: list[tuple[bytes, int]] = []  # (digest, size) in admission order
        capacity = initial
        for step in steps:
            before = cache.admission_order()
            if step[0] == "get":
                _, key, size = step
                cache.get(key, load=lambda: b"p" * size)
                d = key_digest(key)
                if d not in [m[0] for m in model] and len(model) < 8 and sum(m[1] for m in model) + size <= capacity:
                    model.append((d, size))
                after = cache.admission_order()
                assert after[: len(before)] == before
            else:
                capacity = step[1]
                cache.resize(capacity)
                while sum(m[1] for m in model) > capacity:
                    model.pop()
                after = cache.admission_order()
                assert before[: len(after)] == after  # a shrink keeps a prefix
            s = cache.stats()
            assert s.used_bytes <= s.capacity_bytes == capacity
            assert after == [m[0] for m in model]
            assert s.used_bytes == sum(m[1] for m in model)
    finally:
        cache.close()


def test_for_job_reads_the_agents_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = JobEnv(job_id=unique_job_id(), attempt=1, rank=0, world_size=1, daemon_address="x", job_token="t",
                 alloc_mem_gb=0.002)
    for name, value in env.to_env().items():
        monkeypatch.setenv(name, value)
    with MinioCache.for_job(fraction=1.0, process_mem_gb=0.001) as cache:
        assert cache.stats().capacity_bytes == 1_000_000
        assert cache.path.endswith(f"-j{env.job_id}-a1-d{cluster_tag('x')}")
    monkeypatch.delenv("SYNERGY_JOB_ID")
    with pytest.raises(ValueError, match="SYNERGY_JOB_ID is not set"):
        MinioCache.for_job()

"""One cache shared by a job's processes: real DataLoader workers (fork and spawn), stats summed
across processes, and clean-up of the /dev/shm segment on close, exceptions, exit, a killed
worker and a crashed owner (removed at the next open)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cache_helpers import ListSampler, serving_pid, unique_job_id, write_files

from synergy.cache import CachedFileDataset, MinioCache, remove_stale_segments

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

SIZE = 512
DEADLINE_S = 60.0


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_share_the_cache(tmp_path: Path, method: str) -> None:
    n, k = 12, 6
    paths = write_files(tmp_path, n, SIZE)
    with MinioCache.create(k * SIZE, job_id=unique_job_id()) as cache:
        sampler = ListSampler(list(range(n)))
        loader = DataLoader(
            CachedFileDataset(paths, cache, transform=serving_pid), batch_size=None, sampler=sampler,
            num_workers=2, multiprocessing_context=method, persistent_workers=True,
        )
        first = dict(zip(sampler.order, loader))  # index i goes to worker i % 2 (round robin)
        assert cache.stats().misses == n and cache.stats().items == k
        # Shift by one: every index now goes to the other worker than the one that admitted it.
        sampler.order = [n - 1, *range(n - 1)]
        second = dict(zip(sampler.order, loader))
        assert len(set(first.values())) == 2 and os.getpid() not in first.values()
        assert all(second[i] != first[i] for i in range(n))
        s = cache.stats()
        assert (s.hits, s.hit_bytes, s.misses) == (k, k * SIZE, 2 * n - k)
        # Reading in the main process: hits on what the workers admitted.
        assert all(cache.get(str(p)) == p.read_bytes() for p in paths if str(p) in cache)
        del loader
    assert not Path(cache.path).exists()


def _reader(cache: MinioCache, keys: list[int], out: mp.Queue) -> None:
    # The parent's object itself: inherited under fork, re-attached by unpickling under spawn.
    for k in keys:
        cache.get(k, load=lambda k=k: bytes([k]) * 100)
    out.put(cache.local_stats().as_dict())
    cache.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_stats_are_summed_across_processes(method: str) -> None:
    ctx = mp.get_context(method)
    with MinioCache.create(10_000, job_id=unique_job_id()) as cache:
        cache.get("parent", load=lambda: b"p" * 100)  # before the fork: children must not inherit it
        out = ctx.Queue()
        # One after the other: two readers missing the same key at the same moment both load it
        # (the cache has no cross-process single flight), which made the counts racy.
        local = []
        for j in (0, 10):
            p = ctx.Process(target=_reader, args=(cache, list(range(j, j + 20)), out))
            p.start()
            local.append(out.get(timeout=DEADLINE_S))
            p.join(DEADLINE_S)
        assert [s["hits"] for s in local] == [0, 10]  # the second reads the first's admissions
        cache.get(0)
        total = cache.stats()
        assert sum(s["misses"] for s in local) == 30  # 30 distinct keys, each loaded once
        assert sum(s["hits"] + s["misses"] for s in local) == 40
        assert total.hits == sum(s["hits"] for s in local) + 1
        assert total.misses == 31 and total.items == 31
        assert cache.local_stats().hits == 1 and cache.local_stats().misses == 1


def _hold_lock_forever(path: str, ready) -> None:
    cache = MinioCache.attach(path)
    with cache._locked(exclusive=True):  # a worker killed in the middle of an admission
        ready.send(True)
        time.sleep(DEADLINE_S * 2)


def test_a_killed_worker_releases_the_lock_and_leaks_nothing() -> None:
    ctx = mp.get_context("fork")
    cache = MinioCache.create(10_000, job_id=unique_job_id())
    try:
        here, there = ctx.Pipe()
        worker = ctx.Process(target=_hold_lock_forever, args=(cache.path, there))
        worker.start()
        assert here.poll(DEADLINE_S) and here.recv()
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(DEADLINE_S)
        assert cache.get("after", load=lambda: b"ok") == b"ok"  # would block forever on a leaked lock
        assert "after" in cache
    finally:
        cache.close()
    assert not Path(cache.path).exists()


OWNER = textwrap.dedent("""
    import os, signal, sys
    from synergy.cache import MinioCache
    cache = MinioCache.create(4096, job_id=int(sys.argv[1]), attempt=0)
    cache.get("k", load=lambda: b"v")
    print(cache.path, flush=True)
    mode = sys.argv[2]
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "raise":
        raise RuntimeError("training crashed")
    # "exit": leave without closing; atexit removes the segment
""")


def _run_owner(job_id: int, mode: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-c", OWNER, str(job_id), mode], capture_output=True, text=True,
                       timeout=DEADLINE_S)
    return p.returncode, p.stdout.strip()


@pytest.mark.parametrize("mode", ["exit", "raise"])
def test_segment_removed_when_the_owner_exits(mode: str) -> None:
    rc, path = _run_owner(unique_job_id(), mode)
    assert path.startswith("/dev/shm/synergy-cache-")
    assert (rc == 0) == (mode == "exit")
    assert not Path(path).exists()


def test_removed_on_exception_in_a_with_block() -> None:
    with pytest.raises(RuntimeError):
        with MinioCache.create(100, job_id=unique_job_id()) as cache:
            raise RuntimeError("boom")
    assert not Path(cache.path).exists()


def test_a_crashed_jobs_stale_segment_is_removed_at_next_open() -> None:
    job = unique_job_id()
    rc, path = _run_owner(job, "kill")
    assert rc == -signal.SIGKILL and Path(path).exists()  # kill -9: nothing could clean up
    with MinioCache.create(4096, job_id=job, attempt=1) as relaunched:
        assert not Path(path).exists()
        assert "k" not in relaunched
    # The same attempt's name is free again too.
    rc, path = _run_owner(job, "kill")
    with MinioCache.create(4096, job_id=job, attempt=0) as again:
        assert again.path == path and "k" not in again


def test_a_live_owners_segment_is_never_taken() -> None:
    job = unique_job_id()
    with MinioCache.create(100, job_id=job) as cache:
        assert cache.path not in remove_stale_segments()
        with pytest.raises(FileExistsError, match="in use by a live process"):
            MinioCache.create(100, job_id=job)
        assert Path(cache.path).exists()


def test_stale_sweep_skips_files_it_cannot_judge(tmp_path: Path) -> None:
    (tmp_path / "synergy-cache-short").write_bytes(b"xx")  # truncated header, fresh: mid-create
    (tmp_path / "unrelated").write_bytes(b"")
    assert remove_stale_segments(str(tmp_path)) == []
    old = tmp_path / "synergy-cache-old"
    old.write_bytes(b"garbage")
    os.utime(old, (0, 0))  # a creator that died mid-create long ago
    assert remove_stale_segments(str(tmp_path)) == [str(old)]
    assert (tmp_path / "synergy-cache-short").exists() and (tmp_path / "unrelated").exists()


def _admit_all(cache: MinioCache, order: list[int], out: mp.Queue) -> None:
    for k in order:
        assert cache.get(k, load=lambda k=k: k.to_bytes(2, "little") * 50) == k.to_bytes(2, "little") * 50
    out.put(True)


def test_concurrent_admissions_never_overfill_or_duplicate() -> None:
    ctx = mp.get_context("fork")
    keys = list(range(400))
    with MinioCache.create(150 * 100, job_id=unique_job_id()) as cache:
        out = ctx.Queue()
        procs = [ctx.Process(target=_admit_all, args=(cache, order, out)) for order in (keys, keys[::-1], keys[::2] + keys[1::2])]
        for p in procs:
            p.start()
        assert all(out.get(timeout=DEADLINE_S) for _ in procs)
        for p in procs:
            p.join(DEADLINE_S)
        order = cache.admission_order()
        s = cache.stats()
        assert len(order) == len(set(order)) == s.items == 150
        assert s.used_bytes == 150 * 100 == s.capacity_bytes
        assert all(cache.get(k) == k.to_bytes(2, "little") * 50 for k in keys if k in cache)

"""The MinIO cache's figures: hit-path bytes/s per worker vs disk, and hit rate vs capacity.

* **hit path**: a fully cached dataset read through `MinioCache.get` by 1 and 2 worker
  processes at once (forked, as DataLoader workers are), bytes/s per worker; against reading
  the same files from disk cold (page cache dropped before each pass) and warm (page cache
  full, i.e. what the OS page cache gives a job when nobody else competes for memory).
  Dropping: `echo 1 > /proc/sys/vm/drop_caches` when permitted (root, writable /proc/sys): this
  drops **the whole machine's** page cache (every process's, not only this dataset's), so the
  script says so before it starts and `--no-drop-caches` keeps to the per-file way; else
  `posix_fadvise(DONTNEED)` on each file, which evicts this dataset's clean pages without
  privileges; the output says which worked. If neither did, "cold" is really warm.
* **hit rate vs capacity**: capacity 25/50/75/100 % of the dataset, 4 epochs in a fresh
  shuffled order each; measured hits per epoch vs the scheduler's model
  (`synergy.scheduler.profiles.minio.hit_rate`).

    python benchmarks/cache.py [--files 256] [--kib 256] [--dir PATH]

Printed, not asserted. The files live in a temp dir on the disk under --dir (default: the
current directory's file system, not /tmp if that is tmpfs) and are removed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from synergy.cache import MinioCache
from synergy.scheduler.profiles.minio import MinioModel, hit_rate

PASSES = 3


def drop_page_cache(paths: list[Path], machine_wide: bool = True) -> str:
    """Evict the dataset from the page cache; return how (or why it could not)."""
    os.sync()
    if machine_wide:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
            return "drop_caches (the whole machine's page cache)"
        except OSError:
            pass
    if not hasattr(os, "posix_fadvise"):
        return "none (no drop_caches permission, no posix_fadvise): disk figures are page-cache reads"
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise(DONTNEED) per file (drop_caches not permitted)"


def _read_cache(cache: MinioCache, keys: list[str], out: mp.Queue) -> None:
    start = time.perf_counter()
    total = 0
    for _ in range(PASSES):
        for k in keys:
            total += len(cache.get(k))  # type: ignore[arg-type]
    out.put(total / (time.perf_counter() - start))


def _read_disk(paths: list[Path], out: mp.Queue) -> None:
    start = time.perf_counter()
    total = sum(len(p.read_bytes()) for p in paths)
    out.put(total / (time.perf_counter() - start))


def per_worker(target, args_for, workers: int) -> float:
    """Mean bytes/s of `workers` forked processes running at once."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_for(w), out)) for w in range(workers)]
    for p in procs:
        p.start()
    rates = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates) / len(rates)


def throughput(paths: list[Path], machine_wide: bool = True) -> None:
    size = sum(p.stat().st_size for p in paths)
    keys = [str(p) for p in paths]
    with MinioCache.create(size) as cache:
        for p in paths:
            cache.get(str(p), load=p.read_bytes)
        assert cache.stats().items == len(paths)
        how = drop_page_cache(paths, machine_wide)
        print(f"page cache: {how}")
        print(f"{'workers':>8} {'cache hit MB/s':>15} {'disk cold MB/s':>15} {'disk warm MB/s':>15}   (per worker)")
        for workers in (1, 2):
            # Each worker reads its own half (like DataLoader workers splitting an epoch).
            def split(w: int, n: int = workers) -> tuple:
                return (keys[w::n],)

            hit = per_worker(_read_cache, lambda w: (cache, *split(w)), workers)
            drop_page_cache(paths, machine_wide)
            cold = per_worker(_read_disk, lambda w: ([Path(k) for k in split(w)[0]],), workers)
            warm = per_worker(_read_disk, lambda w: ([Path(k) for k in split(w)[0]],), workers)
            print(f"{workers:>8} {hit / 1e6:>15.0f} {cold / 1e6:>15.0f} {warm / 1e6:>15.0f}")


def hit_rates(paths: list[Path]) -> None:
    n = len(paths)
    item = paths[0].stat().st_size
    model = MinioModel(1, 1, 1, dataset_gb=n * item / 1e9, sample_kb=item / 1e3, process_mem_gb=0,
                       storage_mb_s=1, batch_size=1)
    print(f"\n{'capacity':>9} {'model':>7}  measured hit rate per epoch (epoch 1 is cold)")
    rng = random.Random(0)
    for pct in (25, 50, 75, 100):
        with MinioCache.create(n * item * pct // 100) as cache:
            rates = []
            for _ in range(4):
                order = rng.sample(paths, n)
                before = cache.stats()
                for p in order:
                    cache.get(str(p), load=p.read_bytes)
                after = cache.stats()
                rates.append((after.hits - before.hits) / n)
            predicted = hit_rate(model, cache.stats().capacity_bytes / 1e9)
            print(f"{pct:>8}% {predicted:>7.3f}  " + "  ".join(f"{r:.3f}" for r in rates))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--kib", type=int, default=256, help="size of each file")
    ap.add_argument("--dir", default=".", help="where the temporary dataset is written")
    ap.add_argument("--no-drop-caches", action="store_true", help="never write /proc/sys/vm/drop_caches (which "
                    "drops the whole machine's page cache); evict only the dataset's pages (posix_fadvise)")
    args = ap.parse_args()
    if not args.no_drop_caches and os.access("/proc/sys/vm/drop_caches", os.W_OK):
        print("note: the cold-disk passes drop the WHOLE MACHINE's page cache (/proc/sys/vm/drop_caches), which "
              "slows everything else on it for a while; --no-drop-caches evicts only this dataset's pages",
              flush=True)

    root = Path(tempfile.mkdtemp(prefix="synergy-cache-bench-", dir=args.dir))
    try:
        rng = random.Random(1)
        paths = []
        for i in range(args.files):
            p = root / f"{i:05d}.bin"
            p.write_bytes(rng.randbytes(args.kib * 1024))
            paths.append(p)
        print(f"dataset: {args.files} files x {args.kib} KiB = {args.files * args.kib / 1024:.0f} MiB in {root}")
        throughput(paths, machine_wide=not args.no_drop_caches)
        hit_rates(paths)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

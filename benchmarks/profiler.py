"""Optimistic profiling on the image example's own data pipeline, against empirical runs.

Prints, from one run:

(a) the optimistic profile: CPU points measured (`OptimisticSearch`, start at the maximum,
    10% threshold), probes, and the wall time of the whole profile (every window, the storage
    measurement and the fill);
(b) modelled vs empirical throughput at three cache sizes (25/50/100% of the dataset): the
    model is the completed profile (`complete_profile`, read back through the scheduler's own
    `SensitivityProfile.speed`), the empirical figure a fresh MinIO cache of that size, one
    epoch that fills it, then windows timed (target: within 5%);
(c) CODA's allocator on the same pipeline (`CodaSearch`, target <= 4 probes).

The pipeline is the image example's (`examples/image_classification/data.py`): its JPEGs
(`ensure_images`) and its loader (`build_loader`: JPEG bytes through the job's MinIO cache,
decoded, randomly cropped and flipped in DataLoader workers). There is no GPU: the "training
step" consumes the batch.

CPUs are realised as a job's cpuset realises them: the process (and so every DataLoader
worker it forks) is pinned to `c` CPUs with `sched_setaffinity`. The loader runs
`IO_WORKERS_PER_CPU` workers per CPU, the usual PyTorch practice for a loader that waits on
storage: a worker reads and then decodes serially, so with one worker per CPU storage idles
while every worker decodes, and the job runs below min(CPU rate, storage rate), which is what
the MinIO model assumes (the two stages overlap). Extra workers keep a read in flight while
the others decode; when the job is CPU-bound they only queue for the same CPUs.

Storage: with the page cache in play the disk is free, so the dataset's reads (the cache's
misses) go through a token bucket at --storage-mb-s, shared by all workers; the bandwidth fed
to the model is measured on that same reader with `measure_read_bandwidth`, never assumed.

Noise: every figure (each search point, each empirical rate) is the median of --windows
timed windows, each one loader iteration of --passes passes over the dataset, timed whole;
a shared machine's neighbours move single windows by tens of percent.

    python benchmarks/profiler.py [--images 384] [--image-size 160] [--storage-mb-s 2]
"""
from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `examples`, as the tests import it
from examples.image_classification import data  # noqa: E402
from synergy.cache import MinioCache  # noqa: E402
from synergy.profiler.coda import CodaSearch  # noqa: E402
from synergy.profiler.fill import complete_profile  # noqa: E402
from synergy.profiler.search import OptimisticSearch  # noqa: E402
from synergy.profiler.storage import measure_read_bandwidth  # noqa: E402
from synergy.scheduler.profiles.format import SensitivityProfile  # noqa: E402

PROCESS_MEM_GB = 1.0  # the job's non-cache memory: only shifts the memory axis
#: DataLoader workers per CPU: reads overlap decoding (see the module docstring).
IO_WORKERS_PER_CPU = 4


class TokenBucket:
    """Emulated storage: reads of all workers together drain one bucket filled at `rate`
    bytes/s, holding up to `burst_s` seconds of tokens. Kept as a shared "next free" time: a
    read of n bytes starts when the bucket has them and pushes that time on by n / rate; a
    device idle for a moment may catch up by at most `burst_s`. The default is 0, like a disk:
    time it idles is lost (a burst would also credit the untimed gaps between the files of
    `measure_read_bandwidth`, overstating B by about 5% here)."""

    def __init__(self, bytes_per_s: float, burst_s: float = 0.0) -> None:
        self.rate, self.burst_s = bytes_per_s, burst_s
        self._next = mp.get_context("fork").Value("d", 0.0)

    def read(self, path: str | os.PathLike[str]) -> bytes:
        data = Path(path).read_bytes()
        with self._next.get_lock():
            now = time.monotonic()
            start = max(now - self.burst_s, self._next.value)
            self._next.value = start + len(data) / self.rate
            until = self._next.value
        time.sleep(max(0.0, until - time.monotonic()))
        return data

    def opener(self, path: Path) -> io.BytesIO:
        return io.BytesIO(self.read(path))


class SlowStorageCache:
    """The job's MinIO cache over emulated storage: what `build_loader` is given as its cache.

    `CachedFileDataset` asks the cache for a file's bytes with a loader that reads the local
    disk; here a miss reads through the bucket instead (same bytes, storage's speed)."""

    def __init__(self, cache: MinioCache, storage: TokenBucket) -> None:
        self.cache, self.storage = cache, storage

    def get(self, key: str, load: Callable[[], bytes] | None = None) -> bytes | None:
        return self.cache.get(key, load=lambda: self.storage.read(key))


@contextmanager
def on_cpus(cpus: int) -> Iterator[None]:
    """Pin this process (and the DataLoader workers it forks meanwhile) to its first `cpus` CPUs."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(allowed)[:cpus])
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def loader(files, cache: MinioCache, storage: TokenBucket, cpus: int, batch: int,
           passes: int = 1) -> DataLoader:
    """The example's loader at `cpus` CPUs, its misses read from emulated storage; one
    iteration of it makes `passes` passes over the dataset (a long steady stream in which
    MinIO's hit rate is still exact: every pass hits the same cached files)."""
    return data.build_loader(list(files) * passes, batch, IO_WORKERS_PER_CPU * cpus,
                             cache=SlowStorageCache(cache, storage))  # type: ignore[arg-type]


def stream_rates(dl: DataLoader, cpus: int, windows: int) -> list[float]:
    """Samples/s of `windows` whole iterations of `dl` at `cpus` CPUs, each timed from
    `iter()` to its last batch (worker start and the final drain included, as a job pays them;
    timing only after a few warm-up batches would credit the window with the batches every
    worker prefetched during the warm-up, and overstate a storage-bound rate)."""
    rates = []
    with on_cpus(cpus):
        for _ in range(windows):
            samples, start = 0, time.monotonic()
            for _, y in dl:
                samples += len(y)
            rates.append(samples / (time.monotonic() - start))
    return rates


def point(dl: DataLoader, cpus: int, windows: int) -> float:
    """One figure: the median of `windows` timed iterations."""
    return statistics.median(stream_rates(dl, cpus, windows))


def warm(cache: MinioCache, files, storage: TokenBucket, cpus: int, batch: int) -> None:
    """One epoch: MinIO admits files on first access until full, so this fills the cache."""
    with on_cpus(cpus):
        for _ in loader(files, cache, storage, cpus, batch):
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=384)
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--storage-mb-s", type=float, default=2.0)
    ap.add_argument("--max-cpus", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--windows", type=int, default=3, help="timed windows per figure (the median is kept)")
    ap.add_argument("--passes", type=int, default=3, help="passes over the dataset in one window")
    ap.add_argument("--dir", type=Path, default=Path.cwd())
    args = ap.parse_args()
    if min(args.images, args.batch_size, args.windows, args.passes) < 1:
        ap.error("--images, --batch-size, --windows and --passes must be >= 1")
    torch.set_num_threads(1)
    # More workers than CPUs is the point here (see the module docstring), not a mistake.
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    tmp = Path(tempfile.mkdtemp(prefix="synergy-profiler-bench-", dir=args.dir))
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: Path) -> None:
    t_start = time.monotonic()
    torch.manual_seed(0)
    files = data.ensure_images(tmp, args.images, args.image_size)
    dataset_bytes = sum(p.stat().st_size for p in files)
    sample_bytes = dataset_bytes / len(files)
    storage = TokenBucket(args.storage_mb_s * 1e6)
    batch, n, k = args.batch_size, args.windows, args.passes
    print(f"dataset: image example, {len(files)} JPEGs {args.image_size}px, {dataset_bytes / 1e6:.2f} MB "
          f"({sample_bytes / 1e3:.1f} kB/sample); storage emulated at {args.storage_mb_s:g} MB/s; "
          f"CPUs 1..{args.max_cpus} (pinned), {IO_WORKERS_PER_CPU} DataLoader workers per CPU; "
          f"batch {batch}; each figure the median of {n} windows of {k} passes")

    # (a) the optimistic profile, at full memory: the whole dataset cached (warmed once).
    t0 = time.monotonic()
    with MinioCache.create(dataset_bytes * 2, tag="full") as cache:
        warm(cache, files, storage, args.max_cpus, batch)
        search = OptimisticSearch(args.max_cpus)
        while (cpus := search.next_cpus()) is not None:
            search.record(cpus, point(loader(files, cache, storage, cpus, batch, k), cpus, n))
    bw = measure_read_bandwidth(files, budget_s=3.0, opener=storage.opener)
    full_gb = PROCESS_MEM_GB + 2 * dataset_bytes / 1e9
    entry = complete_profile(search.points, gpus=1, dataset_bytes=dataset_bytes,
                             sample_bytes=sample_bytes, storage_bytes_per_s=float(bw),
                             process_mem_gb=PROCESS_MEM_GB, max_mem_gb=full_gb,
                             model="image_example", task="image", batch_size=batch)
    wall = time.monotonic() - t0
    prof = SensitivityProfile.from_dict("image_example", entry)
    print("\n(a) optimistic profile (full memory)")
    print("    points: " + ", ".join(f"{c} CPU {t:.0f}/s" for c, t in search.points))
    print(f"    probes: {search.probes} (target <= 8); wall time of the whole profile: {wall:.1f} s "
          f"(target < 60 s)")
    print(f"    storage measured: {float(bw) / 1e6:.2f} MB/s through the bucket "
          f"(page cache {'dropped' if bw.page_cache_dropped else 'NOT dropped: ' + bw.note})")
    print(f"    best case: {prof.best_case()}; source: {entry['source']}")

    # (b) modelled vs empirical at three cache sizes, at the maximum CPUs.
    cpus = args.max_cpus
    print(f"\n(b) modelled vs empirical at {cpus} CPUs (target: within 5%)")
    print("    cache  modelled/s  empirical/s  error   windows/s")
    errors = []
    for frac in (0.25, 0.5, 1.0):
        capacity = int(dataset_bytes * frac)
        modelled = prof.speed(cpus, PROCESS_MEM_GB + capacity / 1e9) / prof.iter_time_s * batch
        with MinioCache.create(capacity, tag=f"c{int(frac * 100)}") as cache:
            warm(cache, files, storage, cpus, batch)
            before = cache.stats()
            rates = stream_rates(loader(files, cache, storage, cpus, batch, k), cpus, n)
            after = cache.stats()
        empirical = statistics.median(rates)
        hits, misses = after.hits - before.hits, after.misses - before.misses
        err = (modelled - empirical) / empirical * 100
        errors.append(abs(err))
        print(f"    {frac:>4.0%}  {modelled:>10.0f}  {empirical:>11.0f}  {err:+6.1f}%   "
              f"{' '.join(f'{r:.0f}' for r in rates)}  (hit rate {hits / (hits + misses):.2f})")
    print(f"    max |error| {max(errors):.1f}%")

    # (c) CODA's allocator on the same pipeline, full memory.
    t1 = time.monotonic()
    with MinioCache.create(dataset_bytes * 2, tag="coda") as cache:
        warm(cache, files, storage, args.max_cpus, batch)
        coda = CodaSearch(args.max_cpus, "image")
        while (c := coda.next_cpus()) is not None:
            coda.record(c, point(loader(files, cache, storage, c, batch, k), c, n))
    print(f"\n(c) CODA: probes {coda.probes} (target <= 4), chose {coda.best_cpus} CPUs, "
          f"{time.monotonic() - t1:.1f} s; points: "
          + ", ".join(f"{c} CPU {t:.0f}/s" for c, t in coda.points))
    print(f"\nwhole benchmark: {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()

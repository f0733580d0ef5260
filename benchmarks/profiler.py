"""Optimistic profiling on the image example's data pipeline, against empirical runs.

Prints, from one run:

(a) the optimistic profile: CPU points measured (`OptimisticSearch`, start at the maximum,
    10% threshold), probes, and the wall time of the whole profile (every window, the storage
    measurement and the fill);
(b) modelled vs empirical throughput at three cache sizes (25/50/100% of the dataset): the
    model is the completed profile (`complete_profile`, read back through the scheduler's own
    `SensitivityProfile.speed`), the empirical figure a fresh MinIO cache of that size, one
    warm-up epoch that fills it, then whole epochs timed (target: within 5%);
(c) CODA's allocator on the same pipeline (`CodaSearch`, target <= 4 probes).

The pipeline: JPEGs read through `synergy.cache` (MinIO), decoded, randomly cropped and
flipped on CPU in DataLoader workers; the number of workers is the CPU count (on a real agent
the cpuset realises it too). There is no GPU: the "training step" consumes the batch.

Storage: with the page cache in play the disk is free, so the dataset's reads (the cache's
misses) go through a token bucket at --storage-mb-s, shared by all workers; the bandwidth fed
to the model is measured on that same reader with `measure_read_bandwidth`, never assumed.

`build_pipeline` is the swappable part: it writes its own small JPEG set with Pillow
(examples/image_classification/data.py, branch `examples`, is meant to replace it).

    python benchmarks/profiler.py [--images 384] [--image-size 160] [--storage-mb-s 2]
"""
from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from synergy.cache import MinioCache
from synergy.profiler.coda import CodaSearch
from synergy.profiler.fill import complete_profile
from synergy.profiler.search import OptimisticSearch
from synergy.profiler.storage import measure_read_bandwidth
from synergy.profiler.window import ThroughputWindow
from synergy.scheduler.profiles.format import SensitivityProfile

PROCESS_MEM_GB = 1.0  # the job's non-cache memory: only shifts the memory axis
CROP = 0.875  # random crop of 7/8 of each side, as ImageNet's 224 of 256


class TokenBucket:
    """Emulated storage: reads of all workers together drain one bucket filled at `rate`
    bytes/s, holding up to `burst_s` seconds of tokens. Kept as a shared "next free" time: a
    read of n bytes starts when the bucket has them and pushes that time on by n / rate; a
    device idle for a moment (all workers decoding) may catch up by at most `burst_s`."""

    def __init__(self, bytes_per_s: float, burst_s: float = 0.03) -> None:
        self.rate, self.burst_s = bytes_per_s, burst_s
        self._next = mp.get_context("fork").Value("d", 0.0)

    def read(self, path: Path) -> bytes:
        data = path.read_bytes()
        with self._next.get_lock():
            now = time.monotonic()
            start = max(now - self.burst_s, self._next.value)
            self._next.value = start + len(data) / self.rate
            until = self._next.value
        time.sleep(max(0.0, until - time.monotonic()))
        return data

    def opener(self, path: Path) -> io.BytesIO:
        return io.BytesIO(self.read(path))


class ImageFiles(Dataset):
    """JPEG bytes through the MinIO cache (misses via the bucket), decode, crop, flip."""

    def __init__(self, files: list[Path], cache: MinioCache, storage: TokenBucket) -> None:
        self.files, self.cache, self.storage = files, cache, storage

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        path = self.files[i]
        data = self.cache.get(str(path), load=lambda: self.storage.read(path))
        img = Image.open(io.BytesIO(data)).convert("RGB")
        w, h = img.size
        cw, ch = int(w * CROP), int(h * CROP)
        x, y = random.randint(0, w - cw), random.randint(0, h - ch)
        img = img.crop((x, y, x + cw, y + ch))
        if random.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)


def build_pipeline(data_dir: Path, count: int, size: int) -> list[Path]:
    """The benchmark's own JPEG set (noise plus gradients, so they do not compress to nothing)."""
    rng = np.random.default_rng(0)
    files = []
    for i in range(count):
        path = data_dir / f"img{i:05d}.jpg"
        if not path.exists():
            grad = np.linspace(0, 255, size, dtype=np.float32)
            base = (grad[None, :, None] + grad[:, None, None] * (i % 7) / 7) % 256
            noise = rng.normal(0, 40, (size, size, 3))
            arr = np.clip(base + noise, 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(path, quality=90)
        files.append(path)
    return files


def loader(files, cache, storage, workers: int, batch: int) -> DataLoader:
    return DataLoader(ImageFiles(files, cache, storage), batch_size=batch, shuffle=True,
                      num_workers=workers, multiprocessing_context="fork", prefetch_factor=4)


def window_rate(dl: DataLoader, warmup: int, measure: int) -> float:
    """Samples/s over `measure` batches after `warmup` (epochs restart as needed); each
    epoch's workers are shut down before the next starts, so no point overlaps another."""
    w = ThroughputWindow(warmup, measure)
    while not w.done:
        it = iter(dl)
        for batch in it:
            w.tick(time.monotonic(), len(batch))
            if w.done:
                break
        it._shutdown_workers()  # type: ignore[attr-defined]
        del it
    return w.samples_per_s


def epoch_rate(dl: DataLoader, epochs: int) -> float:
    """Samples/s over whole epochs: the cache's hit rate is exact only per epoch."""
    samples, start = 0, time.monotonic()
    for _ in range(epochs):
        for batch in dl:
            samples += len(batch)
    return samples / (time.monotonic() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=384)
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--storage-mb-s", type=float, default=2.0)
    ap.add_argument("--max-cpus", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dir", type=Path, default=Path.cwd())
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="synergy-profiler-bench-", dir=args.dir))
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: Path) -> None:
    files = build_pipeline(tmp, args.images, args.image_size)
    dataset_bytes = sum(p.stat().st_size for p in files)
    sample_bytes = dataset_bytes / len(files)
    storage = TokenBucket(args.storage_mb_s * 1e6)
    batch, warmup, measure = args.batch_size, 6, max(16, 2 * len(files) // args.batch_size)
    print(f"dataset: {len(files)} JPEGs {args.image_size}px, {dataset_bytes / 1e6:.2f} MB "
          f"({sample_bytes / 1e3:.1f} kB/sample); storage emulated at {args.storage_mb_s:g} MB/s; "
          f"CPUs 1..{args.max_cpus} (DataLoader workers); batch {batch}")

    # (a) the optimistic profile, at full memory: the whole dataset cached (warmed once).
    t0 = time.monotonic()
    with MinioCache.create(dataset_bytes * 2, tag="full") as cache:
        for _ in loader(files, cache, storage, args.max_cpus, batch):
            pass  # one epoch admits every file
        search = OptimisticSearch(args.max_cpus)
        while (cpus := search.next_cpus()) is not None:
            search.record(cpus, window_rate(loader(files, cache, storage, cpus, batch), warmup, measure))
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
    print("    cache  modelled/s  empirical/s  error")
    errors = []
    for frac in (0.25, 0.5, 1.0):
        capacity = int(dataset_bytes * frac)
        modelled = prof.speed(cpus, PROCESS_MEM_GB + capacity / 1e9) / prof.iter_time_s * batch
        with MinioCache.create(capacity, tag=f"c{int(frac * 100)}") as cache:
            dl = loader(files, cache, storage, cpus, batch)
            for _ in dl:
                pass  # the first epoch fills the cache (first accesses)
            before = cache.stats()
            empirical = epoch_rate(dl, epochs=2)
            after = cache.stats()
        hits, misses = after.hits - before.hits, after.misses - before.misses
        err = (modelled - empirical) / empirical * 100
        errors.append(abs(err))
        print(f"    {frac:>4.0%}  {modelled:>10.0f}  {empirical:>11.0f}  {err:+6.1f}%   "
              f"(hit rate {hits / (hits + misses):.2f} in the timed epochs)")
    print(f"    max |error| {max(errors):.1f}%")

    # (c) CODA's allocator on the same pipeline, full memory.
    t1 = time.monotonic()
    with MinioCache.create(dataset_bytes * 2, tag="coda") as cache:
        for _ in loader(files, cache, storage, args.max_cpus, batch):
            pass
        coda = CodaSearch(args.max_cpus, "image")
        while (c := coda.next_cpus()) is not None:
            coda.record(c, window_rate(loader(files, cache, storage, c, batch), warmup, measure))
    print(f"\n(c) CODA: probes {coda.probes} (target <= 4), chose {coda.best_cpus} CPUs, "
          f"{time.monotonic() - t1:.1f} s; points: "
          + ", ".join(f"{c} CPU {t:.0f}/s" for c, t in coda.points))


if __name__ == "__main__":
    main()

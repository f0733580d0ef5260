"""The image example's memory axis, measured: samples/s at several cache sizes against the model.

The profile the live profiler reports for `examples/image_classification` models the memory
axis (§3.1): ``rate(m) = min(rate at full memory, storage(m))``, with ``storage(m)`` the read
bandwidth measured on the job's files divided by the bytes each sample misses. This script
measures that axis directly on the example's own pipeline: the real `build_loader` over
generated JPEGs, read through a `MinioCache` of 0, 25, 50, 75 and 100 % of the dataset, every
file's page cache dropped before each timed epoch (`posix_fadvise(DONTNEED)`, the profiler's own
way), so a miss is a cold read from the disk and a hit is a copy out of /dev/shm. One warm-up
epoch per size fills the cache (admitted on first access, never evicted), then `--epochs`
timed ones. Printed per size: the hit rate, the measured samples/s and the model's.

    python benchmarks/cache_memory_axis.py [--images 512] [--image-size 256] [--workers 1] [--dir PATH]
                                           [--throttle-mb-s N]

`--throttle-mb-s N` (root, cgroup v1 blkio) stands in for slow shared storage: the script moves
itself (and so its DataLoader workers) into a blkio cgroup that caps reads from the disk under
--dir at N MB/s (`blkio.throttle.read_bps_device`), before measuring the read bandwidth and the
epochs; it moves back and removes the group at the end. Printed, not asserted. Run on a quiet
machine: decoding shares the cores with anything else. Where storage is faster than decoding,
the axis is flat and the model says so too.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `examples` from the repository root

import torch  # noqa: E402

from examples.image_classification import data  # noqa: E402
from synergy.cache import MinioCache  # noqa: E402
from synergy.profiler.storage import drop_page_cache, measure_read_bandwidth  # noqa: E402
from synergy.scheduler.profiles.minio import storage_samples_per_s  # noqa: E402

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


BLKIO = Path("/sys/fs/cgroup/blkio")


@contextlib.contextmanager
def read_throttle(folder: Path, mb_s: float) -> Iterator[str]:
    """This process (and its later children) in a blkio group reading the disk of `folder` at
    `mb_s` MB/s at most; yields what it did."""
    if mb_s <= 0:
        yield "storage not throttled"
        return
    dev = os.stat(folder).st_dev
    group = BLKIO / f"synergy-memaxis-{os.getpid()}"
    group.mkdir()
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{os.major(dev)}:{os.minor(dev)} {int(mb_s * 1e6)}")
        (group / "cgroup.procs").write_text(str(os.getpid()))
        yield f"reads from {os.major(dev)}:{os.minor(dev)} throttled to {mb_s:g} MB/s (blkio)"
    finally:
        (BLKIO / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()


def epoch_rate(loader: torch.utils.data.DataLoader, files: list[Path]) -> float:
    """Samples/s of one epoch, every file's page cache dropped first (not timed)."""
    for f in files:
        drop_page_cache(f)
    n, start = 0, time.perf_counter()
    for x, _ in loader:
        n += len(x)
    return n / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=512)
    p.add_argument("--image-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per cache size")
    p.add_argument("--dir", type=Path, default=Path.cwd(), help="where the JPEGs go (a disk, not tmpfs)")
    p.add_argument("--throttle-mb-s", type=float, default=0.0,
                   help="cap disk reads at this many MB/s (root, cgroup v1 blkio; 0 = no cap)")
    args = p.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="synergy-memaxis-", dir=args.dir))
    try:
        with read_throttle(root, args.throttle_mb_s) as how:
            print(how)
            measure(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def measure(args: argparse.Namespace, root: Path) -> None:
    """Print the table (module docstring) for the JPEGs generated under `root`."""
    files = data.ensure_images(root, args.images, args.image_size)
    dataset = sum(f.stat().st_size for f in files)
    sample_kb = dataset / len(files) / 1e3
    storage = measure_read_bandwidth(files, 2.0)
    print(f"{len(files)} JPEGs of {args.image_size} px, {dataset / 1e6:.1f} MB ({sample_kb:.1f} kB/sample); "
          f"{args.workers} worker(s); storage read {storage / 1e6:.0f} MB/s cold"
          + ("" if storage.page_cache_dropped else f" (page cache NOT dropped: {storage.note})"))
    print(f"{'cache/dataset':>13} {'hit rate':>8} {'measured/s':>10} {'model/s':>8}")
    full = None
    for fraction in sorted(FRACTIONS, reverse=True):  # full memory first: the model's reference
        with MinioCache.create(int(dataset * fraction), tag=f"memaxis{int(fraction * 100)}") as cache:
            loader = data.build_loader(files, args.batch_size, args.workers, cache=cache)
            for _ in loader:  # warm-up: fills the cache in admission order
                pass
            before = cache.stats()
            rates = [epoch_rate(loader, files) for _ in range(args.epochs)]
            after = cache.stats()
        reads = (after.hits - before.hits) + (after.misses - before.misses)
        hit = (after.hits - before.hits) / max(1, reads)
        measured = sorted(rates)[len(rates) // 2]
        full = measured if full is None else full
        model = min(full, storage_samples_per_s(1.0 - hit, sample_kb, storage / 1e6))
        print(f"{fraction:>13.0%} {hit:>8.3f} {measured:>10.1f} {model:>8.1f}")


if __name__ == "__main__":
    sys.exit(main())

"""Image classification: a small CNN on generated JPEGs, decoded and augmented on the CPU.

    python examples/image_classification/train.py --epochs 1

CPU-sensitive on purpose (decoding dominates: more --workers, more samples/s). Under Synergy
(started by synergy-agent) the file bytes go through the job's MinIO cache, sized from its
memory allocation; standalone, ``--cache-mb N`` gives it a cache of N MiB. Prints one line per
epoch: ``epoch E step S loss L samples/s X``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

if __package__ in (None, ""):  # run as a file: make `examples` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from examples import common  # noqa: E402
from examples.image_classification import data  # noqa: E402
from examples.image_classification.model import SmallCNN  # noqa: E402
from synergy.common import contract  # noqa: E402
from synergy.cache import MinioCache  # noqa: E402
from synergy.iterator import SynergyIterator  # noqa: E402


def job_cache(cache_mb: int, process_mem_gb: float) -> MinioCache | None:
    """The job's MinIO cache: from SYNERGY_ALLOC_MEM_GB when managed, else --cache-mb (0 = none)."""
    if contract.JOB_ID in os.environ:
        return MinioCache.for_job(process_mem_gb=process_mem_gb)
    return MinioCache.create(cache_mb * 2**20) if cache_mb > 0 else None


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0], images=True)
    p.add_argument("--cache-mb", type=int, default=0, help="standalone: MinIO cache size in MiB (0 = no cache)")
    p.add_argument("--process-mem-gb", type=float, default=0.25,
                   help="managed: the process's own memory, left out of the cache's share of the allocation")
    args = common.parse(p, "image_classification", argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    files = data.ensure_images(args.data_dir, args.images, args.image_size, seed=args.seed)
    cache = job_cache(args.cache_mb, args.process_mem_gb)
    loader = data.build_loader(files, args.batch_size, args.workers, cache=cache)
    model = SmallCNN(data.CLASSES)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = SynergyIterator(loader, state={"model": model, "optimizer": opt})  # the one added line
    steps = 0
    for epoch in range(args.epochs):
        meter = common.EpochMeter()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            meter.add(len(y), loss.item())
            if args.max_steps and common.job_step(loader, steps) >= args.max_steps:
                break
        if meter.batches:
            print(meter.line(epoch, common.job_step(loader, steps)), flush=True)
        if args.max_steps and common.job_step(loader, steps) >= args.max_steps:
            break
    if cache is not None:
        print("cache " + " ".join(f"{k} {v}" for k, v in cache.stats().as_dict().items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

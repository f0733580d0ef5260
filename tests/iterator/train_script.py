"""A plain PyTorch training script with the one-line wrap; the end-to-end tests run it as a job.

Each sample is its own index, so the batches it trains on are recorded exactly: every batch
appends one line "step rank epoch loss id,id,..." to --record (flushed, so a kill loses nothing).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

from synergy.iterator import ElasticSampler, SynergyIterator


class Indexed(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x = torch.full((4,), float(i % 7))
        return x, x.sum(dim=0, keepdim=True) * 0.5, i


def _sample(data: bytes) -> tuple[torch.Tensor, torch.Tensor, int]:
    i = int(data)
    x = torch.full((4,), float(i % 7))
    return x, x.sum(dim=0, keepdim=True) * 0.5, i


def cached_dataset(n: int, folder: str) -> Dataset:
    """Sample i read from file `folder`/i through the job's MinIO cache (sized from the contract)."""
    from pathlib import Path

    from synergy.cache import CachedFileDataset, MinioCache

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        f = root / f"{i:06d}"
        if not f.exists():
            f.write_text(str(i))
        paths.append(f)
    return CachedFileDataset(paths, MinioCache.for_job(), transform=_sample)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=96)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--elastic", action="store_true")
    p.add_argument("--step-s", type=float, default=0.01)
    p.add_argument("--record", required=True)
    p.add_argument("--gloo", action="store_true", help="torch.distributed over the contract's rendezvous")
    p.add_argument("--cache-dir", help="read samples from files in this folder through a MinIO cache")
    p.add_argument("--affinity", help="append 'step cpus workers' per batch (the cpuset this process runs on)")
    a = p.parse_args()
    rank = int(os.environ.get("SYNERGY_RANK", "0"))
    world = int(os.environ.get("SYNERGY_WORLD_SIZE", "1"))
    if a.gloo:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{os.environ['SYNERGY_MASTER_ADDR']}:"
                                f"{os.environ['SYNERGY_MASTER_PORT']}", rank=rank, world_size=world)
    torch.manual_seed(0)
    ds = cached_dataset(a.samples, a.cache_dir) if a.cache_dir else Indexed(a.samples)
    sampler = ElasticSampler(len(ds), rank, world, seed=1) if a.elastic else None
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=sampler is None, sampler=sampler,
                        num_workers=a.workers)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = SynergyIterator(loader, state={"model": model, "optimizer": opt})
    with open(a.record, "a") as rec:
        for epoch in range(a.epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            for x, y, ids in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                if a.gloo:  # every rank must be at the same step or this collective hangs
                    for prm in model.parameters():
                        torch.distributed.all_reduce(prm.grad)
                opt.step()
                step = loader.lease.step if loader.lease is not None else 0
                rec.write(f"{step} {rank} {epoch} {loss.item():.6f} {','.join(map(str, ids.tolist()))}\n")
                rec.flush()
                if a.affinity:
                    with open(a.affinity, "a") as aff:
                        aff.write(f"{step} {len(os.sched_getaffinity(0))} {loader.loader.num_workers}\n")
                time.sleep(a.step_s)


if __name__ == "__main__":
    main()

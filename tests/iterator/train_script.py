"""A plain PyTorch training script with the one-line wrap; the end-to-end tests run it as a job.

Each sample is its own index, so the batches it trains on are recorded exactly: every batch
appends one line "step rank epoch loss id,id,... attempt" to --record (flushed, so a kill
loses nothing). Flags for the failure tests: --data-dir (samples are read from files there,
in the DataLoader's workers), --exit-code (end with sys.exit(N)), --grpc-first (import grpc
before synergy.iterator, as a script whose other libraries use gRPC may), --hold-at STEP
--hold-file F (after that step, wait until F exists: a job that is still running, on cue),
--state-mb N (N MB more state: checkpoints that take a while or fill a small disk).
"""

from __future__ import annotations

import sys

if "--grpc-first" in sys.argv:
    import grpc  # noqa: F401  (before synergy.iterator: the import order the wrap cannot control)

import argparse
import os
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from synergy.iterator import ElasticSampler, SynergyIterator


class Indexed(Dataset):
    """Sample i is (x, y, i); with `data_dir`, it also reads `data_dir/<i>.bin` (a file dataset)."""

    def __init__(self, n: int, data_dir: str = "") -> None:
        self.n = n
        self.data_dir = Path(data_dir) if data_dir else None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        if self.data_dir is not None:
            (self.data_dir / f"{i}.bin").read_bytes()
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
    p.add_argument("--data-dir", default="")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--grpc-first", action="store_true")
    p.add_argument("--hold-at", type=int, default=0)
    p.add_argument("--hold-file", default="")
    p.add_argument("--state-mb", type=float, default=0)
    a = p.parse_args()
    rank = int(os.environ.get("SYNERGY_RANK", "0"))
    world = int(os.environ.get("SYNERGY_WORLD_SIZE", "1"))
    attempt = int(os.environ.get("SYNERGY_ATTEMPT", "0"))
    if a.grpc_first:
        from grpc._cython import cygrpc

        print(f"grpc fork support: {cygrpc.is_fork_support_enabled()}", flush=True)
    if a.gloo:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{os.environ['SYNERGY_MASTER_ADDR']}:"
                                f"{os.environ['SYNERGY_MASTER_PORT']}", rank=rank, world_size=world)
    torch.manual_seed(0)
    ds = cached_dataset(a.samples, a.cache_dir) if a.cache_dir else Indexed(a.samples, a.data_dir)
    sampler = ElasticSampler(len(ds), rank, world, seed=1) if a.elastic else None
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=sampler is None, sampler=sampler,
                        num_workers=a.workers)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"model": model, "optimizer": opt}
    if a.state_mb:
        ballast = torch.nn.Module()
        ballast.register_buffer("b", torch.zeros(int(a.state_mb * 2**20) // 4))
        state["ballast"] = ballast
    loader = SynergyIterator(loader, state=state)
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
                rec.write(f"{step} {rank} {epoch} {loss.item():.6f} {','.join(map(str, ids.tolist()))} {attempt}\n")
                rec.flush()
                if a.affinity:
                    with open(a.affinity, "a") as aff:
                        aff.write(f"{step} {len(os.sched_getaffinity(0))} {loader.loader.num_workers}\n")
                time.sleep(a.step_s)
                while step == a.hold_at and not os.path.exists(a.hold_file):
                    time.sleep(0.05)  # the lease thread keeps renewing meanwhile
    if a.exit_code:
        sys.exit(a.exit_code)


if __name__ == "__main__":
    main()

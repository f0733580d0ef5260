"""The physical benchmark's training job: real PyTorch, real DataLoader, a fake GPU.

Each sample costs `--cpu-ms` of real CPU time in the DataLoader (a busy loop on the
process's own CPU clock, so a CFS quota or a smaller cpuset slows it as it would slow JPEG
decoding); each step then "runs on the GPU" for `--step-s` of wall time that uses no host
CPU (a sleep: the device is busy, the host is not). The loader's `--workers` processes
prepare the next batches while the device step runs, as a real input pipeline does (with
none, loading and the step take turns and a job never uses more than about half a core
whatever it is given: the first physical runs' "heavy" jobs measured 45.5 samples/s at half
a core and 48.3 at one). A loading-heavy job then needs about `batch * cpu_ms / step_s`
CPUs to keep its GPU busy; a light one a small fraction of a core.
Wrapped in `SynergyIterator` (leases, profiling points, checkpoints at a stop).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

from synergy.iterator import SynergyIterator


class Burning(Dataset):
    def __init__(self, n: int, cpu_ms: float) -> None:
        self.n, self.cpu_s = n, cpu_ms / 1000.0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.thread_time() + self.cpu_s
        while time.thread_time() < end:
            pass
        x = torch.full((4,), float(i % 7))
        return x, x.sum(dim=0, keepdim=True) * 0.5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--cpu-ms", type=float, default=10.0, help="CPU time per sample in the DataLoader, ms")
    p.add_argument("--step-s", type=float, default=0.04, help="device time per step (no host CPU), s")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (0: load in the loop)")
    a = p.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Burning(a.samples, a.cpu_ms), batch_size=a.batch_size, shuffle=True,
                        num_workers=a.workers)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    it = SynergyIterator(loader, state={"model": model, "optimizer": opt})
    for _ in range(a.epochs):
        for x, y in it:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(a.step_s)


if __name__ == "__main__":
    main()

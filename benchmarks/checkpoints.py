"""Periodic background checkpoints: write speed against dd, training slowdown, steps lost on a lost node.

    .venv/bin/python benchmarks/checkpoints.py                      # the full run (quiet machine, ~8 min)
    .venv/bin/python benchmarks/checkpoints.py --short              # one quick pass of each (~1.5 min)

* **write speed** (target: >= 0.75x dd): `checkpoint.atomic_save` of a --write-mb state (1 GB:
  one tensor; temp file, fsync, rename, fsync dir) against `dd if=/dev/zero bs=1M conv=fsync`
  to the same directory, interleaved --repeats times in this one run; the median of each and
  the ratio. The save with torch's default per-record CRC32 (what the wrap did before) is
  timed in the same run for comparison.
* **training slowdown** (target: <= 3% with a 256 MB state, checkpoints every 30 s): a
  managed `SynergyIterator` (no daemon listens; a thread plays the daemon and agrees a
  checkpoint step every --every seconds) over a loop whose step is a fixed CPU matmul
  (~10 ms), --duration seconds without checkpoints and the same with, alternating; steps/s.
* **steps lost on kill -9 of the node** (target: <= one interval): a real synergyd and two
  real agents (tests/iterator/job_cluster.py; needs root and cgroup v1), a real job
  (train_script.py, --lost-every s checkpoints), its machine lost (kill -9 of its agent and every
  process in its cgroups) after --lost-after s; steps it trained past its last checkpoint.

Printed, not asserted. Every figure depends on the machine: run the full form on a quiet one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.utils.serialization as torch_serialization

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent"), str(ROOT / "tests" / "iterator")]

from synergy.common.contract import JobEnv  # noqa: E402
from synergy.iterator import SynergyIterator, checkpoint  # noqa: E402


def write_speed(directory: Path, mb: int, repeats: int) -> None:
    state = {"position": {}, "state": {"w": torch.randn(mb * 2**20 // 4)}}
    ours, dd, crc = [], [], []
    directory.mkdir(parents=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={directory / 'warm.bin'}", "bs=1M", f"count={mb}", "conv=fsync"],
                   check=True, capture_output=True)  # warm-up, not counted: the first write of a run is slow
    (directory / "warm.bin").unlink()
    for i in range(repeats):
        target = directory / f"step-{i}" / "rank0.pt"
        t = time.perf_counter()
        checkpoint.atomic_save(state, target)
        ours.append(mb / (time.perf_counter() - t))
        target.unlink()
        t = time.perf_counter()
        subprocess.run(["dd", "if=/dev/zero", f"of={directory / 'dd.bin'}", "bs=1M", f"count={mb}", "conv=fsync"],
                       check=True, capture_output=True)
        dd.append(mb / (time.perf_counter() - t))
        (directory / "dd.bin").unlink()
        with open(directory / "crc.pt", "wb") as f, torch_serialization.config.patch({"save.compute_crc32": True}):
            t = time.perf_counter()
            torch.save(state, f)
            f.flush()
            __import__("os").fsync(f.fileno())
            crc.append(mb / (time.perf_counter() - t))
        (directory / "crc.pt").unlink()
    o, d, c = statistics.median(ours), statistics.median(dd), statistics.median(crc)
    print(f"write speed, {mb} MB state, median of {repeats} interleaved: checkpoint {o:.0f} MB/s, "
          f"dd conv=fsync {d:.0f} MB/s -> {o / d:.2f}x (target >= 0.75x); with torch's CRC32 (before) {c:.0f} MB/s")
    print(f"  each run: checkpoint {[round(x) for x in ours]}, dd {[round(x) for x in dd]}, crc {[round(x) for x in crc]}")


class Ballast(torch.nn.Module):
    def __init__(self, mb: int) -> None:
        super().__init__()
        self.register_buffer("b", torch.randn(mb * 2**20 // 4))


def train_for(directory: Path, seconds: float, every: float, state_mb: int) -> tuple[float, int, int, float]:
    """(steps/s, checkpoints written, skipped, snapshot seconds) of `seconds` of training."""
    env = JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address="127.0.0.1:1", job_token="t",
                 checkpoint_dir=str(directory)).to_env()
    a, b = torch.randn(192, 192), torch.randn(192, 192)
    batches = range(10**9)  # re-iterable, nothing held in memory
    it = SynergyIterator(batches, state={"ballast": Ballast(state_mb)}, environ=env)
    lease = it.lease
    assert lease is not None
    lease.report_patience_s = 0
    lease.report_checkpoint = lambda step, path, error="": not error  # type: ignore[method-assign]
    done = threading.Event()

    def daemon() -> None:  # agrees a checkpoint a few steps ahead every `every` seconds
        while every and not done.wait(every):
            lease.checkpoint_at = lease.step + 5

    threading.Thread(target=daemon, daemon=True).start()
    end = time.perf_counter() + seconds
    steps = 0
    for _ in it:
        for _ in range(8):
            a @ b
        steps += 1
        if steps % 16 == 0 and time.perf_counter() >= end:
            break
    elapsed = seconds + (time.perf_counter() - end)
    done.set()
    if it.writer is not None:
        it.writer.wait()
    lease.close()
    return steps / elapsed, it.periodic_written, it.periodic_skipped, it.snapshot_s


def slowdown(directory: Path, seconds: float, every: float, state_mb: int, pairs: int) -> None:
    torch.set_num_threads(1)
    base, with_ckpt = [], []
    for i in range(pairs):
        base.append(train_for(directory / f"none-{i}", seconds, 0, state_mb)[0])
        rate, n, skipped, snap = train_for(directory / f"every-{i}", seconds, every, state_mb)
        with_ckpt.append(rate)
        print(f"  pair {i + 1}: none {base[-1]:.1f} steps/s, every {every:g} s {rate:.1f} steps/s "
              f"({n} written, {skipped} skipped, {snap:.2f} s snapshotting)")
    b, w = statistics.median(base), statistics.median(with_ckpt)
    print(f"training with a {state_mb} MB state, checkpoints every {every:g} s vs none ({seconds:g} s each, "
          f"median of {pairs}): {w:.1f} vs {b:.1f} steps/s -> {100 * (1 - w / b):+.1f}% slower (target <= 3%)")


def steps_lost(tmp: Path, every: float, after: float, step_s: float) -> None:
    from agent_harness import is_root_with_v1
    from job_cluster import records, start_cluster, train_command
    from synergyd_harness import wait_for

    if not is_root_with_v1():
        print("steps lost on kill -9 of the node: skipped (needs root and cgroup v1 for the real agents)")
        return
    tmp.mkdir(parents=True)
    c = start_cluster(tmp, "--node-timeout-s", "3", "--lease-grace-s", "30")
    try:
        admin = c.daemon.admin()
        rec = tmp / "batches.txt"
        job = admin.submit("lost", gpus=1, command=train_command(
            rec, "--samples", "1000000", "--epochs", "1", "--step-s", str(step_s)),
            working_dir=str(tmp), checkpoint_dir=str(tmp / "ckpt"), checkpoint_every_s=every).id
        wait_for(lambda: records(rec), timeout=120, what="training to start")
        time.sleep(after)
        victim = admin.describe(job).placements[0].node_id
        c.agent(victim).lose_machine()
        wait_for(lambda: any(r.attempt > 1 for r in records(rec)), timeout=180, what="the job to resume")
        rows = records(rec)
        last = max(r.step for r in rows if r.attempt == 1)
        resumed = min(r.step for r in rows if r.attempt > 1) - 1
        per_interval = every / step_s
        print(f"steps lost on kill -9 of the node (checkpoints every {every:g} s, ~{per_interval:.0f} steps; "
              f"killed after {after:g} s): trained to step {last}, resumed after step {resumed}: "
              f"{last - resumed} steps lost = {(last - resumed) / per_interval:.2f} intervals (target <= 1)")
        admin.close()
    finally:
        c.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short", action="store_true", help="one quick pass of each (not the figures to report)")
    p.add_argument("--dir", default="", help="where to write (default: a temp dir on /tmp's disk)")
    p.add_argument("--write-mb", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--state-mb", type=int, default=256)
    p.add_argument("--every", type=float, default=30.0)
    p.add_argument("--duration", type=float, default=90.0)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--lost-every", type=float, default=10.0)
    p.add_argument("--lost-after", type=float, default=25.0)
    a = p.parse_args()
    if a.short:
        a.repeats, a.duration, a.every, a.pairs, a.lost_every, a.lost_after = 2, 25.0, 8.0, 1, 4.0, 10.0
    with tempfile.TemporaryDirectory(dir=a.dir or None) as tmp:
        t = Path(tmp)
        write_speed(t / "write", a.write_mb, a.repeats)
        slowdown(t / "train", a.duration, a.every, a.state_mb, a.pairs)
        steps_lost(t / "lost", a.lost_every, a.lost_after, 0.02)


if __name__ == "__main__":
    main()

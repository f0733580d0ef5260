"""The start-up phase (issue 14): how long a light job takes to reach its training loop, with and without.

On one core of this machine, the agent's real `Supervisor` and real cgroups (root, v1 or v2) run
a busy 0.5-CPU neighbour (its start-up over) and then, at 0.25 CPU, a job that does what a
training script does before its loop (`import torch`, build a small model) and then says it
reached its loop (`synergy.common.startup.reached_training_loop`, what the SynergyIterator calls).
Printed per run: launch -> loop (the job's own clock, from its start to the answer), and the
cores the neighbour used meanwhile (its allocation is 0.5; `--neighbour-cpus 0`: none). `off` is the quota from the start
(the agent before the phase: `startup_cap_s=0`); `on` is the phase.

    python benchmarks/startup_phase.py [--runs 3] [--starter-cpus 0.25] [--neighbour-cpus 0.5]

Then the wind-down (the same job's other end): a job that trains a few steps with two
DataLoader workers and exits, saying it is winding down at exit as the SynergyIterator does;
printed: seconds from that word to the agent seeing the process gone (its GPUs are held until
then), with the quota kept (`--wind-down-cap-s 0`, `off`) and lifted (`on`), alternated.

Printed, not asserted; bounded in time; it stops every task it started. The figures depend on
the machine's load: say `uptime` beside them.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from synergy.agent.cgroups import detect
from synergy.agent.tasks import Supervisor, Task
from synergy.v1 import common_pb2, node_pb2

STARTER = """
import time
t0 = time.monotonic()
import torch
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
from synergy.common.startup import reached_training_loop
reached_training_loop()
print('LOOP', round(time.monotonic() - t0, 3), flush=True)
time.sleep(600)
"""
NEIGHBOUR = """
from synergy.common.startup import reached_training_loop
reached_training_loop()
while True:
    pass
"""
ENDER = """
import atexit, time
import torch
from torch.utils.data import DataLoader
from synergy.common.startup import JobLine
line = JobLine()
line.reached_training_loop()
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
for x in DataLoader(torch.randn(64, 256), batch_size=8, num_workers=2):
    model(x).sum().backward()

def down():
    print('DOWN', time.monotonic(), flush=True)
    line.winding_down()

atexit.register(down)
"""
TICK = os.sysconf("SC_CLK_TCK")


def _spec(job: int, code: str, cpus: float) -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"j{job}", world_size=1,
        command=[sys.executable, "-c", code],
        placement=common_pb2.Placement(node_id="n", gpus=0, cpus=cpus, mem_gb=1.0), job_token="t" * 20)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _until(sup: Supervisor, done, timeout_s: float = 300.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        sup.poll()
        time.sleep(0.02)


def one_run(mode: str, args: argparse.Namespace, core: int) -> tuple[float, float]:
    """(seconds from the starter's start to its loop, cores the neighbour used meanwhile)."""
    cg = detect(f"synergy-bench-{uuid.uuid4().hex[:8]}/n", (core,))
    if cg.kind == "none":
        raise SystemExit(f"needs root and cgroups: {cg.describe()}")
    work = Path(tempfile.mkdtemp(prefix="startup-bench-"))
    sup = Supervisor(node_id="n", cores=(core,), gpus=0, mem_gb=4, work_dir=work, cgroups=cg,
                     log=logging.getLogger("bench"), daemon_address="127.0.0.1:1",
                     startup_cap_s=0 if mode == "off" else 120)
    try:
        neighbour: Task | None = None
        if args.neighbour_cpus > 0:
            neighbour = sup.launch(_spec(1, NEIGHBOUR, args.neighbour_cpus))
            _until(sup, lambda: neighbour.startup is None and neighbour.pid)  # type: ignore[union-attr]
            time.sleep(0.5)
        starter: Task = sup.launch(_spec(2, STARTER, args.starter_cpus))
        n0 = _cpu_s(neighbour.pid) if neighbour else 0.0
        t0 = time.monotonic()
        _until(sup, lambda: "LOOP" in starter.log_path.read_text())
        n1, t1 = (_cpu_s(neighbour.pid) if neighbour else 0.0), time.monotonic()
        loop_s = float(starter.log_path.read_text().split("LOOP", 1)[1].split()[0])
        return loop_s, (n1 - n0) / (t1 - t0)
    finally:
        sup.shutdown(0)
        cg.teardown()
        shutil.rmtree(work, ignore_errors=True)


def wind_down_run(mode: str, args: argparse.Namespace, core: int) -> float:
    """Seconds from the job's word at exit to the agent seeing its process gone."""
    cg = detect(f"synergy-bench-{uuid.uuid4().hex[:8]}/n", (core,))
    work = Path(tempfile.mkdtemp(prefix="winddown-bench-"))
    sup = Supervisor(node_id="n", cores=(core,), gpus=0, mem_gb=4, work_dir=work, cgroups=cg,
                     log=logging.getLogger("bench"), daemon_address="127.0.0.1:1",
                     wind_down_cap_s=0 if mode == "off" else 30)
    try:
        if args.neighbour_cpus > 0:
            neighbour = sup.launch(_spec(1, NEIGHBOUR, args.neighbour_cpus))
            _until(sup, lambda: neighbour.startup is None and neighbour.pid)
        ender: Task = sup.launch(_spec(2, ENDER, args.starter_cpus))
        _until(sup, lambda: not ender.alive)
        gone = time.monotonic()
        said = ender.log_path.read_text().split("DOWN", 1)
        if len(said) < 2:
            raise SystemExit(f"the job did not say it: {ender.log_path.read_text()[-2000:]}")
        return gone - float(said[1].split()[0])
    finally:
        sup.shutdown(0)
        cg.teardown()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--starter-cpus", type=float, default=0.25)
    ap.add_argument("--neighbour-cpus", type=float, default=0.5, help="0: no neighbour (an idle core)")
    ap.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)))
    args = ap.parse_args()
    logging.getLogger("bench").setLevel(logging.ERROR)  # the tasks' stop at the end of each run
    print(f"one core ({args.core}); neighbour {args.neighbour_cpus:g} CPU busy, starter {args.starter_cpus:g} CPU; "
          f"load average {os.getloadavg()[0]:.2f}")
    results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for _ in range(args.runs):
        for mode in ("off", "on"):  # alternated, so a change in the machine's load hits both
            loop_s, cores = one_run(mode, args, args.core)
            results[mode].append((loop_s, cores))
            print(f"  {mode:3}: start -> training loop {loop_s:6.2f} s; neighbour used {cores:.2f} cores meanwhile")
    for mode, rows in results.items():
        print(f"{mode:3}: median start -> loop {statistics.median(r[0] for r in rows):.2f} s, "
              f"neighbour {min(r[1] for r in rows):.2f}-{max(r[1] for r in rows):.2f} cores")
    print(f"wind-down: the same job at {args.starter_cpus:g} CPU trains 8 steps (2 DataLoader workers) and exits; "
          f"load average {os.getloadavg()[0]:.2f}")
    ends: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.runs):
        for mode in ("off", "on"):
            ends[mode].append(wind_down_run(mode, args, args.core))
            print(f"  {mode:3}: winding down -> process gone {ends[mode][-1]:6.2f} s")
    for mode, times in ends.items():
        print(f"{mode:3}: median winding down -> gone {statistics.median(times):.2f} s "
              f"(quota {'kept' if mode == 'off' else 'lifted'})")


if __name__ == "__main__":
    main()

"""The node agent's own cost: CPU with 16 running tasks and 1 s sampling, heartbeat bytes, launch latency.

Runs the agent's real parts in this process (the `Supervisor` with real processes and, as
root with cgroup v1/v2, real cgroups; the `Sampler`; the contention eliminator; the
heartbeat message built and serialised as the agent sends it) without a daemon, so the
figures are the agent's work alone:

* **overhead**: 16 tasks (`sleep 600`) and one sample + one heartbeat per second for
  --duration seconds; the process's own CPU time (not its children's) over wall time.
  Target: <= 1 % of one core.
* **payload**: bytes of the heartbeat per task as sent today (`TaskStatus`) and of one
  task's telemetry (`TaskSample`) encoded compactly (JSON, an upper bound for the proto
  fields it will become).
* **launch latency**: LAUNCH received (the `launch()` call) -> the job's own program
  running inside its cgroup (its `/proc/PID/exe` is the job's binary, its pid in
  `cgroup.procs`), over --launches launches. Target: p50 <= 50 ms.

    python benchmarks/agent_overhead.py [--tasks 16] [--duration 20] [--launches 30]

Printed, not asserted; bounded in time; it stops every task it started.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from synergy.agent.bandwidth import calibrate
from synergy.agent.cgroups import detect
from synergy.agent.report import statuses
from synergy.agent.contention import Policy
from synergy.agent.eliminator import Eliminator
from synergy.agent.tasks import Phase, Supervisor
from synergy.agent.telemetry import Sampler
from synergy.v1 import common_pb2, node_pb2

SLEEP = shutil.which("sleep") or "/bin/sleep"


def spec(job: int, cpus: float) -> node_pb2.TaskSpec:
    return node_pb2.TaskSpec(
        ref=node_pb2.TaskRef(job_id=job, attempt=1, rank=0), job_name=f"bench{job}", world_size=1,
        command=[SLEEP, "600"], placement=common_pb2.Placement(node_id="bench", gpus=0, cpus=cpus, mem_gb=0.05),
        job_token="t" * 32,
    )


def own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--launches", type=int, default=30)
    args = ap.parse_args()

    cores = tuple(sorted(os.sched_getaffinity(0)))
    log = logging.getLogger("bench")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    work = Path(tempfile.mkdtemp(prefix="synergy-agent-bench-"))
    cg = detect(f"synergy-bench/{uuid.uuid4().hex[:8]}", cores)
    sup = Supervisor(node_id="bench", cores=cores, gpus=0, mem_gb=args.tasks * 0.05 + 1, work_dir=work,
                     cgroups=cg, log=log, daemon_address="127.0.0.1:1")
    cal = calibrate(cores, 0.3, work)
    sampler = Sampler(cores, cg, calibration=cal)
    elim = Eliminator(sup, log, Policy())
    print(f"cgroups: {cg.describe()}")
    print(f"bandwidth calibration: peak {cal.peak_bytes_per_s / 1e9:.1f} GB/s, "
          f"one core {cal.per_core_bytes_per_s / 1e9:.1f} GB/s")
    try:
        # -- launch latency -------------------------------------------------------------------
        lat = []
        for i in range(args.launches):
            t0 = time.perf_counter()
            t = sup.launch(spec(10_000 + i, 1))
            if t.phase != Phase.RUNNING:
                raise SystemExit(f"launch failed: {t.message}")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    running = os.readlink(f"/proc/{t.pid}/exe") == os.path.realpath(SLEEP)
                except OSError:
                    running = False
                if running and (cg.kind == "none" or t.pid in cg.pids(t.cgroup)):
                    break
                time.sleep(0.0005)
            lat.append((time.perf_counter() - t0) * 1000)
            sup.stop(t.key, 0, "bench")
            while t.alive:
                sup.poll()
                time.sleep(0.002)
            sup.forget(t.key)
        lat.sort()
        print(f"launch latency over {len(lat)} launches: p50 {statistics.median(lat):.1f} ms, "
              f"p90 {lat[int(0.9 * (len(lat) - 1))]:.1f} ms, max {lat[-1]:.1f} ms  (target p50 <= 50 ms)")

        # -- overhead with N running tasks ----------------------------------------------------
        for j in range(args.tasks):
            t = sup.launch(spec(j + 1, 0.01))
            if t.phase != Phase.RUNNING:
                raise SystemExit(f"launch failed: {t.message}")
        sampler.sample(sup.tasks.values())
        cpu0, wall0 = own_cpu_s(), time.monotonic()
        beats = 0
        payload = 0
        sample = None
        next_at = wall0
        while time.monotonic() - wall0 < args.duration:
            next_at += args.interval
            sup.poll()
            sample = sampler.sample(sup.tasks.values())
            elim.step(sample)
            req = node_pb2.HeartbeatRequest(node_id="bench", tasks=statuses(sup.tasks.values(), "bench"),
                                            telemetry=common_pb2.NodeTelemetry(cpu_util_pct=sample.cpu_util_pct))
            payload = len(req.SerializeToString())
            beats += 1
            time.sleep(max(0.0, next_at - time.monotonic()))
        cpu, wall = own_cpu_s() - cpu0, time.monotonic() - wall0
        print(f"agent CPU with {args.tasks} tasks, {args.interval:g} s sampling, {beats} samples + heartbeats: "
              f"{100 * cpu / wall:.2f} % of one core ({1000 * cpu / max(beats, 1):.2f} ms per cycle)  "
              f"(target <= 1 %)")
        one = node_pb2.TaskStatus()
        one.CopyFrom(statuses(sup.tasks.values(), "bench")[0])
        per_task_json = len(json.dumps(asdict(next(iter(sample.tasks.values()))), separators=(",", ":"))) \
            if sample and sample.tasks else 0
        print(f"heartbeat: {payload} bytes with {args.tasks} tasks; per task {len(one.SerializeToString())} bytes "
              f"(TaskStatus today) + about {per_task_json} bytes of telemetry (TaskSample as compact JSON, "
              f"an upper bound for its proto form)")
    finally:
        sup.shutdown(0)
        cg.teardown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

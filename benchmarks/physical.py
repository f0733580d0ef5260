"""Physical runs (issue 14, first form): the same static trace on a local cluster under each
mechanism, real synergyd + a real synergy-agent, Table 5's first row (FIFO, makespan).

What is real: synergyd (its rounds, leases, live profiling), the agent (cgroup cpusets and
CFS quotas on this machine's cores), PyTorch jobs with DataLoaders (benchmarks/
physical_job.py) wrapped in SynergyIterator. What is emulated: the GPUs (`--fake-gpus`: a
step is `--step-s` of device time that uses no host CPU, a sleep), and the job mix: half the
jobs are loading-heavy (each sample costs `--heavy-cpu-ms` of real CPU in the loader: about
one core keeps their GPU busy), half light (`--light-cpu-ms`: a small fraction of a core).
With four GPUs on two cores the GPU-proportional share is half a core per GPU: the heavy
jobs run at about half speed under `proportional`; TUNE can give the light jobs a quarter
core (profiled below one CPU on a `sub_core` lease) and the heavy ones the rest.

Under `proportional` jobs are submitted with `profiler: none` (a proportional scheduler
needs no profile); under TUNE with `profiler: synergy` (live profiling, its cost included).
Printed per mechanism: makespan, average and p99 JCT, failed jobs with their reasons,
profiling's share of GPU-time, the JCT jobs lose to their own profiling, and how many jobs
were preempted "before it started" (what a profiling lease took from placed jobs, issue 14;
must be 0). Then the ratios proportional / TUNE.

    .venv/bin/python benchmarks/physical.py                  # 8 jobs, a few minutes
    .venv/bin/python benchmarks/physical.py --jobs 4 --samples 96   # the short form

Not yet: the dynamic trace (SRTF, avg / p99 JCT) and the simulated replay of the same trace
with the profiles the live run measured. Needs root and cgroup v1 (the agent's cpusets).
Run it on a quiet machine: other load on the two cores is load on the "cluster".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.v1 import admin_pb2, common_pb2  # noqa: E402

JOB = ROOT / "benchmarks" / "physical_job.py"
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class JobOutcome:
    name: str
    state: str
    reason: str
    jct_s: float
    profiling_s: float  # placed under its profiling lease
    before_started: int  # preemptions "before it started"


def state_name(value: int) -> str:
    return common_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def outcome(info: admin_pb2.JobInfo) -> JobOutcome:
    hist = list(info.history)
    profiling_s, lease_start = 0.0, None
    for t in hist:
        to = state_name(t.to_state)
        if to == "profiling" and t.reason.startswith("profiling lease"):
            lease_start = t.at_unix_s
        elif lease_start is not None and to != "profiling":
            profiling_s += t.at_unix_s - lease_start
            lease_start = None
    return JobOutcome(
        info.name, state_name(info.state), hist[-1].reason if hist else "",
        info.finished_at_unix_s - info.submitted_at_unix_s, profiling_s,
        sum("before it started" in t.reason for t in hist),
    )


def run(mechanism: str, args: argparse.Namespace, tmp: Path) -> tuple[list[JobOutcome], float]:
    d = DaemonProcess(tmp / f"state-{mechanism}", "--mechanism", mechanism, "--policy", "fifo",
                      "--launch-timeout-s", "120", round_s=args.round_s).start()
    agent = AgentProcess(d, tmp / f"work-{mechanism}", "n0", "--cpus", args.cpus, "--memory", args.memory,
                         fake_gpus=args.gpus)
    admin = d.admin()
    try:
        agent.start()
        profiler = "none" if mechanism == "proportional" else "synergy"
        ids = []
        for k in range(args.jobs):
            heavy = k % 2 == 0
            cpu_ms = args.heavy_cpu_ms if heavy else args.light_cpu_ms
            name = f"{'heavy' if heavy else 'light'}{k}"
            ids.append(admin.submit(name, gpus=1, command=(
                sys.executable, "-u", str(JOB), "--samples", str(args.samples), "--cpu-ms", str(cpu_ms),
                "--step-s", str(args.step_s), "--batch-size", str(args.batch_size)),
                working_dir=str(tmp), checkpoint_dir=str(tmp / f"ckpt-{mechanism}-{k}"),
                profiler=profiler).id)
        wait_for(lambda: all(admin.state(j) in TERMINAL for j in ids), timeout=args.timeout_s, interval=1.0,
                 what=f"every job to end under {mechanism}")
        outcomes = [outcome(admin.describe(j)) for j in ids]
        makespan = max(admin.describe(j).finished_at_unix_s for j in ids) - min(
            admin.describe(j).submitted_at_unix_s for j in ids)
        return outcomes, makespan
    finally:
        admin.close()
        agent.stop()
        d.kill()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mechanisms", default="proportional,tune")
    p.add_argument("--jobs", type=int, default=8, help="jobs in the static trace, half heavy, half light")
    p.add_argument("--gpus", type=int, default=4, help="fake GPUs on the agent")
    p.add_argument("--cpus", default="0-1", help="the agent's --cpus slice")
    p.add_argument("--memory", default="4G")
    p.add_argument("--round-s", type=float, default=2.0)
    p.add_argument("--samples", type=int, default=1200, help="samples per job (one epoch)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--step-s", type=float, default=0.04, help="device time per step")
    p.add_argument("--heavy-cpu-ms", type=float, default=10.0, help="loader CPU per sample, heavy jobs")
    p.add_argument("--light-cpu-ms", type=float, default=0.5, help="loader CPU per sample, light jobs")
    p.add_argument("--timeout-s", type=float, default=900.0)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="physical-"))
    gpu_s = args.gpus
    results = {}
    for mech in args.mechanisms.split(","):
        outcomes, makespan = run(mech, args, tmp)
        results[mech] = (outcomes, makespan)
        jcts = [o.jct_s for o in outcomes if o.state == "succeeded"]
        failed = [o for o in outcomes if o.state != "succeeded"]
        prof = sum(o.profiling_s for o in outcomes)
        print(f"{mech}: makespan {makespan:.1f} s, avg JCT {statistics.mean(jcts) if jcts else float('nan'):.1f} s, "
              f"p99 JCT {p99(jcts) if jcts else float('nan'):.1f} s, {len(failed)} failed, "
              f"profiling {100 * prof / (makespan * gpu_s):.1f}% of GPU-time "
              f"({prof / max(1, len(outcomes)):.1f} s per job), "
              f"preempted before they started: {sum(o.before_started for o in outcomes)}")
        for o in failed:
            print(f"  FAILED {o.name}: {o.state}: {o.reason}")
        for o in outcomes:
            print(f"  {o.name:<8} {o.state:<10} JCT {o.jct_s:7.1f} s  profiling {o.profiling_s:5.1f} s")
    if "proportional" in results and "tune" in results:
        (po, pm), (to, tm) = results["proportional"], results["tune"]
        pj = statistics.mean(o.jct_s for o in po)
        tj = statistics.mean(o.jct_s for o in to)
        print(f"proportional / tune: makespan {pm / tm:.2f}x, avg JCT {pj / tj:.2f}x "
              f"(Table 5, physical: makespan 1.4x on the static trace)")
    print(f"(work dir: {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

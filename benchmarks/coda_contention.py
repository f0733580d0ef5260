"""CODA's contention eliminator for real: does a reporting training job get its throughput back?

A real synergyd and a real synergy-agent (one fake GPU, `--cpus` slice) run
`examples/cpu_stress/train_reporter.py` (training: a memory-bound step, throughput reported on
its lease). The agent gives it a core of its own; the contender (`examples/cpu_stress/stress.py`,
a numpy copy loop) always runs on another core of the slice, so the two compete for memory
bandwidth, not for CPU time. Each cycle has three phases, measured from the job's own `TPUT`
lines (samples/s, one per second):

* **baseline**: training alone;
* **contended**: the contender runs as a plain process pinned to the other core (`taskset`),
  outside the agent, so the eliminator cannot touch it: what contention costs;
* **throttled**: the same contender submitted as a `kind: cpu` job on the same core; once the
  eliminator's level has stopped changing, what training gets back.

Cycles alternate the phases so that the load of a shared machine drifts across all three.
The script prints each phase's median throughput in two forms: samples/s (what the job gets)
and samples per CPU-second of its loop (what memory contention leaves it, whatever share of
its core other processes took: on a shared machine other users' unpinned processes move onto
training's core when the contender's core is busy), the CPU share it had, the contender's
bandwidth (its own `BW` lines), the load average, and, for both forms, contention
(contended / baseline) and recovery (throttled / baseline) against the target (>= 0.95:
training within 5 % of its uncontended throughput), over all cycles and over the quiet ones
(training had >= 80 % of its core both alone and throttled: other users' load did not decide
the figure), then the eliminator's actions.

    .venv/bin/python benchmarks/coda_contention.py            # 2 cycles, 6 s phases, about 80 s

Needs root and cgroup v1/v2 (the quota actuator) and a slice of at least two cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.agent.cores import format_cpu_list, parse_cpu_list  # noqa: E402
from synergy.v1 import admin_pb2  # noqa: E402

EXAMPLES = ROOT / "examples" / "cpu_stress"
TPUT = re.compile(r"^TPUT (\S+) (\S+) (\S+)$", re.M)  # time, samples/s, samples per CPU-second
BW = re.compile(r"^BW (\S+) (\S+)$", re.M)
TARGET = 0.95
#: a cycle is "quiet" when training had at least this share of its core in the phases compared
QUIET = 0.8


def window(pattern: re.Pattern[str], text: str, start: float, end: float, col: int = 1) -> list[float]:
    """Column `col` of `NAME <unix time> <value>...` lines whose second (the one before the stamp) lies in
    [start, end)."""
    return [float(m[col]) for m in pattern.findall(text) if start + 1 <= float(m[0]) < end]


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


@dataclass
class Cycle:
    #: phase -> the training job's samples/s, and its samples per CPU-second
    wall: dict[str, list[float]] = field(default_factory=dict)
    per_cpu: dict[str, list[float]] = field(default_factory=dict)
    contender_free: list[float] = field(default_factory=list)
    contender_held: list[float] = field(default_factory=list)
    load: dict[str, float] = field(default_factory=dict)
    level: int = 0
    first_throttle_s: float = float("nan")
    settled_s: float = float("nan")
    node_bw: dict[str, list[float]] = field(default_factory=dict)

    def cpu_share(self, phase: str) -> float:
        """The training loop's CPU time per second in a phase (the rest of its core went to other processes)."""
        return med([x / y for x, y in zip(self.wall.get(phase, []), self.per_cpu.get(phase, [])) if y > 0])


def task_cores(work: Path, job: int) -> tuple[int, ...]:
    """The cores the agent gave a job's task (its state file)."""
    for t in json.loads((work / "state.json").read_text())["tasks"]:
        if t["key"][0] == job and t["phase"] == "running":
            return tuple(sorted(set(t["exclusive"]) | ({t["shared"]} if t["shared"] is not None else set())))
    raise RuntimeError(f"job {job} has no running task in {work / 'state.json'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threshold", type=float, default=0.75, help="agent --contention-threshold (share of peak)")
    p.add_argument("--drop", type=float, default=1 - TARGET, help="agent --contention-throughput-drop "
                   "(default: the target's 0.05, so the eliminator acts until training is within 5 %%)")
    p.add_argument("--cpus", default="0-1", help="the agent's --cpus slice (at least two cores)")
    p.add_argument("--cycles", type=int, default=2, help="baseline / contended / throttled cycles")
    p.add_argument("--phase-s", type=float, default=6.0, help="seconds measured per phase")
    p.add_argument("--settle-s", type=float, default=4.0, help="the throttle level must hold this long before "
                   "the throttled phase is measured")
    p.add_argument("--train-mb", type=int, default=32)
    p.add_argument("--stress-mb", type=int, default=64)
    p.add_argument("--cgroup-parent", default="", metavar="PATH", help="the agent's --cgroup-parent (default: a "
                   "fresh synergy-test-XXXX, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (state, work dir, logs) for a look")
    args = p.parse_args()
    if len(parse_cpu_list(args.cpus)) < 2:
        p.error("--cpus needs at least two cores: training and the contender each get one")
    tmp = Path(tempfile.mkdtemp(prefix="coda-"))
    print(f"working in {tmp} ({'kept' if args.keep else 'removed'} at the end); "
          f"load average at start {os.getloadavg()[0]:.2f}")
    d = DaemonProcess(tmp / "state").start()
    agent = AgentProcess(d, tmp / "work", "n0", "--cpus", args.cpus, "--contention-threshold", str(args.threshold),
                         "--contention-throughput-drop", str(args.drop), fake_gpus=1)
    if args.cgroup_parent:
        agent.cgroup_parent = args.cgroup_parent
    admin = d.admin()
    py = (sys.executable, "-u")
    stress_cmd = py + (str(EXAMPLES / "stress.py"), "--mb", str(args.stress_mb))

    def node_bw() -> float:
        n = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes[0]
        return n.telemetry.usage.mem_bandwidth.gb_per_s

    def measure(cycle: Cycle, name: str, seconds: float) -> tuple[float, float]:
        start = time.time()
        while time.time() < start + seconds:
            cycle.node_bw.setdefault(name, []).append(node_bw())
            time.sleep(1.0)
        end = time.time()
        cycle.load[name] = os.getloadavg()[0]
        log = agent.task_log(train)
        cycle.wall[name] = window(TPUT, log, start, end, 1)
        cycle.per_cpu[name] = window(TPUT, log, start, end, 2)
        return start, end

    cycles: list[Cycle] = []
    try:
        agent.start()
        train = admin.submit("train", gpus=1, cpus_hint=1, mem_gb_hint=0.5, working_dir=str(tmp),
                             command=py + (str(EXAMPLES / "train_reporter.py"), "--mb", str(args.train_mb))).id
        wait_for(lambda: len(TPUT.findall(agent.task_log(train))) >= 3, timeout=120, what="training throughput")
        train_cores = task_cores(agent.work_dir, train)
        free = [c for c in parse_cpu_list(args.cpus) if c not in train_cores]
        if not free:
            raise SystemExit(f"training holds every core of {args.cpus}: no core left for the contender")
        other = free[0]
        for _ in range(args.cycles):
            c = Cycle()
            cycles.append(c)
            measure(c, "baseline", args.phase_s)

            plain = subprocess.Popen(("taskset", "-c", str(other)) + stress_cmd, stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)
            a, b = measure(c, "contended", args.phase_s)
            plain.kill()
            out, _ = plain.communicate()
            c.contender_free = window(BW, out, a, b)
            time.sleep(2.0)

            stress = admin.submit("stress", gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=0.5, working_dir=str(tmp),
                                  command=stress_cmd).id
            wait_for(lambda: "PID" in agent.task_log(stress), timeout=60, what="the contender to start")
            t0 = time.time()
            stress_cores = task_cores(agent.work_dir, stress)
            if set(stress_cores) & set(train_cores):
                print(f"warning: the contender got cores {format_cpu_list(stress_cores)}, "
                      f"overlapping training's {format_cpu_list(train_cores)}")
            level, changed = 0, t0
            while time.time() < t0 + 40:
                tasks = admin.describe(stress).tasks
                now_level = tasks[0].throttle.level if tasks and tasks[0].HasField("throttle") else 0
                if now_level != level:
                    if level == 0 and math.isnan(c.first_throttle_s):
                        c.first_throttle_s = time.time() - t0
                    level, changed = now_level, time.time()
                if level and time.time() - changed >= args.settle_s:
                    break
                time.sleep(0.5)
            c.level, c.settled_s = level, time.time() - t0
            a, b = measure(c, "throttled", args.phase_s)
            c.contender_held = window(BW, agent.task_log(stress), a, b)
            admin.CancelJob(admin_pb2.CancelJobRequest(job=str(stress)))
            wait_for(lambda: admin.state(stress) == "cancelled", timeout=60, what="the contender to end")
            time.sleep(2.0)

        report(args, agent, cycles, train_cores, other)
        return 0
    finally:
        admin.close()
        agent.stop()
        agent.remove_cgroups()
        d.kill()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def report(args: argparse.Namespace, agent: AgentProcess, cycles: list[Cycle], train_cores: tuple[int, ...],
           other: int) -> None:
    cal = json.loads((agent.work_dir / "bandwidth.json").read_text())
    print(f"agent --cpus {args.cpus}, --contention-threshold {args.threshold}, "
          f"--contention-throughput-drop {args.drop:g}; training on core {format_cpu_list(train_cores)}, "
          f"contender on core {other}")
    print(f"calibration (numpy copy, {cal['seconds']:g} s): one core {cal['per_core_bytes_per_s'] / 1e9:.1f} GB/s, "
          f"all {len(cal['cores'])} cores together {cal['peak_bytes_per_s'] / 1e9:.1f} GB/s (the peak)")
    print(f"{'cycle':<6}{'phase':<11}{'train samples/s':>17}{'per CPU-s':>11}{'CPU':>6}{'contender GB/s':>16}"
          f"{'node bw est. GB/s':>19}{'load 1m':>9}")
    for i, c in enumerate(cycles, 1):
        for name, bw in (("baseline", []), ("contended", c.contender_free), ("throttled", c.contender_held)):
            xs, ys, nb = c.wall.get(name, []), c.per_cpu.get(name, []), c.node_bw.get(name, [])
            tp = f"{med(xs):.0f} (n={len(xs)})" if xs else "-"
            share = c.cpu_share(name)
            print(f"{i:<6}{name:<11}{tp:>17}{med(ys):>11.0f}{share:>6.0%}{(f'{med(bw):.2f}' if bw else '-'):>16}"
                  f"{(f'{statistics.mean(nb):.1f}' if nb else '-'):>19}{c.load.get(name, float('nan')):>9.2f}")
        print(f"{'':<6}throttle: first after {c.first_throttle_s:.1f} s, level {c.level} "
              f"(quota 1/{2 ** c.level}) held from {c.settled_s:.1f} s")
    quiet = [c for c in cycles if all(c.cpu_share(ph) >= QUIET for ph in ("baseline", "throttled"))]
    print(f"quiet cycles (training had >= {QUIET:.0%} of its core while alone and while throttled): "
          f"{len(quiet)} of {len(cycles)}")
    for label, of in (("samples/s", lambda c: c.wall), ("samples per CPU-second", lambda c: c.per_cpu)):
        def ratio(c: Cycle, phase: str) -> float:
            return med(of(c).get(phase, [])) / med(of(c).get("baseline", []))
        print(f"{label}: contention (contended / baseline) " + ", ".join(f"{ratio(c, 'contended'):.1%}" for c in cycles)
              + "; recovery (throttled / baseline) " + ", ".join(f"{ratio(c, 'throttled'):.1%}" for c in cycles))
        for which, cs in (("all cycles", cycles), ("quiet cycles", quiet)):
            if cs:
                r = med([ratio(c, "throttled") for c in cs])
                print(f"  recovery, median of {which}: {r:.1%} against the target {TARGET:.0%}: "
                      + ("met" if r >= TARGET else "NOT met"))
    for line in agent.log_text().splitlines():
        if "contention." in line:
            print("  agent:", line.split(" ", 2)[-1][:230])


if __name__ == "__main__":
    sys.exit(main())

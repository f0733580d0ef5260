"""CODA's contention eliminator for real: a reporting training job beside a bandwidth-heavy CPU job.

A real synergyd and a real synergy-agent (one fake GPU, `--cpus` slice) run
`examples/cpu_stress/train_reporter.py` (training: a memory-bound step, throughput reported on
its lease) and, once its throughput settles, `examples/cpu_stress/stress.py` (a numpy copy loop,
`kind: cpu`). The script prints the training throughput (samples/s, from the job's own
`TPUT` lines) in four phases: before the contender, during contention (contender started,
not yet throttled), after the throttle, and after recovery (contender cancelled), with the
node's memory bandwidth (estimate or resctrl, with its peak) and the eliminator's actions.

    .venv/bin/python benchmarks/coda_contention.py --threshold 0.3 --drop 0.05

On a small shared VM the two jobs mostly compete for CPU time rather than memory bandwidth,
and the bandwidth figures are estimates (CPU share x calibrated per-core rate): read the
numbers for what they are. Needs root and cgroup v1/v2 (the quota actuator).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.v1 import admin_pb2  # noqa: E402

EXAMPLES = ROOT / "examples" / "cpu_stress"
TPUT = re.compile(r"^TPUT (\S+) (\S+)$", re.M)


def throughput(log: str, start: float, end: float) -> list[float]:
    return [float(r) for t, r in TPUT.findall(log) if start <= float(t) < end]


def node_bw(admin: object) -> tuple[float, float, str]:
    n = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes[0]  # type: ignore[attr-defined]
    u = n.telemetry.usage.mem_bandwidth
    return u.gb_per_s, n.telemetry.peak_mem_bandwidth.gb_per_s, u.source or "-"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threshold", type=float, default=0.75, help="agent --contention-threshold (share of peak)")
    p.add_argument("--drop", type=float, default=0.10, help="agent --contention-throughput-drop")
    p.add_argument("--cpus", default="0-1", help="the agent's --cpus slice")
    p.add_argument("--phase-s", type=float, default=8.0, help="seconds measured per phase")
    p.add_argument("--train-mb", type=int, default=32)
    p.add_argument("--stress-mb", type=int, default=64)
    p.add_argument("--cgroup-parent", default="", metavar="PATH", help="the agent's --cgroup-parent (default: a "
                   "fresh synergy-test-XXXX, removed at the end)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (state, work dir, logs) for a look")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="coda-"))
    print(f"working in {tmp} ({'kept' if args.keep else 'removed'} at the end)")
    d = DaemonProcess(tmp / "state").start()
    agent = AgentProcess(d, tmp / "work", "n0", "--cpus", args.cpus, "--contention-threshold", str(args.threshold),
                         "--contention-throughput-drop", str(args.drop), fake_gpus=1)
    if args.cgroup_parent:
        agent.cgroup_parent = args.cgroup_parent
    admin = d.admin()
    py = (sys.executable, "-u")
    try:
        agent.start()
        train = admin.submit("train", gpus=1, cpus_hint=1, mem_gb_hint=0.5, working_dir=str(tmp),
                             command=py + (str(EXAMPLES / "train_reporter.py"), "--mb", str(args.train_mb))).id
        wait_for(lambda: len(TPUT.findall(agent.task_log(train))) >= 3, timeout=120, what="training throughput")
        bw: dict[str, list[tuple[float, float, str]]] = {}
        t0 = time.time()
        while time.time() < t0 + args.phase_s:
            bw.setdefault("before", []).append(node_bw(admin))
            time.sleep(1)
        stress = admin.submit("stress", gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=0.5, working_dir=str(tmp),
                              command=py + (str(EXAMPLES / "stress.py"), "--mb", str(args.stress_mb))).id
        wait_for(lambda: "PID" in agent.task_log(stress), timeout=60, what="the contender to start")
        t1 = time.time()
        held = None
        while time.time() < t1 + max(30.0, 3 * args.phase_s):
            bw.setdefault("during", []).append(node_bw(admin))
            tasks = admin.describe(stress).tasks
            if tasks and tasks[0].HasField("throttle"):
                held = tasks[0].throttle
                break
            time.sleep(0.5)
        t2 = time.time()
        if held is not None:
            while time.time() < t2 + args.phase_s:
                bw.setdefault("throttled", []).append(node_bw(admin))
                time.sleep(1)
        t3 = time.time()
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(stress)))
        wait_for(lambda: admin.state(stress) == "cancelled", timeout=60, what="the contender to end")
        t4 = time.time()
        while time.time() < t4 + args.phase_s:
            bw.setdefault("recovered", []).append(node_bw(admin))
            time.sleep(1)
        t5 = time.time()
        log = agent.task_log(train)
        print(f"agent --cpus {args.cpus}, --contention-threshold {args.threshold}, "
              f"--contention-throughput-drop {args.drop}")
        print(f"{'phase':<11} {'train samples/s (median, n)':>28}  {'node mem bw / peak GB/s':>26}")
        for name, (a, b) in (("before", (t0, t1)), ("during", (t1, t2)), ("throttled", (t2, t3)),
                             ("recovered", (t4, t5))):
            xs = throughput(log, a + 1, b)  # each TPUT line covers the second before it
            figures = bw.get(name, [])
            bws = f"{statistics.mean(x[0] for x in figures):.1f} / {figures[-1][1]:.1f} ({figures[-1][2]})" \
                if figures else "-"
            tp = f"{statistics.median(xs):.0f} (n={len(xs)})" if xs else "-"
            print(f"{name:<11} {tp:>28}  {bws:>26}")
        if held is None:
            print("no throttle within the window: contention stayed below the thresholds")
        else:
            print(f"throttle: level {held.level}, {held.action}, after {t2 - t1:.1f} s; reason: {held.reason}")
        for line in agent.log_text().splitlines():
            if "contention." in line:
                print("  agent:", line.split(" ", 2)[-1][:220])
        return 0
    finally:
        admin.close()
        agent.stop()
        agent.remove_cgroups()
        d.kill()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Submit -> running on an idle cluster: a real synergyd (round 2 s, heartbeat derived) and one real agent.

For each of --submits jobs (one at a time, at a random phase of the round): the time from
SubmitJob returning to the task's first output line (`date +%s.%N`, printed by the task's
shell as its first act, so process start-up is included). Printed as p50 / p90 / max next to
the bound the design promises: one round boundary plus one heartbeat interval (the job waits
at most a round for the decision, the agent at most a heartbeat for the LAUNCH).

    .venv/bin/python benchmarks/submit_to_running.py --submits 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.scheduler.daemon.config import DaemonConfig  # noqa: E402
from synergy.v1 import admin_pb2  # noqa: E402

FIRST_LINE = "date +%s.%N; exec sleep 600"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--submits", type=int, default=20)
    p.add_argument("--round-s", type=float, default=2.0)
    p.add_argument("--cpus", default="0-1", help="the agent's --cpus slice")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="submit-"))
    heartbeat = DaemonConfig(state_dir=tmp / "state", round_s=args.round_s).heartbeat_interval_s
    d = DaemonProcess(tmp / "state", round_s=args.round_s).start()
    agent = AgentProcess(d, tmp / "work", "n0", "--cpus", args.cpus, fake_gpus=0)
    admin = d.admin()
    lat: list[float] = []
    try:
        agent.start()
        for i in range(args.submits):
            time.sleep(rng.uniform(0, args.round_s))  # a random phase of the round
            job = admin.submit(f"s{i}", gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=0.1, working_dir=str(tmp),
                               command=("/bin/sh", "-c", FIRST_LINE)).id
            returned = time.time()
            first = wait_for(lambda: agent.task_log(job).strip(), timeout=60, what=f"job {job} to start")
            lat.append(float(first.splitlines()[0]) - returned)
            admin.CancelJob(admin_pb2.CancelJobRequest(job=str(job)))
            wait_for(lambda: admin.state(job) == "cancelled" and not admin.describe(job).tasks, timeout=60,
                     what=f"job {job} to end")
        bound = args.round_s + heartbeat
        print(f"submit -> running, {len(lat)} submits, round {args.round_s:g} s, heartbeat {heartbeat:g} s")
        print(f"p50 {statistics.median(lat) * 1000:.0f} ms   p90 {pct(lat, 0.9) * 1000:.0f} ms   "
              f"max {max(lat) * 1000:.0f} ms   bound (round + heartbeat) {bound * 1000:.0f} ms")
        print(f"within the bound: {sum(x <= bound for x in lat)}/{len(lat)}")
        return 0
    finally:
        admin.close()
        agent.stop()
        d.kill()


if __name__ == "__main__":
    sys.exit(main())

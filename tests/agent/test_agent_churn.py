"""No needless migration on a real cluster (issue 14): synergyd and two real agents with two
fake GPUs each. A and B land on one node, C on the other; cancelling A must leave C running
where it is (before: a later round stopped C and moved it beside B, with nothing queued),
and cancelling B then leaves the lone C where it is too."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, is_root_with_v1
from synergy.v1 import admin_pb2
from synergyd_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

#: says at once that it reached its training loop: its start-up phase (no quota) ends (agent/startup.py)
SLEEPER = ("import os, time; from synergy.common.startup import reached_training_loop; reached_training_loop(); "
           "print('PID', os.getpid(), flush=True); time.sleep(600)")


def _cpu_quota(pid: int) -> float:
    """CPUs of CPU time the task's cgroup v1 `cpu` controller allows (quota / period)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            d = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
            return int((d / "cpu.cfs_quota_us").read_text()) / int((d / "cpu.cfs_period_us").read_text())
    raise AssertionError(f"no cpu cgroup for pid {pid}")


def _node(admin, job: int) -> list[str]:
    return [p.node_id for p in admin.describe(job).placements]


def test_cancelling_a_neighbour_does_not_move_the_job_on_the_other_node(tmp_path: Path) -> None:
    # The sleeper never calls the JobService: a generous launch timeout keeps leases out of it.
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
    agents = [AgentProcess(d, tmp_path / f"work-{n}", n, "--cpus", "0", "--memory", "1G", fake_gpus=2)
              for n in ("n0", "n1")]
    admin = d.admin()
    try:
        for a in agents:
            a.start()
        ids = {}
        for name in "ABC":  # one at a time, so that each round sees the one before placed
            ids[name] = admin.submit(name, gpus=1, cpus_hint=0.25, mem_gb_hint=0.1, working_dir=str(tmp_path),
                                     command=(sys.executable, "-u", "-c", SLEEPER)).id
            wait_for(lambda: admin.state(ids[name]) == "running", timeout=60, what=f"job {name} to run")
        where = {n: _node(admin, j) for n, j in ids.items()}
        assert where["A"] == where["B"] != where["C"], where
        pid = agents[int(where["C"][0][1])].task_pid(ids["C"])
        # A quarter of a core (the node's share is half a CPU per GPU): CFS quota enforces it.
        assert [p.cpus for p in admin.describe(ids["C"]).placements] == [0.25]
        wait_for(lambda: abs(_cpu_quota(pid) - 0.25) < 1e-3, timeout=30, what="C's quota after its start-up")
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(ids["A"])))
        wait_for(lambda: admin.state(ids["A"]) == "cancelled", timeout=30, what="A to be cancelled")
        status = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest())
        wait_for(lambda: admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index
                 >= status.round_index + 6, timeout=60, what="six more rounds")
        c = admin.describe(ids["C"])
        assert admin.state(ids["C"]) == "running" and c.attempt == 1, [t.reason for t in c.history]
        # The sleeper never renews, so a stop request would only show in the daemon's log.
        events = [json.loads(line) for line in d.log_text().splitlines() if line.startswith("{")]
        stops = [e for e in events if e.get("event") == "job.stop_requested" and e.get("job") == ids["C"]]
        assert stops == [], stops
        assert all(e.get("migrations", 0) == 0 for e in events if e.get("event") == "round.applied")
        assert _node(admin, ids["C"]) == where["C"] and _node(admin, ids["B"]) == where["B"]
        assert agents[int(where["C"][0][1])].task_pid(ids["C"]) == pid
        # B ends too: C runs alone, and is not moved from its node to the emptied one either.
        admin.CancelJob(admin_pb2.CancelJobRequest(job=str(ids["B"])))
        status = admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest())
        wait_for(lambda: admin.GetClusterStatus(admin_pb2.GetClusterStatusRequest()).round_index
                 >= status.round_index + 6, timeout=60, what="six more rounds")
        events = [json.loads(line) for line in d.log_text().splitlines() if line.startswith("{")]
        assert not [e for e in events if e.get("event") == "job.stop_requested" and e.get("job") == ids["C"]]
        assert _node(admin, ids["C"]) == where["C"] and admin.describe(ids["C"]).attempt == 1
    finally:
        admin.close()
        for a in agents:
            a.stop()
        d.kill()

"""A packed allocation end to end: a hand-made RoundOutput in synergyd's round (in-process,
real gRPC, real SQLite) to a real synergy-agent, where the two jobs' processes share the one
fake GPU index, each in its own cgroup with its own cores and memory limit.

The core's packing pass is not used: the decider is replaced by one that answers with the
allocations the test sets, so exactly the daemon's and the agent's side is under test.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from agent_harness import AgentProcess, alive, cpus_allowed, is_root_with_v1
from synergyd_harness import Admin, wait_for
from synergy.scheduler.core import Scheduler
from synergy.scheduler.daemon.app import App
from synergy.scheduler.daemon.config import load_config
from synergy.scheduler.daemon.main import EVENTS
from synergy.scheduler.model import Allocation, Placement, RoundInput, RoundOutput
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the agent's packing is unit-tested without")

SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
NODE = "pk0"
MIB = 1024**2


class Hand:
    """The round's decider: the allocations set on it, for the jobs still active."""

    def __init__(self) -> None:
        self.allocations: dict[int, Allocation] = {}

    def decide(self, scheduler: Scheduler, inp: RoundInput) -> RoundOutput:
        active = {j.id for j in inp.jobs}
        return RoundOutput({k: a for k, a in dict(self.allocations).items() if k in active})

    def close(self) -> None:
        pass


class InProcessDaemon:
    """synergyd in this process, shaped as AgentProcess expects (address, state dir, admin())."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.app = App(load_config(["--state-dir", str(state_dir), "--port", "0", "--metrics-port", "0",
                                    "--round-s", "1", "--launch-timeout-s", "600", "--stop-timeout-s", "2"]))
        self.app.start(EVENTS)
        self.app.ctx.decider.close()
        self.hand = Hand()
        self.app.ctx.decider = self.hand
        self.address = self.app.address

    def admin(self) -> Admin:
        return Admin(self.address, (self.state_dir / "admin.token").read_text().strip())

    def metrics(self) -> str:
        address = (self.state_dir / "metrics_address").read_text().strip()
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as r:
            return r.read().decode()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[InProcessDaemon]:
    d = InProcessDaemon(tmp_path / "state")
    yield d
    d.app.stop(grace_s=0)


def _env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


def test_two_packed_jobs_share_one_gpu_index_and_stop_with_their_host(daemon: InProcessDaemon, tmp_path: Path) -> None:
    agent = AgentProcess(daemon, tmp_path / "work", NODE, "--cpus", "0-1", "--memory", "1G", fake_gpus=1).start()
    admin = daemon.admin()
    try:
        cmd = (sys.executable, "-u", "-c", SLEEPER)
        h = admin.submit("host", gpus=1, command=cmd, working_dir=str(tmp_path)).id
        p = admin.submit("partner", gpus=1, command=cmd, working_dir=str(tmp_path)).id
        daemon.hand.allocations = {
            h: Allocation(h, (Placement(NODE, 1, 1.0, 0.25),)),
            p: Allocation(p, (Placement(NODE, 1, 0.5, 0.5),), packed_with=h),
        }
        pids = {j: agent.task_pid(j) for j in (h, p)}  # both run: the node has one GPU
        assert admin.describe(p).packed_with_job_id == h and admin.describe(h).packed_with_job_id == 0
        for j, pid in pids.items():
            assert _env(pid)["CUDA_VISIBLE_DEVICES"] == "0", agent.log_text()
            group = Path(f"/sys/fs/cgroup/memory/{agent.cgroup_parent}/{NODE}/job{j}-a1-r0")
            assert int((group / "memory.limit_in_bytes").read_text()) == (256 if j == h else 512) * MIB
        wait_for(lambda: cpus_allowed(pids[p]) != cpus_allowed(pids[h]), timeout=30, what="cpusets")
        assert {cpus_allowed(pids[h]), cpus_allowed(pids[p])} == {"0", "1"}
        # the node's one GPU is allocated once, not twice
        (node,) = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes
        assert node.allocated.gpus == 1 and node.free.gpus == 0 and node.allocated.cpus == pytest.approx(1.5)
        assert 'synergyd_resource_gpus{kind="allocated"} 1.0' in daemon.metrics()
        # the host is not chosen any more (the hand keeps the partner packed with it): both stop
        daemon.hand.allocations = {p: daemon.hand.allocations[p]}
        wait_for(lambda: admin.state(p) == "queued" and admin.state(h) == "queued", timeout=60,
                 what="both jobs to be stopped and requeued")
        daemon.hand.allocations = {}
        reasons = [t.reason for t in admin.describe(p).history]
        assert any(f"job {h}, whose GPUs it shares," in r for r in reasons), reasons
        for j, pid in pids.items():
            wait_for(lambda: not alive(pid), timeout=60, what=f"job {j}'s process to be stopped")
    finally:
        admin.close()
        agent.stop()

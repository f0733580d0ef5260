"""A live local cluster for the dashboard tests: a real synergyd with its dashboard on, two real
agents with fake GPUs on disjoint cores, and a few real job processes (one of them finishes
when the test says so). conftest.py starts one per test module (it takes seconds)."""

from __future__ import annotations

import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402

#: Runs until the file `finish` appears in its working directory, then exits 0 (succeeds).
UNTIL_FINISH = ("import os, time\nprint('training until told to finish', flush=True)\n"
                "while not os.path.exists('finish'):\n    time.sleep(0.2)\nprint('done', flush=True)")
SLEEPER = "import time; print('sleeping', flush=True); time.sleep(600)"


@dataclass
class LiveCluster:
    daemon: DaemonProcess
    agents: list[AgentProcess]
    work: Path
    jobs: dict[str, int]

    @property
    def dashboard(self) -> str:
        return "http://" + (self.daemon.state_dir / "dashboard_address").read_text().strip()

    @property
    def login(self) -> str:
        return f"{self.dashboard}/?token={self.daemon.admin_token}"

    def finish(self, name: str) -> None:
        (self.work / name / "finish").write_text("")

    def get(self, path: str) -> bytes:
        req = urllib.request.Request(self.dashboard + path,
                                     headers={"Authorization": f"Bearer {self.daemon.admin_token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read()

    def stop(self) -> None:
        for a in self.agents:
            a.stop()
        self.daemon.kill()


def start(tmp: Path) -> LiveCluster:
    """Daemon, two agents (two fake GPUs each), and four jobs: three running, one queued."""
    daemon = DaemonProcess(tmp / "state", "--launch-timeout-s", "600", "--dashboard-port", "0").start()
    cluster = LiveCluster(daemon, [], tmp, {})
    try:
        for i, node in enumerate(("gpu-a", "gpu-b")):
            cluster.agents.append(AgentProcess(daemon, tmp / f"work-{node}", node, "--cpus", str(i % (os.cpu_count() or 1)),
                                               "--memory", "2G", "--sample-interval-s", "0.5", fake_gpus=2).start())
        admin = daemon.admin()
        jobs = cluster.jobs
        for name, gpus, model, code in (("finisher", 1, "resnet18", UNTIL_FINISH), ("steady", 2, "resnet50", SLEEPER),
                                        ("small", 1, "alexnet", SLEEPER), ("waiting", 2, "gnmt", SLEEPER)):
            work = tmp / name
            work.mkdir()
            jobs[name] = admin.submit(name, gpus=gpus, model=model, user="alice" if gpus == 1 else "bob",
                                      command=(sys.executable, "-u", "-c", code), working_dir=str(work)).id
        wait_for(lambda: all(admin.state(jobs[n]) == "running" for n in ("finisher", "steady", "small")),
                 timeout=60, what="three jobs running")
        admin.close()
    except BaseException:
        cluster.stop()
        raise
    return cluster

"""A real `synergy-agent` process for tests, beside the real synergyd of tests/synergyd_harness.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from synergy.common.contract import GRPC_FORK_ENV
from synergyd_harness import DaemonProcess, wait_for

CGROUP_ROOT = Path("/sys/fs/cgroup")


class AgentProcess:
    def __init__(self, daemon: DaemonProcess, work_dir: Path, node_id: str, *extra: str, fake_gpus: int = 1,
                 job_users: bool = False, unix_user: str = "", launcher: tuple[str, ...] = ()) -> None:
        self.daemon = daemon
        self.work_dir = Path(work_dir)
        self.node_id = node_id
        #: a cgroup parent of its own, so test agents never meet a real one
        self.cgroup_parent = f"synergy-test-{uuid.uuid4().hex[:8]}"
        self.extra = list(extra)
        self.fake_gpus = fake_gpus
        #: run jobs as their users (issue 16); off, every job runs as the agent (the tests'
        #: jobs write to the test's root-owned tmp dirs, and their users are DRF labels)
        self.job_users = job_users
        #: start the agent as this Unix user ("" = as the test: root in CI)
        self.unix_user = unix_user
        #: how to start `synergy.agent.main` (default: this interpreter, `-m`)
        self.launcher = launcher or (sys.executable, "-m", "synergy.agent.main")
        self.log_path = self.work_dir.parent / f"agent-{node_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [
            *self.launcher,
            "--daemon", self.daemon.address,
            "--cluster-token-file", str(self.daemon.state_dir / "cluster.token"),
            "--node-id", self.node_id,
            "--work-dir", str(self.work_dir),
            "--fake-gpus", str(self.fake_gpus),
            "--cgroup-parent", self.cgroup_parent,
            "--stop-grace-s", "2",
            "--bandwidth-calibration-s", "0.05",
            "--stop-tasks-on-exit",  # tests leave no processes behind (the default leaves tasks running)
            "--log-format", "text",
            *([] if self.job_users else ["--ignore-job-users", "--allow-root-jobs"]),
            *self.extra,
        ]

    def start(self) -> AgentProcess:
        # As on a real node: not the gRPC settings a test process may have picked up by
        # importing synergy.iterator (the agent hands them to jobs itself) or the CLI (which
        # silences gRPC's own log lines, and would hide them from the agent's jobs).
        test_env = {name for name, _ in GRPC_FORK_ENV} | {"GRPC_VERBOSITY", "GRPC_TRACE"}
        env = {k: v for k, v in os.environ.items() if k not in test_env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, env=env, user=self.unix_user or None)
        admin = self.daemon.admin()
        try:
            wait_for(lambda: self._listed(admin), timeout=30, what=f"agent {self.node_id} to register")
        finally:
            admin.close()
        return self

    def _listed(self, admin: object) -> bool:
        from synergy.v1 import admin_pb2

        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"synergy-agent exited {self.proc.returncode}:\n{self.log_text()}")
        nodes = admin.ListNodes(admin_pb2.ListNodesRequest()).nodes  # type: ignore[attr-defined]
        return any(n.node_id == self.node_id for n in nodes)

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def task_log(self, job_id: int, attempt: int = 1, rank: int = 0) -> str:
        path = self.work_dir / "logs" / f"{job_id}-{attempt}-{rank}.log"
        return path.read_text() if path.exists() else ""

    def task_pid(self, job_id: int, attempt: int = 1) -> int:
        """The job prints `PID <n>` first (the test jobs below do)."""
        text = wait_for(lambda: re.search(r"PID (\d+)", self.task_log(job_id, attempt)), timeout=30,
                        what=f"job {job_id} to print its pid")
        return int(text.group(1))

    def kill9(self) -> None:
        """SIGKILL the agent (its tasks, in their own sessions, keep running)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def _cgroup_dirs(self) -> list[Path]:
        """The agent's cgroup parent in every v1 hierarchy (or the v2 root), deepest first."""
        tops = [d / self.cgroup_parent for d in CGROUP_ROOT.iterdir() if (d / self.cgroup_parent).is_dir()]
        if (CGROUP_ROOT / self.cgroup_parent).is_dir():
            tops.append(CGROUP_ROOT / self.cgroup_parent)
        dirs = [p for top in tops for p in top.rglob("*") if p.is_dir()] + tops
        return sorted(dirs, key=lambda p: len(p.parts), reverse=True)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for d in self._cgroup_dirs():
            try:
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return pids

    def lose_machine(self) -> None:
        """What a machine that dies takes with it: kill -9 of the agent and of every process in
        its cgroups (each task's shim, the job, its DataLoader workers)."""
        self.kill9()

        def killed() -> bool:
            pids = self._cgroup_pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return not pids

        wait_for(killed, timeout=30, what=f"the processes of {self.node_id} to die")

    def remove_cgroups(self) -> None:
        """rmdir what a killed agent left in the cgroup hierarchies (a live agent removes its own)."""
        for d in self._cgroup_dirs():
            try:
                d.rmdir()
            except OSError:
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split()[-1]
    return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def is_root_with_v1() -> bool:
    mounts = Path("/proc/mounts").read_text()
    have = {c for line in mounts.splitlines() if " cgroup " in line for c in ("cpuset", "memory", "cpu")
            if c in line.split()[3].split(",")}
    return os.geteuid() == 0 and have == {"cpuset", "memory", "cpu"}

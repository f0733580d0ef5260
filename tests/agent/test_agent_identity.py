"""An agent's identity outlives its process (a restart re-adopts its tasks as the same
instance), and no two agents ever serve one node: a second agent on the same work dir is
refused by the work dir's lock, one with another work dir by the daemon (ALREADY_EXISTS)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from agent_harness import AgentProcess
from synergyd_harness import DaemonProcess


def _run_second(agent: AgentProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run(agent.argv(), capture_output=True, text=True, timeout=120)


def test_a_second_agent_for_a_live_node_is_refused_in_one_line(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
    first = AgentProcess(daemon, tmp_path / "work-a", "n1", "--no-cgroups")
    try:
        first.start()
        instance = (first.work_dir / "instance.id").read_text().strip()
        assert len(instance) == 32

        same_dir = _run_second(AgentProcess(daemon, first.work_dir, "n1", "--no-cgroups"))
        assert same_dir.returncode == 1, same_dir.stderr
        assert same_dir.stderr.count("\n") == 1 and "Traceback" not in same_dir.stderr
        assert "another synergy-agent" in same_dir.stderr and "--work-dir" in same_dir.stderr

        other_dir = _run_second(AgentProcess(daemon, tmp_path / "work-b", "n1", "--no-cgroups"))
        assert other_dir.returncode != 0
        assert "owned by another live agent" in other_dir.stderr and "Traceback" not in other_dir.stderr

        first.kill9()  # a restart on its own work dir is the same instance: accepted at once
        first.start()
        assert (first.work_dir / "instance.id").read_text().strip() == instance
    finally:
        first.stop()
        daemon.kill()

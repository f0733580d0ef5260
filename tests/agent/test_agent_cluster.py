"""Real agents against what a real cluster does to them: node loss (an agent and its task die,
kill -9: synergyd declares the node lost, requeues the job, the round runs it on the other
agent) and a daemon that speaks mutual TLS. Only GPUs are fake."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, alive, is_root_with_v1
from pki import make_pki
from synergyd_harness import DaemonProcess, history, wait_for

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the cgroup layer is unit-tested without")

SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"


def test_killing_an_agent_and_its_task_requeues_the_job_onto_the_other_agent(tmp_path: Path) -> None:
    # The sleeper never calls the JobService: a generous launch timeout keeps leases out of it.
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600").start()
    agents = {n: AgentProcess(d, tmp_path / f"work-{n}", n, "--cpus", c, "--memory", "1G", fake_gpus=1)
              for n, c in (("n0", "0"), ("n1", "1"))}
    admin = d.admin()
    try:
        for a in agents.values():
            a.start()
        job = admin.submit("victim", gpus=1, cpus_hint=1, mem_gb_hint=0.25, working_dir=str(tmp_path),
                           command=(sys.executable, "-u", "-c", SLEEPER)).id
        wait_for(lambda: admin.state(job) == "running", timeout=60, what="the job to run")
        first = admin.describe(job).placements[0].node_id
        other = "n1" if first == "n0" else "n0"
        pid = agents[first].task_pid(job)
        agents[first].kill9()
        os.kill(pid, signal.SIGKILL)  # the whole server is gone, its task with it

        def moved() -> bool:
            info = admin.describe(job)
            return info.attempt >= 2 and admin.state(job) == "running" and info.placements[0].node_id == other

        wait_for(moved, timeout=90, what=f"job {job} to run again on {other}")
        info = admin.describe(job)
        assert "preempted" in history(info) or "queued" in history(info)[3:], history(info)
        assert any("lost" in t.reason for t in info.history), [t.reason for t in info.history]
        new_pid = agents[other].task_pid(job, attempt=info.attempt)
        assert alive(new_pid) and new_pid != pid
    finally:
        admin.close()
        for a in agents.values():
            a.stop()
        d.kill()
        for a in agents.values():
            a.remove_cgroups()  # every hierarchy the killed agent used, pids included


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_an_agent_runs_a_job_for_a_daemon_with_mutual_tls(tmp_path: Path) -> None:
    """Agents on their own mutual-TLS port (client certificate + cluster token); the job's own
    channel to the JobService is TLS too (the agent hands it the CA through the contract)."""
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600", "--tls-cert", str(pki / "server.pem"),
                      "--tls-key", str(pki / "server.key"), "--tls-client-ca", str(pki / "ca.pem"))
    d.tls_ca = pki / "ca.pem"
    d.start()
    agent_address = (d.state_dir / "agent_address").read_text().strip()
    agent = AgentProcess(d, tmp_path / "work", "n0", "--cpus", "0", "--memory", "1G", "--daemon", agent_address,
                         "--tls-ca", str(pki / "ca.pem"), "--tls-cert", str(pki / "agent.pem"),
                         "--tls-key", str(pki / "agent.key"), "--job-daemon-address", d.address, fake_gpus=1)
    admin = d.admin()
    try:
        agent.start()
        job = admin.submit("tls", gpus=1, cpus_hint=1, mem_gb_hint=0.25, working_dir=str(tmp_path),
                           command=(sys.executable, "-u", "-c", SLEEPER)).id
        wait_for(lambda: admin.state(job) == "running", timeout=60, what="the job to run")
        pid = agent.task_pid(job)
        wait_for(lambda: admin.describe(job).tasks and admin.describe(job).tasks[0].pid == pid, timeout=60,
                 what="the agent's report of the task over mutual TLS")
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"SYNERGY_TLS_CA={pki / 'ca.pem'}".encode() in env
    finally:
        admin.close()
        agent.stop()
        d.kill()

"""Packing end to end with the real core: synergyd started with `--pairs`, one real agent with
one fake GPU and two cores. Two one-GPU jobs whose pair profile gains (0.7 + 0.6 > 1) both run
on that GPU index, each in its own cpuset; a `no_share` job is never packed and waits.

tests/agent/test_agent_packing_e2e.py covers the daemon and agent with a hand-made plan; this
is the whole chain, Algorithm 4 included, as an operator runs it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator

import pytest

from agent_harness import AgentProcess, cpus_allowed, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 cpuset/memory/cpu "
                                "(CI runs as root); the agent's packing is unit-tested without")

SLEEPER = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(600)"
NODE = "pc0"


def _flat(task: str) -> dict:
    """Saturates at 1 CPU per GPU: each job leaves the node's second core to its partner."""
    return {"task": task, "cpus_per_gpu": [1, 2], "mem_gb_per_gpu": [0.25, 0.5],
            "throughput": [[1, 1], [1, 1]], "reference": {"cpus_per_gpu": 1, "mem_gb_per_gpu": 0.25},
            "iter_time_s": 0.1, "source": "test"}


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({
        "format": "synergy-profile/v1",
        "models": {"vision": _flat("image"), "text": _flat("language")},
        "pairs": [{"models": ["vision", "text"], "throughput": [0.7, 0.6]}],
    }))
    return path


@pytest.fixture
def daemon(tmp_path: Path, profile_file: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "state", "--profiles", str(profile_file), "--pairs", str(profile_file), round_s=1.0)
    d.start()
    yield d
    d.terminate()


def _gpus(pid: int) -> str:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)["CUDA_VISIBLE_DEVICES"]


def test_the_core_packs_two_jobs_onto_one_gpu_index(daemon: DaemonProcess, tmp_path: Path) -> None:
    agent = AgentProcess(daemon, tmp_path / "work", NODE, "--cpus", "0-1", "--memory", "1G", fake_gpus=1).start()
    admin = daemon.admin()
    try:
        cmd = (sys.executable, "-u", "-c", SLEEPER)
        host = admin.submit("host", gpus=1, model="vision", command=cmd, working_dir=str(tmp_path)).id
        picky = admin.submit("picky", gpus=1, model="text", no_share=True, command=cmd,
                             working_dir=str(tmp_path)).id
        guest = admin.submit("guest", gpus=1, model="text", command=cmd, working_dir=str(tmp_path)).id
        pids = {j: agent.task_pid(j) for j in (host, guest)}
        assert admin.describe(guest).packed_with_job_id == host
        assert _gpus(pids[host]) == _gpus(pids[guest]) == "0"
        wait_for(lambda: {cpus_allowed(pids[host]), cpus_allowed(pids[guest])} == {"0", "1"}, timeout=30,
                 what="the pair's own cpusets")
        # FIFO placed `host`; `picky` (no_share) came next but may not share, so `guest` did.
        assert admin.state(picky) == "queued"
    finally:
        admin.close()
        agent.stop()

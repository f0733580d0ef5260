"""A real elastic rescale: synergyd, real synergy-agent processes (fake GPUs) and a real
two-rank-capable PyTorch job. The job starts alone on one node at 1 GPU; when a second node
registers, the core grows it to 2 GPUs, so it stops at an agreed step, checkpoints, exits 75
and is relaunched as two ranks (world size 2), resuming at the next unconsumed sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_harness import AgentProcess, is_root_with_v1
from synergyd_harness import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")

SCRIPT = str(Path(__file__).parent.parent / "iterator" / "train_script.py")
SAMPLES = 1920


def test_elastic_job_rescales_from_one_rank_to_two(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120").start()
    agents = [AgentProcess(d, tmp_path / "work-n1", "n1", "--cpus", "0", "--memory", "2G").start()]
    try:
        admin = d.admin()
        rec = tmp_path / "batches.txt"
        job = admin.submit("grow", gpus=1, min_gpus=1, max_gpus=2, command=(
            sys.executable, "-u", SCRIPT, "--record", str(rec), "--samples", str(SAMPLES), "--epochs", "1",
            "--step-s", "0.03", "--elastic", "--gloo"), working_dir=str(tmp_path),
            checkpoint_dir=str(tmp_path / "ckpt")).id
        wait_for(lambda: rec.exists() and len(rec.read_text().splitlines()) >= 6, timeout=60,
                 what="training to start")
        assert admin.describe(job).attempt == 1 and len(admin.describe(job).placements) == 1
        agents.append(AgentProcess(d, tmp_path / "work-n2", "n2", "--cpus", "1", "--memory", "2G").start())
        wait_for(lambda: len(admin.describe(job).placements) == 2 and admin.describe(job).attempt >= 2,
                 timeout=60, what="the job to grow to two ranks")
        wait_for(lambda: admin.state(job) == "succeeded", timeout=120,
                 what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
        info = admin.describe(job)
        admin.close()
    finally:
        for a in agents:
            a.stop()
        d.kill()
    rows = [line.split() for line in rec.read_text().splitlines()]
    ranks = {int(r[1]) for r in rows}
    assert ranks == {0, 1}, "it ran at world size 2 after the rescale"
    ids = sorted(int(i) for r in rows for i in r[4].split(","))
    assert ids == list(range(SAMPLES))  # each sample once across the rescale
    assert info.attempt >= 2 and info.last_checkpoint_step > 0

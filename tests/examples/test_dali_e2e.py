"""The DALI example as a real job: real synergyd, two real synergy-agents (fake GPUs), real DALI.

Its node is drained mid-run: the job runs to the agreed step, checkpoints (its DALI pipeline's
checkpoint included), exits 75, is relaunched on the other node, rebuilds its pipeline from the
checkpoint and continues at the next unconsumed batch. The batch ids it records show every
sample exactly once per epoch, steps monotonic, over the stop and the resume.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from agent_harness import AgentProcess, is_root_with_v1
ROOT = Path(__file__).resolve().parents[2]
from synergyd_harness import DaemonProcess, wait_for
from synergy.v1 import admin_pb2

pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda130, the dali extra) does not import")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")]

IMAGES, BATCH, EPOCHS = 48, 4, 2


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120").start()
    agents = [AgentProcess(d, tmp_path / f"work-{n}", n, "--cpus", c, "--memory", "2G").start()
              for n, c in (("n1", "0"), ("n2", "1"))]
    yield d
    for a in agents:
        a.stop()
    d.kill()


def test_drained_dali_job_resumes_from_its_dali_checkpoint_exactly(cluster: DaemonProcess, tmp_path: Path) -> None:
    admin = cluster.admin()
    rec = tmp_path / "batches.txt"
    script = str(ROOT / "examples" / "dali" / "train.py")
    job = admin.submit("dali", gpus=1, command=(
        sys.executable, "-u", script, "--record", str(rec), "--images", str(IMAGES), "--image-size", "32",
        "--batch-size", str(BATCH), "--epochs", str(EPOCHS), "--workers", "1", "--step-sleep-s", "0.1",
        "--data-dir", str(tmp_path / "data")),
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt")).id
    wait_for(lambda: rec.exists() and len(rec.read_text().splitlines()) >= 3, timeout=90, what="training to start")
    first = admin.describe(job).placements[0].node_id
    admin.DrainNode(admin_pb2.DrainNodeRequest(node_id=first, reason="test"))
    wait_for(lambda: admin.describe(job).attempt >= 2, timeout=60, what="a relaunch")
    wait_for(lambda: admin.state(job) == "succeeded", timeout=120,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    admin.close()
    rows = [line.split() for line in rec.read_text().splitlines()]
    steps = [int(r[0]) for r in rows]
    assert steps == list(range(1, IMAGES // BATCH * EPOCHS + 1))  # monotonic: no step twice, none lost
    for epoch in range(EPOCHS):
        ids = sorted(int(i) for r in rows if int(r[1]) == epoch for i in r[2].split(","))
        assert ids == list(range(IMAGES)), f"epoch {epoch}: a batch repeated or skipped"
    ckpts = [p for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step-")]
    assert ckpts and 0 < int(ckpts[0].name.split("-")[1]) < len(steps)  # stopped mid-run

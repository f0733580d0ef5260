"""A real synergyd, real synergy-agent processes (fake GPUs) and a real PyTorch job.

The job's lease ends by `drain` of its node (deterministic): it runs to the agreed step,
checkpoints, exits 75, is relaunched on the other node and resumes at the next unconsumed batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_harness import is_root_with_v1
from job_cluster import Cluster, records, train_command
from synergyd_harness import wait_for
from synergy.v1 import admin_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")


def test_drained_job_checkpoints_moves_and_resumes_exactly(cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.daemon.admin()
    rec = tmp_path / "batches.txt"
    job = admin.submit("iter", gpus=1, command=train_command(rec, "--samples", "96", "--epochs", "2",
                                                             "--step-s", "0.03"),
                       working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt")).id
    wait_for(lambda: rec.exists() and len(rec.read_text().splitlines()) >= 5, timeout=60, what="training to start")
    first = admin.describe(job).placements[0].node_id
    admin.DrainNode(admin_pb2.DrainNodeRequest(node_id=first, reason="test"))
    wait_for(lambda: admin.describe(job).attempt >= 2, timeout=60, what="a relaunch")
    wait_for(lambda: admin.state(job) == "succeeded", timeout=90,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    info = admin.describe(job)
    admin.close()
    rows = records(rec)
    steps = [r.step for r in rows]
    assert steps == list(range(1, len(steps) + 1))  # monotonic, no step run twice
    for epoch in range(2):
        ids = sorted(i for r in rows if r.epoch == epoch for i in r.ids)
        assert ids == list(range(96)), f"epoch {epoch}: a batch repeated or skipped"
    assert info.attempt >= 2 and (tmp_path / "ckpt").exists()
    assert any(p.name.startswith("step-") for p in (tmp_path / "ckpt").iterdir())


def test_two_rank_gloo_job_stops_at_the_same_step_and_resumes_together(cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.daemon.admin()
    rec = tmp_path / "batches.txt"
    job = admin.submit("iter2", gpus=2, command=train_command(
        rec, "--samples", "960", "--epochs", "1", "--step-s", "0.03", "--elastic", "--gloo"), working_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path / "ckpt")).id
    wait_for(lambda: rec.exists() and len(rec.read_text().splitlines()) >= 6, timeout=60, what="training to start")
    for p in admin.describe(job).placements:
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id=p.node_id, reason="test"))

    def same_step() -> bool:  # each rank's file appears when its write is complete, not before
        return any({"rank0.pt", "rank1.pt"} <= {f.name for f in d.iterdir()} for d in (tmp_path / "ckpt").glob("step-*"))

    wait_for(same_step, timeout=60, what="both ranks to checkpoint the same step")
    for n in ("n1", "n2"):
        admin.ResumeNode(admin_pb2.ResumeNodeRequest(node_id=n))
    wait_for(lambda: admin.state(job) == "succeeded", timeout=90,
             what=f"the job to finish (is {admin.state(job)}: {admin.describe(job).state_reason})")
    assert admin.describe(job).attempt >= 2
    admin.close()
    rows = records(rec)
    ids = sorted(i for r in rows for i in r.ids)
    assert ids == list(range(960))  # both ranks together: each sample once over stop and resume

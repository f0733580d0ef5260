"""What the Slurm end-to-end tests share: synergyd on the test Slurm cluster, the real PyTorch
job of the iterator's tests (job_cluster.py: train_script.py with the one-line SynergyIterator
wrap, and the batches it records), and Slurm's view of a Synergy task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from job_cluster import Row, records, train_command
from slurm_cluster import SlurmCluster
from synergyd_harness import Admin, DaemonProcess, wait_for

from synergy.scheduler.backends.slurm.bridge import cluster_tag


def assert_exactly_once(rows: list[Row], samples: int, epochs: int) -> None:
    """Steps 1, 2, ... with none run twice, and every sample once per epoch, across attempts."""
    steps = [r.step for r in rows]
    assert steps == list(range(1, len(steps) + 1)), steps
    for epoch in range(epochs):
        ids = sorted(i for r in rows if r.epoch == epoch for i in r.ids)
        assert ids == list(range(samples)), f"epoch {epoch}: a batch repeated or skipped"


def training(admin: Admin, tmp_path: Path, *args: str, **spec: Any) -> tuple[int, Path]:
    """Job "a": train_script.py (checkpointing to tmp_path/ckpt) with `args`, once it has trained
    three batches; its id and its batch record."""
    rec = tmp_path / "batches.txt"
    a = admin.submit("a", gpus=1, working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt"),
                     command=train_command(rec, *args), **spec).id
    wait_for(lambda: len(records(rec)) >= 3, timeout=90, what=f"a to train ({admin.describe(a).state_reason})")
    return a, rec


def finished(admin: Admin, job: int) -> None:
    wait_for(lambda: admin.state(job) == "succeeded", timeout=120,
             what=f"job {job} to finish ({admin.state(job)}: {admin.describe(job).state_reason})")


def start_daemon(tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch, *extra: str,
                 round_s: float = 1.0) -> DaemonProcess:
    """synergyd --backend slurm on the test cluster's partition (SLURM_CONF in its environment)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return DaemonProcess(tmp_path / "state", "--backend", "slurm", "--slurm-partition", slurm.partition,
                         "--launch-timeout-s", "120", *extra, round_s=round_s).start()


def slurm_jobs_of(slurm: SlurmCluster, d: DaemonProcess, job_id: int) -> list[dict[str, Any]]:
    """Slurm's jobs carrying Synergy job `job_id` of synergyd `d`, oldest first."""
    mine = f"synergy:{cluster_tag(d.state_dir)}:"
    return sorted((j for j in slurm.jobs() if j["name"].startswith(f"synergy.{job_id}.")
                   and j["comment"].startswith(mine)), key=lambda j: j["job_id"])


def task_pid(slurm_job: dict[str, Any], job_id: int, attempt: int) -> int:
    """The pid of a Synergy task's process on this machine, found by its contract environment
    and its Slurm job's id (job ids repeat across daemons: other tests' jobs may run meanwhile)."""
    want = {f"SYNERGY_JOB_ID={job_id}".encode(), f"SYNERGY_ATTEMPT={attempt}".encode(),
            f"SLURM_JOB_ID={slurm_job['job_id']}".encode()}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and want <= set((proc / "environ").read_bytes().split(b"\0")):
                return int(proc.name)
        except OSError:
            continue
    return 0


def memory_limit_mb(pid: int) -> int:
    """The memory limit of the cgroup (v1) a process runs in, in MB: what Slurm's task/cgroup set."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # the tightest limit on the way up (Slurm sets job and step)
            group = Path(f"/sys/fs/cgroup/memory{path}")
            limits = [int((g / "memory.limit_in_bytes").read_text()) for g in (group, *group.parents)
                      if (g / "memory.limit_in_bytes").exists()]
            return min(limits) // 2**20
    raise AssertionError(f"process {pid} is in no memory cgroup")

"""The Slurm backend's pure mapping (no Slurm needed): nodes from sinfo's JSON, GRES, exit
statuses, what a Slurm job reports as a task, the partition checks and the sbatch request;
and the daemon flags that choose the backend."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from synergy.scheduler.backends.slurm import mapping
from synergy.scheduler.backends.slurm.commands import duration_s, size_bytes
from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.model import Placement
from synergy.scheduler.tasks import LAUNCH_FAILED, TaskKey, TaskPhase

KEY = TaskKey(7, 2, 0)
SHARE = Placement("n1", 1, 1.5, 3.0)


def sinfo_node(**kw: object) -> dict:
    node = {"name": "n1", "hostname": "h1", "cpus": 8, "real_memory": 32768, "gres": "gpu:v100:4(S:0-1)",
            "state": "idle", "state_flags": [], "partitions": ["synergy"], "reason": "", "cpu_load": 150}
    return {**node, **kw}


def test_a_slurm_node_becomes_a_synergy_node_with_its_gres_gpus() -> None:
    n = mapping.node_from_sinfo(sinfo_node(), "22.05.8", "slurm:x:synergy")
    r = n.record
    assert (r.id, r.hostname, r.capacity.gpus, r.capacity.cpus, r.capacity.mem_gb) == ("n1", "h1", 4, 8.0, 32.0)
    assert r.gpu_type == "V100" and r.agent_version == "slurm 22.05.8" and n.status == "up"
    assert n.telemetry == {"load_avg_1m": 1.5, "sampled_by": "slurm"}


@pytest.mark.parametrize("gres, want", [("gpu:t4:2", (2, "T4")), ("gpu:2", (2, "")), ("", (0, "")),
                                        ("nic:1,gpu:a100:4(S:0)", (4, "A100")), ("gpu:a100:2,gpu:a100:2", (4, "A100"))])
def test_gres_gpus(gres: str, want: tuple[int, str]) -> None:
    assert mapping.gres_gpus(gres) == want


@pytest.mark.parametrize("state, flags, status", [
    ("mixed", [], "up"), ("allocated", [], "up"), ("idle", ["DRAIN"], "drained"), ("mixed", ["DRAIN"], "drained"),
    ("down", [], "lost"), ("idle", ["NOT_RESPONDING"], "lost"), ("unknown", [], "lost")])
def test_slurm_node_states(state: str, flags: list[str], status: str) -> None:
    n = mapping.node_from_sinfo(sinfo_node(state=state, state_flags=flags, reason="fan"), "22.05.8", "i")
    assert n.status == status
    if status == "drained":
        assert n.reason.startswith("slurm:") and n.reason.endswith("fan")


def test_exit_statuses_are_wait_statuses() -> None:
    assert [mapping.exit_status(s) for s in (0, 75 << 8, 1 << 8, 9, 15, None)] == [0, 75, 1, -9, -15, 0]


def slurm_job(state: str, exit_code: int = 0, reason: str = "None") -> dict:
    return {"job_id": 42, "job_state": state, "exit_code": exit_code, "state_reason": reason}


def test_what_a_slurm_job_reports_as_a_task() -> None:
    assert mapping.observed(slurm_job("PENDING"), KEY, SHARE, False).phase == TaskPhase.STARTING
    assert mapping.observed(slurm_job("RUNNING"), KEY, SHARE, False).phase == TaskPhase.RUNNING
    assert mapping.observed(slurm_job("RUNNING"), KEY, SHARE, True).phase == TaskPhase.STOPPING
    done = mapping.observed(slurm_job("COMPLETED"), KEY, SHARE, False)
    assert (done.phase, done.exit_code, done.message, done.placement) == (TaskPhase.EXITED, 0, "", SHARE)
    restart = mapping.observed(slurm_job("FAILED", 75 << 8, "NonZeroExitCode"), KEY, SHARE, True)
    assert restart.exit_code == 75
    failed = mapping.observed(slurm_job("FAILED", 3 << 8, "NonZeroExitCode"), KEY, SHARE, False, "Traceback\nBoom")
    assert failed.exit_code == 3 and failed.message.startswith("Slurm job 42 FAILED (NonZeroExitCode)")
    assert failed.message.endswith("last output:\nTraceback\nBoom")
    oom = mapping.observed(slurm_job("OUT_OF_MEMORY", 0, "OutOfMemory"), KEY, SHARE, False)
    assert oom.oom_killed and oom.exit_code == -9
    lost = mapping.observed(slurm_job("NODE_FAIL"), KEY, SHARE, False)
    assert lost.exit_code == 255 and lost.message.startswith("lost: Slurm job 42 NODE_FAIL")


def test_a_job_cancelled_in_slurm_by_someone_else_is_a_failure_even_after_a_checkpoint() -> None:
    # SIGTERM from someone's scancel: the iterator checkpoints and exits 75, which alone would read
    # as "restart me"; cancelled outside Synergy it is a failure with Slurm's word for it.
    t = mapping.observed(slurm_job("CANCELLED", 75 << 8), KEY, SHARE, False)
    assert t.exit_code == -15 and "cancelled in Slurm, not by Synergy" in t.message
    ours = mapping.observed(slurm_job("CANCELLED", 9), KEY, SHARE, True)  # our own stop, escalated
    assert ours.exit_code == -9


def test_slurm_figures() -> None:
    assert [duration_s(t) for t in ("00:01", "01:02:03", "1-00:00:01", "00:00:01.500")] == [1, 3723, 86401, 1.5]
    assert [size_bytes(t) for t in ("109268K", "2M", "1.5G", "512", "")] == [109268 * 1024, 2 * 2**20, 3 * 2**29, 512, 0]


def test_cpu_in_cores_is_the_rate_between_changes_of_slurms_cpu_time() -> None:
    first, s1 = mapping.usage_sample(10.0, 100, None, now=100.0)
    assert first == {"rss_bytes": 100, "sampled_by": "slurm"}  # one figure: no rate yet
    same, s2 = mapping.usage_sample(10.0, 100, s1, now=101.0)  # Slurm has not refreshed it
    assert "cpu_cores" not in same and s2 == s1
    later, s3 = mapping.usage_sample(13.0, 120, s2, now=102.0)
    assert later["cpu_cores"] == 1.5 and s3 == (13.0, 102.0, 1.5)
    kept, _ = mapping.usage_sample(13.0, 130, s3, now=103.0)
    assert kept == {"rss_bytes": 130, "sampled_by": "slurm", "cpu_cores": 1.5}


def test_a_refused_launch_reads_as_an_impossible_placement() -> None:
    t = mapping.refused(KEY, SHARE, "Slurm refused the job: sbatch: error: Invalid generic resource")
    assert t.exit_code == LAUNCH_FAILED and t.message.startswith("launch failed: impossible placement: Slurm refused")


def test_our_jobs_are_told_apart_by_name_and_cluster_tag() -> None:
    job = {"name": mapping.job_name(KEY), "comment": mapping.comment("abc", SHARE), "nodes": "n1"}
    assert mapping.task_of(job, "abc") == (KEY, SHARE)
    assert mapping.task_of(job, "other") is None
    assert mapping.task_of({**job, "name": "synergy.x.1.0"}, "abc") is None
    assert mapping.task_of({"name": "train", "comment": ""}, "abc") is None


def test_partition_checks() -> None:
    own = mapping.node_from_sinfo(sinfo_node(), "", "i")
    shared = mapping.node_from_sinfo(sinfo_node(name="n2", partitions=["synergy", "batch"]), "", "i")
    assert mapping.partition_problem([own], "synergy", []) == ""
    assert "no such partition" in mapping.partition_problem([own], "gpu", [])
    assert "n2 (also in batch)" in mapping.partition_problem([own, shared], "synergy", [])
    foreign = [{"job_id": 5, "name": "train", "user_name": "ann"}]
    assert "5 (train, ann)" in mapping.partition_problem([own], "synergy", foreign)


def test_partition_settings_checks() -> None:
    closed = {"OverSubscribe": "NO", "AllowGroups": "synergy", "RootOnly": "no", "AllowAccounts": "ALL",
              "AllowQos": "ALL"}
    problem = mapping.partition_settings_problem
    assert problem("p", closed, False) == ""
    assert "OverSubscribe=FORCE:4 lets Slurm put several jobs on the same cores" in problem(
        "p", {**closed, "OverSubscribe": "FORCE:4"}, True)
    assert "OverSubscribe=YES:2" in problem("p", {**closed, "OverSubscribe": "YES:2"}, True)
    assert "whole nodes" in problem("p", {**closed, "OverSubscribe": "EXCLUSIVE"}, True)
    open_ = {**closed, "AllowGroups": "all"}
    assert mapping.partition_is_open(open_) and "anyone may submit" in problem("p", open_, False)
    assert problem("p", open_, True) == ""  # --slurm-allow-open-partition
    for one in ({"AllowAccounts": "synergy"}, {"AllowQos": "normal"}, {"RootOnly": "yes"}):
        assert not mapping.partition_is_open({**open_, **one}) and problem("p", {**open_, **one}, False) == ""


def test_the_batch_request_holds_the_share_and_execs_the_argv_unparsed() -> None:
    job = SimpleNamespace(name="j", spec=SimpleNamespace(command=("python", "train.py", "--name", "it's $HOME")))
    req = mapping.batch_request(KEY, job, SHARE, "synergy", "abc", "/logs/7-2-0.log", "/work")  # type: ignore[arg-type]
    assert "--nodelist=n1" in req.flags and "--cpus-per-task=1" in req.flags and "--mem=3072M" in req.flags
    assert "--gres=gpu:1" in req.flags and "--no-requeue" in req.flags and "--job-name=synergy.7.2.0" in req.flags
    assert req.script.startswith("#!/bin/sh\n")
    assert "exec python train.py --name 'it'\"'\"'s $HOME'\n" in req.script
    assert mapping.slurm_cpus(0.5) == 1 and mapping.slurm_mem_mb(0) == mapping.MIN_MEM_MB


def test_backend_flags(tmp_path: Path) -> None:
    cfg = load_config(["--state-dir", str(tmp_path), "--backend", "slurm", "--slurm-partition", "gpu"])
    assert (cfg.backend, cfg.slurm_partition, cfg.resizes_in_place) == ("slurm", "gpu", False)
    assert load_config(["--state-dir", str(tmp_path)]).resizes_in_place
    with pytest.raises(ConfigError, match=r"^--backend slurm needs --slurm-partition"):
        load_config(["--state-dir", str(tmp_path), "--backend", "slurm"])
    with pytest.raises(ConfigError, match=r"^--backend must be agent or slurm, got 'k8s'"):
        load_config(["--state-dir", str(tmp_path), "--backend", "k8s"])
    toml = tmp_path / "d.toml"
    toml.write_text('backend = "slurm"\nslurm-partition = "gpu"\nslurm-pending-s = 5\n'
                    'slurm-allow-open-partition = true\n')
    cfg = load_config(["--state-dir", str(tmp_path), "--config", str(toml)])
    assert (cfg.backend, cfg.slurm_partition, cfg.slurm_pending_s) == ("slurm", "gpu", 5.0)
    assert cfg.slurm_allow_open_partition and not cfg.resizes_in_place
    assert not load_config(["--state-dir", str(tmp_path), "--backend", "slurm", "--slurm-partition", "gpu"]
                           ).slurm_allow_open_partition
    assert load_config(["--state-dir", str(tmp_path), "--backend", "slurm", "--slurm-partition", "gpu",
                        "--slurm-allow-open-partition"]).slurm_allow_open_partition

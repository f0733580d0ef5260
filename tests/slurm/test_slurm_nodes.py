"""Node discovery: synergyd --backend slurm registers the partition's nodes with Slurm's CPUs,
memory and GRES GPUs, follows a Slurm-side drain, and refuses a partition it cannot own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from slurm_cluster import NODE_CPUS, NODE_GPUS, NODE_MEM_MB, SlurmCluster
from synergyd_harness import DaemonProcess, wait_for

from synergy.v1 import admin_pb2, common_pb2


def start_daemon(tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch, *extra: str) -> DaemonProcess:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return DaemonProcess(tmp_path / "state", "--backend", "slurm", "--slurm-partition", slurm.partition,
                         *extra).start()


def nodes(d: DaemonProcess) -> dict[str, admin_pb2.NodeInfo]:
    admin = d.admin()
    try:
        return {n.node_id: n for n in admin.ListNodes(admin_pb2.ListNodesRequest()).nodes}
    finally:
        admin.close()


def test_the_partitions_nodes_become_synergy_nodes(tmp_path: Path, slurm: SlurmCluster,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    d = start_daemon(tmp_path, slurm, monkeypatch)
    try:
        found = wait_for(lambda: len(nodes(d)) == len(slurm.nodes) and nodes(d), timeout=20, what="nodes")
        for name in slurm.nodes:
            n = found[name]
            assert (n.capacity.gpus, n.capacity.cpus, n.capacity.mem_gb) == (NODE_GPUS, NODE_CPUS, NODE_MEM_MB / 1024)
            assert n.gpu_type == "T4" and n.agent_version.startswith("slurm 22.") and n.hostname == "localhost"
        # Drained in Slurm: drained in Synergy, with Slurm's reason; resumed: ready again.
        slurm.scontrol("update", f"NodeName={slurm.nodes[0]}", "State=DRAIN", "Reason=disk check")
        drained = wait_for(lambda: "disk check" in nodes(d)[slurm.nodes[0]].state_reason and nodes(d)[slurm.nodes[0]],
                           timeout=20, what="the Slurm drain to reach synergyd")
        assert common_pb2.NodeState.Name(drained.state) == "NODE_STATE_DRAINING"
        slurm.scontrol("update", f"NodeName={slurm.nodes[0]}", "State=RESUME")
        wait_for(lambda: common_pb2.NodeState.Name(nodes(d)[slurm.nodes[0]].state) == "NODE_STATE_READY",
                 timeout=20, what="the resume to reach synergyd")
    finally:
        d.terminate()


def said(stderr: str) -> list[str]:
    """stderr without the structured log lines: what a person reads (one line, no traceback)."""
    return [ln for ln in stderr.strip().splitlines() if not ln.startswith("{")]


def refusal(tmp_path: Path, slurm: SlurmCluster, partition: str, *extra: str) -> list[str]:
    """synergyd --backend slurm on `partition`, expected to refuse to start: what it said (exit code 1)."""
    done = subprocess.run([sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(tmp_path / "s"),
                           "--port", "0", "--backend", "slurm", "--slurm-partition", partition, *extra],
                          capture_output=True, text=True, timeout=60, env=slurm.env)
    assert done.returncode == 1, done.stderr
    return said(done.stderr)


def test_a_missing_partition_is_refused_in_one_line(tmp_path: Path, slurm: SlurmCluster) -> None:
    assert refusal(tmp_path, slurm, "nosuch") == [
        f"synergyd: --slurm-partition nosuch: Slurm has no such partition with nodes (it has: {slurm.partition})"]


@pytest.mark.parametrize("setting", ["FORCE:4", "YES:2", "EXCLUSIVE"])
def test_a_partition_whose_jobs_may_share_cores_or_take_whole_nodes_is_refused(
        tmp_path: Path, slurm: SlurmCluster, setting: str) -> None:
    slurm.scontrol("update", f"PartitionName={slurm.partition}", f"OverSubscribe={setting}")
    p = slurm.partition
    why = ("lets Slurm put several jobs on the same cores, so Synergy's CPU shares would not hold"
           if setting != "EXCLUSIVE" else "gives every job whole nodes, so Synergy's jobs could not share a node")
    assert refusal(tmp_path, slurm, p) == [
        f"synergyd: --slurm-partition {p}: OverSubscribe={setting} {why}; set OverSubscribe=NO on the partition "
        "(docs/slurm.md)"]


def test_a_partition_anyone_may_submit_to_is_refused_unless_the_operator_allows_it(
        tmp_path: Path, slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    p = slurm.partition
    slurm.scontrol("update", f"PartitionName={p}", "AllowGroups=ALL")
    assert refusal(tmp_path, slurm, p) == [
        f"synergyd: --slurm-partition {p}: AllowGroups=ALL, AllowAccounts=ALL, AllowQos=ALL: anyone may submit to "
        "it, so Slurm could put other work on Synergy's resources; restrict it to synergyd's user "
        "(AllowGroups=GROUP, docs/slurm.md) or start with --slurm-allow-open-partition"]
    # Said on purpose: it starts, and says so in its log.
    (tmp_path / "open").mkdir()
    d = start_daemon(tmp_path / "open", slurm, monkeypatch, "--slurm-allow-open-partition")
    try:
        wait_for(lambda: len(nodes(d)) == len(slurm.nodes), timeout=20, what="nodes")
        assert '"event":"slurm.open_partition"' in d.log_text()
    finally:
        d.terminate()
    # Restricted by account or by QOS alone (read from scontrol, sinfo has no field for them): not open.
    for setting in ("AllowAccounts=synergy", "AllowQos=normal"):
        slurm.restrict()
        slurm.scontrol("update", f"PartitionName={p}", "AllowGroups=ALL", setting)
        (tmp_path / setting).mkdir()
        d = start_daemon(tmp_path / setting, slurm, monkeypatch)
        assert '"event":"slurm.open_partition"' not in d.log_text()
        d.terminate()


def test_a_partition_running_jobs_synergy_did_not_submit_is_refused(tmp_path: Path, slurm: SlurmCluster) -> None:
    slurm.run("sbatch", f"--partition={slurm.partition}", "--job-name=someone-else", "--mem=64M",
              f"--output={tmp_path / 'x.out'}", "--wrap=sleep 60")
    lines = refusal(tmp_path, slurm, slurm.partition)
    assert len(lines) == 1 and "runs jobs Synergy did not submit" in lines[0] and "someone-else" in lines[0], lines

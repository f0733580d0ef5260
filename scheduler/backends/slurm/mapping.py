"""Slurm <-> Synergy: nodes, job names, sbatch requests and observed tasks (pure functions).

A Synergy task (job, attempt, rank) is one Slurm batch job on one node, named
`synergy.J.A.R` with a comment `synergy:CLUSTER:GPUS:CPUS:MEM_GB`: the name finds the task
again after a synergyd restart, the cluster tag tells this synergyd's jobs from another's,
and the share is the one the round decided (Slurm only holds whole CPUs and MB, so the
share it shows would differ and look like a resize).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from synergy.scheduler.daemon.live import ObservedTask
from synergy.scheduler.daemon.records import JobRecord, NodeRecord
from synergy.scheduler.gpu_type_names import gpu_type_problem
from synergy.scheduler.model import Placement, Resources
from synergy.scheduler.tasks import IMPOSSIBLE_PLACEMENT, LAUNCH_FAILED, TaskKey, TaskPhase

NAME_PREFIX = "synergy."
_NAME_RE = re.compile(r"synergy\.(\d+)\.(\d+)\.(\d+)")
_GRES_RE = re.compile(r"gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")
#: Slurm node states in which the node takes work (base state, lower case).
_UP = {"idle", "mixed", "allocated", "completing", "planned"}
#: Flags that take a node out of service: drained (by an admin) or about to be.
_DRAIN_FLAGS = {"DRAIN", "DRAINING", "DRAINED", "MAINTENANCE", "RESERVED", "REBOOT_REQUESTED"}
#: Flags that mean Slurm has lost the node.
_LOST_FLAGS = {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "FAIL"}
#: Job states that are over (squeue --states=all keeps them for MinJobAge).
_FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
             "BOOT_FAIL", "DEADLINE"}
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "SUSPENDED"}
#: The smallest memory request sent (`--mem=0` would mean the whole node to Slurm).
MIN_MEM_MB = 64


# -- nodes --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmNode:
    """One Slurm node as Synergy sees it."""

    record: NodeRecord
    #: "up", "drained" (drained or draining in Slurm: Synergy drains it too) or "lost".
    status: str
    reason: str
    partitions: tuple[str, ...]
    telemetry: Mapping[str, Any]


def node_from_sinfo(n: Mapping[str, Any], version: str, instance_id: str) -> SlurmNode:
    """A node of `sinfo --json`: CPUs, memory (MB -> GB) and GRES GPUs become its capacity."""
    gpus, gpu_type = gres_gpus(str(n.get("gres", "")))
    name = str(n["name"])
    record = NodeRecord(
        id=name,
        hostname=str(n.get("hostname") or name),
        capacity=Resources(gpus, float(n.get("cpus", 0)), float(n.get("real_memory", 0)) / 1024),
        reserved=Resources(),
        gpus=tuple({"index": i, "uuid": f"slurm-{name}-gpu{i}", "name": gpu_type or "gpu"} for i in range(gpus)),
        agent_version=f"slurm {version}".strip(),
        instance_id=instance_id,
        cgroup_mode="",
        memory_enforced=True,
        gpu_type=gpu_type,
    )
    state = str(n.get("state", "")).lower()
    flags = {str(f).upper() for f in n.get("state_flags", [])}
    reason = str(n.get("reason", ""))
    if state not in _UP or flags & _LOST_FLAGS:
        status = "lost"
        reason = f"Slurm reports the node {state}{'+' + '+'.join(sorted(flags)) if flags else ''}"
        reason += f": {n.get('reason')}" if n.get("reason") else ""
    elif flags & _DRAIN_FLAGS or state == "drained":
        status = "drained"
        reason = f"slurm: node {name} {'+'.join(sorted(flags & _DRAIN_FLAGS)).lower()} in Slurm: {reason or 'no reason given'}"
    else:
        status = "up"
    load = n.get("cpu_load")
    telemetry: dict[str, Any] = {"sampled_by": "slurm"}
    if isinstance(load, (int, float)) and load >= 0:  # sinfo's CPU load is the load average x 100
        telemetry["load_avg_1m"] = float(load) / 100
    return SlurmNode(record, status, reason, tuple(n.get("partitions") or ()), telemetry)


def gres_gpus(gres: str) -> tuple[int, str]:
    """GPU count and type of a GRES string (`gpu:t4:2`, `gpu:2(S:0)`, `gpu:a100:4,nic:1`).

    The type is upper case (`T4`, Synergy's spelling); a node with GPUs of two types is
    given the first (one type per node, as with our agent) and the type checks drop an
    unusable name (untyped then)."""
    total, kind = 0, ""
    for item in gres.split(","):
        m = _GRES_RE.match(item.strip())
        if m is None:
            continue
        total += int(m.group(2))
        kind = kind or (m.group(1) or "").upper()
    if kind and gpu_type_problem(kind):
        kind = ""
    return total, kind


def partition_problem(nodes: Sequence[SlurmNode], partition: str, foreign_jobs: Sequence[Mapping[str, Any]]) -> str:
    """Why synergyd must not run on `partition` ("" = it may): a partition with no nodes, nodes
    Slurm could also give other partitions' jobs, or jobs Synergy did not submit."""
    ours = [n for n in nodes if partition in n.partitions]
    if not ours:
        known = sorted({p for n in nodes for p in n.partitions})
        return f"--slurm-partition {partition}: Slurm has no such partition with nodes (it has: {', '.join(known) or 'none'})"
    shared = sorted(f"{n.record.id} (also in {', '.join(p for p in n.partitions if p != partition)})"
                    for n in ours if len(n.partitions) > 1)
    if shared:
        return (f"--slurm-partition {partition}: nodes {', '.join(shared)} belong to other partitions too, "
                "so Slurm could put other work on Synergy's resources; give Synergy nodes of their own (docs/slurm.md)")
    if foreign_jobs:
        ids = ", ".join(f"{j.get('job_id')} ({j.get('name', '')!s}, {j.get('user_name', '')!s})" for j in foreign_jobs[:5])
        return (f"--slurm-partition {partition}: it runs jobs Synergy did not submit ({ids}); restrict the partition "
                "to synergyd's user (AllowAccounts/AllowGroups, docs/slurm.md) and let those jobs finish")
    return ""


def partition_is_open(settings: Mapping[str, str]) -> bool:
    """Whether anyone may submit to the partition: every group, account and QOS allowed, not root
    only (a setting Slurm did not show counts as allowing all, as Slurm's own default does)."""
    return (settings.get("RootOnly", "no").lower() != "yes"
            and all(settings.get(k, "ALL").upper() == "ALL" for k in ("AllowGroups", "AllowAccounts", "AllowQos")))


def partition_settings_problem(partition: str, settings: Mapping[str, str], allow_open: bool) -> str:
    """Why the partition's own settings rule it out ("" = they do not): jobs may share cores
    (OverSubscribe YES or FORCE), every job gets whole nodes (EXCLUSIVE), or anyone may submit
    to it and the operator did not say that is intended (`--slurm-allow-open-partition`)."""
    flag = f"--slurm-partition {partition}"
    over = settings.get("OverSubscribe", "NO")
    mode = over.split(":")[0].upper()
    if mode in ("YES", "FORCE"):
        return (f"{flag}: OverSubscribe={over} lets Slurm put several jobs on the same cores, so Synergy's CPU "
                "shares would not hold; set OverSubscribe=NO on the partition (docs/slurm.md)")
    if mode == "EXCLUSIVE":
        return (f"{flag}: OverSubscribe=EXCLUSIVE gives every job whole nodes, so Synergy's jobs could not share "
                "a node; set OverSubscribe=NO on the partition (docs/slurm.md)")
    if partition_is_open(settings) and not allow_open:
        return (f"{flag}: AllowGroups=ALL, AllowAccounts=ALL, AllowQos=ALL: anyone may submit to it, so Slurm "
                "could put other work on Synergy's resources; restrict it to synergyd's user (AllowGroups=GROUP, "
                "docs/slurm.md) or start with --slurm-allow-open-partition")
    return ""


# -- jobs ---------------------------------------------------------------------------------------
def job_name(key: TaskKey) -> str:
    return f"{NAME_PREFIX}{key.job_id}.{key.attempt}.{key.rank}"


def comment(cluster: str, p: Placement) -> str:
    return f"synergy:{cluster}:{p.gpus}:{p.cpus:g}:{p.mem_gb:g}"


def task_of(job: Mapping[str, Any], cluster: str) -> tuple[TaskKey, Placement] | None:
    """The task a Slurm job of this synergyd carries (None: not one of ours)."""
    m = _NAME_RE.fullmatch(str(job.get("name", "")))
    parts = str(job.get("comment", "")).split(":")
    if m is None or len(parts) != 5 or parts[0] != "synergy" or parts[1] != cluster:
        return None
    try:
        share = Placement(str(job.get("nodes") or job.get("required_nodes") or ""), int(parts[2]), float(parts[3]),
                          float(parts[4]))
    except ValueError:
        return None
    return TaskKey(int(m.group(1)), int(m.group(2)), int(m.group(3))), share


def is_finished(job: Mapping[str, Any]) -> bool:
    return str(job.get("job_state", "")) in _FINISHED


def is_pending(job: Mapping[str, Any]) -> bool:
    return str(job.get("job_state", "")) in _PENDING


def exit_status(raw: Any) -> int:
    """Slurm's wait status as our exit code: the code, or -N for signal N."""
    status = int(raw or 0)
    return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


def observed(job: Mapping[str, Any], key: TaskKey, share: Placement, stopping: bool, log_tail: str = "",
             usage: Mapping[str, Any] | None = None) -> ObservedTask:
    """What our agent would report for the task this Slurm job carries (`usage`: Slurm's sample)."""
    state = str(job.get("job_state", ""))
    slurm_id = int(job.get("job_id", 0))
    backend_job = f"slurm {slurm_id}"
    if not is_finished(job):
        phase = TaskPhase.STARTING if is_pending(job) else TaskPhase.STOPPING if stopping else TaskPhase.RUNNING
        return ObservedTask(key, phase, placement=share, usage=dict(usage or {}), backend_job=backend_job)
    code = exit_status(job.get("exit_code"))
    reason = str(job.get("state_reason", "") or "")
    why = f"Slurm job {slurm_id} {state}" + (f" ({reason})" if reason and reason != "None" else "")
    oom = state == "OUT_OF_MEMORY"
    if state == "NODE_FAIL":
        code, why = 255, f"lost: {why}"
    elif state in ("CANCELLED", "TIMEOUT", "DEADLINE", "PREEMPTED", "BOOT_FAIL") and not stopping:
        # Ended by Slurm or by someone else's scancel: a failure, whatever the job did on its
        # way out (the iterator checkpoints and exits 75 on SIGTERM, which would read as "restart me").
        code = code if code not in (0, 75) else -15
        why = f"{why}: {'cancelled in Slurm, not by Synergy' if state == 'CANCELLED' else 'ended by Slurm'}"
    elif oom:
        code = code or -9
    message = why if code != 0 else ""
    if code not in (0, 75) and log_tail:
        message = f"{why}; last output:\n{log_tail}"
    return ObservedTask(key, TaskPhase.EXITED, exit_code=code, message=message, placement=share, oom_killed=oom,
                        backend_job=backend_job)


#: (CPU seconds, when, cores): Slurm's last new CPU figure for a task and the rate it gave.
CpuSample = tuple[float, float, float | None]


def usage_sample(cpu_s: float, rss_bytes: int, before: CpuSample | None, now: float) -> tuple[dict[str, Any], CpuSample]:
    """A task's ResourceUsage (dict form) from Slurm's cumulative CPU time and RSS, and the CPU
    sample to keep. Slurm refreshes its figures every JobAcctGatherFrequency only, so CPU in
    cores is the rate between the last two *changes* of the CPU time, not between two reads."""
    sample: CpuSample = (cpu_s, now, None)
    if before is not None:
        if cpu_s == before[0]:
            sample = before
        elif now > before[1] and cpu_s > before[0]:
            sample = (cpu_s, now, round((cpu_s - before[0]) / (now - before[1]), 3))
    out: dict[str, Any] = {"rss_bytes": rss_bytes, "sampled_by": "slurm"}
    if sample[2] is not None:
        out["cpu_cores"] = sample[2]
    return out, sample


def refused(key: TaskKey, share: Placement, why: str) -> ObservedTask:
    """A launch Slurm would not run: reported as the agent reports an impossible placement,
    so the daemon requeues the job with Slurm's reason."""
    return ObservedTask(key, TaskPhase.EXITED, exit_code=LAUNCH_FAILED, placement=share,
                        message=f"launch failed: {IMPOSSIBLE_PLACEMENT}: {why}")


@dataclass(frozen=True)
class BatchRequest:
    """One sbatch: its flags and the script (given on stdin, so nothing lands on disk)."""

    flags: tuple[str, ...]
    script: str


def batch_request(key: TaskKey, job: JobRecord, p: Placement, partition: str, cluster: str, log: str,
                  working_dir: str) -> BatchRequest:
    """sbatch flags holding exactly the round's share on its node, and a script that `exec`s the
    job's argv (no shell parses the command; Slurm's exit code is the job's)."""
    flags = (
        f"--job-name={job_name(key)}",
        f"--comment={comment(cluster, p)}",
        f"--partition={partition}",
        f"--nodelist={p.server_id}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={slurm_cpus(p.cpus)}",
        f"--mem={slurm_mem_mb(p.mem_gb)}M",
        *((f"--gres=gpu:{p.gpus}",) if p.gpus else ()),
        f"--output={log}",
        "--open-mode=append",
        f"--chdir={working_dir}",
        "--no-requeue",
        "--export=ALL",
    )
    script = "\n".join((
        "#!/bin/sh",
        f"# Synergy job {key.job_id} ({job.name}), attempt {key.attempt}, rank {key.rank}: submitted by synergyd",
        "# The cores Slurm bound this task to, as the contract's SYNERGY_ALLOC_CORES (a cpu list).",
        "SYNERGY_ALLOC_CORES=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)",
        "export SYNERGY_ALLOC_CORES",
        f'echo "synergy: job {key.job_id} attempt {key.attempt} rank {key.rank}: Slurm job $SLURM_JOB_ID on '
        '$SLURMD_NODENAME, cores $SYNERGY_ALLOC_CORES"',
        f"exec {shlex.join(job.spec.command)}",
        "",
    ))
    return BatchRequest(flags, script)


def slurm_cpus(cpus: float) -> int:
    """Slurm hands out whole CPUs: a share's whole part, at least one."""
    return max(1, math.floor(cpus + 1e-9))


def slurm_mem_mb(mem_gb: float) -> int:
    return max(MIN_MEM_MB, math.floor(mem_gb * 1024))

"""The dashboard's JSON: what the pages draw, built from the daemon's state under its lock.

Read-only: nothing here changes a record. Each function takes the assembled daemon's parts
(events.Parts) and returns plain dicts ready for `json.dumps`.
"""

from __future__ import annotations

from itertools import islice, takewhile
from typing import Any

from synergy.scheduler.daemon.events import Parts
from synergy.scheduler.daemon.live import TaskKey
from synergy.scheduler.daemon.records import JobRecord, JobState
from synergy.scheduler.daemon.servicers.admin_servicer import proportional_share
from synergy.scheduler.daemon.tasklogs import find_task, last_lines
from synergy.scheduler.dashboard.history import ClusterSample, History, JobSample
from synergy.scheduler.model import Cluster, Resources, ServerPool

#: Lines of a job's log the job page shows.
LOG_LINES = 40
#: Finished jobs the jobs table lists (the latest ones; every active job is always listed).
FINISHED_LISTED = 500


def _res(r: Resources | None) -> dict[str, float] | None:
    return None if r is None else {"gpus": r.gpus, "cpus": round(r.cpus, 3), "mem_gb": round(r.mem_gb, 3)}


def _held(job: JobRecord) -> Resources:
    return sum((p.resources for p in job.placements), Resources())


def _rate(parts: Parts, job: JobRecord) -> float:
    """The job's throughput with what renewals reported since the last save."""
    live = parts.jobs.progress(job)
    return live[1] if live is not None else job.samples_per_s


def sample(parts: Parts, history: History) -> None:
    """Add the cluster's current figures (and each placed job's) to `history`."""
    ctx = parts.ctx
    now = ctx.clock.now()
    with ctx.lock:
        views = parts.nodes.list()
        jobs = ctx.store.active_jobs()
        placed = {j.id: JobSample(now, (h := _held(j)).gpus, h.cpus, h.mem_gb, _rate(parts, j))
                  for j in jobs if j.placed}
    capacity, allocated = Resources(), Resources()
    for v in views:
        if v.state in ("ready", "cordoned"):
            capacity, allocated = capacity + v.record.allocatable, allocated + v.allocated
    history.add(
        ClusterSample(
            now, parts.rounds.round_index, capacity.gpus, capacity.cpus, capacity.mem_gb,
            allocated.gpus, allocated.cpus, allocated.mem_gb,
            sum(1 for j in jobs if j.state == JobState.RUNNING), sum(1 for j in jobs if j.state == JobState.QUEUED),
        ),
        placed,
    )


def _job_row(parts: Parts, job: JobRecord, cluster: Cluster) -> dict[str, Any]:
    # The live progress without building a changed record (`JobBook.view`): half the cost.
    live = parts.jobs.progress(job)
    steps, rate = (live[0], live[1]) if live is not None else (job.steps_done, job.samples_per_s)
    return {
        "id": job.id,
        "name": job.name,
        "user": job.spec.user,
        "state": job.state.value,
        "gpus": job.spec.gpus,
        "gpu_type": ",".join(job.spec.gpu_types),
        "allocated": _res(_held(job)) if job.placed else None,
        "share": _res(proportional_share(job, cluster)),
        "nodes": sorted({p.server_id for p in job.placements}),
        "packed_with": job.packed_with,
        "samples_per_s": round(rate, 3),
        "steps_done": steps,
        "waiting_reason": job.waiting_reason,
        "reason": job.reason,
        "profile_source": job.profile_source or parts.ctx.profiles.source(job),
        "submitted_at": job.submitted_at,
        "finished_at": job.finished_at,
    }


def jobs(parts: Parts, user: str | None = None) -> dict[str, Any]:
    """Every active job and the `FINISHED_LISTED` that ended last (a long-lived cluster
    has finished jobs by the ten thousand: `synergy jobs` pages through them); `user`: only
    that user's (a plain user's view; None: everyone's). Read from the store's index of
    ended jobs: a page polls this every 2 s under the state lock, where sorting every job ever
    submitted took 69 ms at 20,000 ended (docs/daemon.md, "A long history: ended jobs")."""
    store = parts.ctx.store
    with parts.ctx.lock:
        cluster = parts.rounds.cluster()
        mine = (lambda j: j.spec.user == user) if user is not None else (lambda j: True)
        shown = list(islice(filter(mine, store.finished_newest_first()), FINISHED_LISTED))
        listed = sorted([*filter(mine, store.active_jobs()), *shown], key=lambda j: j.id)
        rows = [_job_row(parts, j, cluster) for j in listed]
        not_listed = store.finished_count(user) - len(shown)
    return {"now": parts.ctx.clock.now(), "jobs": rows, "finished_not_listed": not_listed}


def cluster(parts: Parts, user: str | None = None) -> dict[str, Any]:
    """Every node with its capacity, what each placed job holds on it, and its telemetry;
    `user`: a plain user's view, where other users' jobs show their id and what they hold
    (as `synergy nodes` does), not their name."""
    ctx, rounds = parts.ctx, parts.rounds
    with ctx.lock:
        views = parts.nodes.list()
        cl = rounds.cluster()
        placed = {j.id: j for j in ctx.store.active_jobs() if j.placed}
        shares = {i: proportional_share(j, cl) for i, j in placed.items()}
        counts = {s.value: n for s, n in ctx.store.state_counts().items() if n}
    nodes = []
    for v in views:
        r = v.record
        usage = v.telemetry.get("usage", {}) if v.telemetry else {}
        holders = []
        for job_id in v.job_ids:
            job = placed.get(job_id)
            if job is None:
                continue
            on = [p for p in job.placements if p.server_id == r.id]
            held = sum((p.resources for p in on), Resources())
            # The share on this node: the job's share scaled to the GPUs it holds here.
            share = shares.get(job_id)
            share_here = None if share is None or not job.spec.gpus else share.scale(held.gpus / job.spec.gpus)
            name = job.name if user is None or job.spec.user == user else ""
            holders.append({"id": job.id, "name": name, "state": job.state.value, "held": _res(held),
                            "share": _res(share_here), "packed_with": job.packed_with})
        nodes.append({
            "id": r.id,
            "hostname": r.hostname,
            "state": v.state,
            "reason": v.reason,
            "gpu_type": r.gpu_type,
            "pool": r.pool.value,
            "loaned": r.pool == ServerPool.LOANED,
            "capacity": _res(r.allocatable),
            "allocated": _res(v.allocated),
            "jobs": holders,
            "cpu_util_pct": v.telemetry.get("cpu_util_pct") if v.telemetry else None,
            "cpu_cores_used": usage.get("cpu_cores"),
            "mem_bandwidth": usage.get("mem_bandwidth"),
            "peak_mem_bandwidth": v.telemetry.get("peak_mem_bandwidth") if v.telemetry else None,
            "throttled_tasks": v.throttled_tasks,
            "last_heartbeat": v.last_heartbeat,
        })
    return {
        "now": ctx.clock.now(),
        "policy": rounds.policy,
        "mechanism": rounds.mechanism,
        "round_index": rounds.round_index,
        "round_s": ctx.config.round_s,
        "job_counts": counts,
        "nodes": nodes,
    }


def history(parts: Parts, hist: History, window_s: float) -> dict[str, Any]:
    """Samples of the last `window_s` seconds (0: all kept) and the JCTs of jobs finished then."""
    now = parts.ctx.clock.now()
    since = now - window_s if window_s > 0 else 0.0
    with parts.ctx.lock:
        finished = list(takewhile(lambda j: j.finished_at >= since, parts.ctx.store.finished_newest_first()))
    return {
        "now": now,
        "samples": hist.cluster(since),
        "jcts": sorted(j.finished_at - j.submitted_at for j in finished if j.state == JobState.SUCCEEDED),
    }


def job(parts: Parts, hist: History, job_id: int) -> dict[str, Any] | None:
    """One job: its row, state history, samples over time, profile matrix and log tail."""
    ctx = parts.ctx
    with ctx.lock:
        record = ctx.store.job(job_id)
        if record is None:
            return None
        cl = parts.rounds.cluster()
        row = _job_row(parts, record, cl)
        try:
            profile = ctx.profiles.profile(record, cl)
        except Exception:  # noqa: BLE001 (a page without its heat map beats no page)
            profile = None
        log = _log_tail(parts, record)
    return {
        **row,
        "attempt": record.attempt,
        "preemptions": record.preemptions,
        "migrations": record.migrations,
        "command": list(record.spec.command),
        "history": [
            {"from": t.from_state.value if t.from_state else None, "to": t.to_state.value, "reason": t.reason,
             "at": t.at_s}
            for t in record.history
        ],
        "samples": hist.job(job_id),
        "profile": None if profile is None else {
            "model": profile.model,
            "source": row["profile_source"],
            "cpus_per_gpu": list(profile.cpus_per_gpu),
            "mem_gb_per_gpu": list(profile.mem_gb_per_gpu),
            "throughput": [list(r) for r in profile.throughput],
        },
        "log": log,
    }


def _log_tail(parts: Parts, record: JobRecord) -> dict[str, Any]:
    """Rank 0's last lines as relayed so far; asking marks the log wanted, so the node sends
    it with its next heartbeats and the page's next poll shows it (callers hold the lock)."""
    ctx = parts.ctx
    key = TaskKey(record.id, record.attempt, 0)
    found = find_task(ctx.live.nodes, key)
    log = ctx.task_logs.get(key)
    node_id = found[0] if found else log.node_id if log else (
        record.placements[0].server_id if record.placed else None)
    if node_id is None:
        return {"node": None, "text": "", "note": f"no log: the job is {record.state.value} and no node reports it"}
    log = ctx.task_logs.want(key, node_id, ctx.clock.now(), refresh=found is not None)
    text = last_lines(bytes(log.data), LOG_LINES).decode(errors="replace")
    note = log.error or ("" if log.answered else "asking the node for the log...")
    return {"node": node_id, "text": text, "note": note}

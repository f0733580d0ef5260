"""What the demo shows: a live table of the jobs, lines for what changed, and the summary.

`JobWatch.poll()` asks synergyd (ListJobs for every job, DescribeJob for the running ones'
task pids) and keeps, per job, what the daemon reported over time. The daemon clears a
job's placements when it leaves RUNNING, so what a job *got* is integrated here, once per
poll: the CPU and memory of its placements weighted by the time they were held, next to
its GPU-proportional share (`JobInfo.proportional_share`, computed by the daemon).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text

from synergy.scheduler.cli.commands.jobs import all_jobs
from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.output import enum_word, fmt_num, state_text
from synergy.v1 import admin_pb2, common_pb2

TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class JobSeen:
    """One job as the demo has watched it (times are the daemon's Unix seconds)."""

    id: int
    name: str
    kind: str
    gpus: int
    state: str = "submitted"
    reason: str = ""
    where: str = "-"
    alloc: tuple[float, float, float] = (0.0, 0.0, 0.0)
    share: tuple[float, float] | None = None
    samples_per_s: float = 0.0
    profile: str = "-"
    pids: tuple[int, ...] = ()
    attempt: int = 0
    nodes: set[str] = field(default_factory=set)
    submitted_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    #: Integrals over the polls that saw it running: seconds, CPU-seconds, GB-seconds.
    run_s: float = 0.0
    cpu_s: float = 0.0
    mem_gb_s: float = 0.0
    last_poll: float | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    def mean_alloc(self) -> tuple[float, float] | None:
        """Time-weighted CPU and memory while it ran (None: never seen running)."""
        if self.run_s <= 0:
            return None
        return self.cpu_s / self.run_s, self.mem_gb_s / self.run_s


class JobWatch:
    def __init__(self, client: Client, started: float) -> None:
        self.client = client
        self.started = started
        self.jobs: dict[int, JobSeen] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def poll(self) -> list[str]:
        """Refresh every job; returns one line per change worth telling (state, node, pid,
        allocation: a running job resized in place is what TUNE's gain is made of)."""
        now = time.monotonic()
        events: list[str] = []
        for info in all_jobs(self.client, admin_pb2.ListJobsRequest(all_users=True)):  # every user's (an admin)
            seen = self.jobs.get(info.id)
            if seen is None:
                seen = self.jobs[info.id] = JobSeen(info.id, info.name, info.spec.kind or "training", info.spec.gpus)
            before = (seen.state, seen.where, seen.pids, seen.alloc)
            self._update(seen, info, now)
            if seen.state == "running" and not seen.pids:
                job = self.client.call("DescribeJob", admin_pb2.DescribeJobRequest(job=str(info.id))).job
                seen.pids = tuple(t.pid for t in job.tasks if t.pid)
            if (seen.state, seen.where, seen.pids, seen.alloc) != before:
                events.append(self._event_line(seen))
        return events

    def _update(self, seen: JobSeen, info: admin_pb2.JobInfo, now: float) -> None:
        state = enum_word(common_pb2.JobState.DESCRIPTOR, info.state)
        if seen.state == "running" and seen.last_poll is not None:
            dt = now - seen.last_poll  # what it held since the last poll, as seen then
            seen.run_s += dt
            seen.cpu_s += seen.alloc[1] * dt
            seen.mem_gb_s += seen.alloc[2] * dt
        if state != "running" or info.attempt != seen.attempt:
            seen.pids = ()  # a new attempt runs new processes (DescribeJob names them)
        seen.attempt = info.attempt
        seen.state = state
        seen.reason = info.waiting_reason if state == "queued" and info.waiting_reason else info.state_reason
        seen.alloc = (sum(p.gpus for p in info.placements), sum(p.cpus for p in info.placements),
                      sum(p.mem_gb for p in info.placements))
        seen.where = ",".join(p.node_id for p in info.placements) or "-"
        seen.nodes.update(p.node_id for p in info.placements)
        if info.HasField("proportional_share"):
            seen.share = (info.proportional_share.cpus, info.proportional_share.mem_gb)
        seen.samples_per_s = info.samples_per_s
        seen.profile = info.profile_source or "-"
        seen.submitted_at, seen.started_at = info.submitted_at_unix_s, info.started_at_unix_s
        seen.finished_at = info.finished_at_unix_s
        seen.last_poll = now if state == "running" else None

    def _event_line(self, j: JobSeen) -> str:
        line = f"[{self.elapsed():6.1f}s] {j.name:<10} {j.state:<10}"
        if j.state == "running":
            line += f" on {j.where}: {fmt_num(j.alloc[0])} GPU, {fmt_num(j.alloc[1])} CPU, {fmt_num(j.alloc[2])} GB"
            if j.pids:
                line += f", pid {','.join(map(str, j.pids))}"
        elif j.reason:
            line += f" ({j.reason})"
        return line

    def all_done(self) -> bool:
        return bool(self.jobs) and all(j.done for j in self.jobs.values())

    # -- views ------------------------------------------------------------------------------------
    def table(self, title: str) -> Table:
        t = Table(title=title, title_justify="left")
        for col in ("JOB", "KIND", "STATE", "NODE", "GPU", "CPU", "MEM GB", "SHARE CPU/GB", "SAMPLES/S", "PROFILE"):
            t.add_column(col, justify="right" if col in ("GPU", "CPU", "MEM GB", "SAMPLES/S") else "left")
        for j in sorted(self.jobs.values(), key=lambda j: j.id):
            running = j.state == "running"
            t.add_row(
                j.name, j.kind, state_text(j.state), j.where,
                fmt_num(j.alloc[0]) if running else "-", fmt_num(j.alloc[1]) if running else "-",
                fmt_num(j.alloc[2]) if running else "-", _share(j),
                fmt_num(j.samples_per_s) if running and j.samples_per_s else "-", j.profile,
            )
        return t

    def summary(self, mechanism: str) -> Table:
        t = Table(title=f"Summary, {mechanism}: what each job got against its GPU-proportional share",
                  title_justify="left")
        for col in ("JOB", "KIND", "RESULT", "NODES", "WAITED", "COMPLETION", "CPU GOT", "MEM GB GOT",
                    "SHARE CPU/GB", "GOT / SHARE"):
            t.add_column(col, justify="right" if col in ("WAITED", "COMPLETION", "CPU GOT", "MEM GB GOT") else "left")
        for j in sorted(self.jobs.values(), key=lambda j: j.id):
            got = j.mean_alloc()
            waited = j.started_at - j.submitted_at if j.started_at else None
            completion = j.finished_at - j.submitted_at if j.finished_at else None
            t.add_row(
                j.name, j.kind, state_text(j.state), ",".join(sorted(j.nodes)) or "-",
                _secs(waited), _secs(completion),
                fmt_num(got[0]) if got else "-", fmt_num(got[1]) if got else "-",
                _share(j), _versus(got, j.share, j.kind),
            )
        return t


def _share(j: JobSeen) -> str:
    return f"{fmt_num(j.share[0])} / {fmt_num(j.share[1])}" if j.share else "-"


def _secs(s: float | None) -> str:
    return f"{s:.1f} s" if s is not None else "-"


def _versus(got: tuple[float, float] | None, share: tuple[float, float] | None, kind: str) -> Text:
    """CPU and memory as a multiple of the share: below 1 leaves room for others, above 1 is
    what Synergy gave beyond proportional (the job gains from it)."""
    if kind == "cpu":
        return Text("CPU-only: no GPU share", style="dim")
    if got is None or share is None or not share[0] or not share[1]:
        return Text("-")
    cpu, mem = got[0] / share[0], got[1] / share[1]
    return Text(f"CPU x{cpu:.2f}, mem x{mem:.2f}")

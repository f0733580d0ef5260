"""A bounded in-memory time series of cluster samples, for the dashboard's charts over time.

Kept by the daemon (live only: a restart starts it afresh; the durable record of a job is its
history in the state store). Every structure is bounded: the cluster series keeps the latest
`max_samples` samples, each job's series the latest `max_job_samples`, and at most `max_jobs`
jobs' series (the ones sampled longest ago are dropped first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ClusterSample:
    """The cluster at one instant: capacity and allocation of ready nodes, and job counts."""

    t: float
    round_index: int
    gpus: float
    cpus: float
    mem_gb: float
    gpus_allocated: float
    cpus_allocated: float
    mem_gb_allocated: float
    running: int
    queued: int


@dataclass(frozen=True)
class JobSample:
    """One placed job at one instant: what it holds and how fast it trains."""

    t: float
    gpus: float
    cpus: float
    mem_gb: float
    samples_per_s: float


@dataclass
class History:
    max_samples: int = 4096
    max_job_samples: int = 720
    max_jobs: int = 2048
    _cluster: deque[ClusterSample] = field(init=False)
    _jobs: OrderedDict[int, deque[JobSample]] = field(default_factory=OrderedDict, init=False)
    #: Samples are added by the daemon's event thread and read by HTTP threads.
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._cluster = deque(maxlen=self.max_samples)

    def add(self, sample: ClusterSample, jobs: dict[int, JobSample]) -> None:
        with self._lock:
            self._cluster.append(sample)
            for job_id, js in jobs.items():
                series = self._jobs.get(job_id)
                if series is None:
                    series = self._jobs[job_id] = deque(maxlen=self.max_job_samples)
                series.append(js)
                self._jobs.move_to_end(job_id)
            while len(self._jobs) > self.max_jobs:
                self._jobs.popitem(last=False)

    def cluster(self, since: float = 0.0) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(s) for s in self._cluster if s.t >= since]

    def job(self, job_id: int) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(s) for s in self._jobs.get(job_id, ())]

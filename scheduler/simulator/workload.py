"""Philly-derived synthetic workloads (§5.1, "Traces").

The paper keeps the Philly trace's shape but scales it to the simulated cluster: a job's
duration *at its GPU-proportional allocation* is 10^x minutes (x ~ U(1.5, 3) w.p. 0.8,
else U(3, 4)), arrivals are Poisson at `load` jobs/hour, and models are assigned by task
so that the workload split (image, language, speech) is kept exactly.

The duration is turned into iterations at the profile's reference allocation (3 CPUs and
62.5 GB per GPU for the zoo: the proportional share of the paper's servers), not at the
simulated cluster's share. On the paper's cluster the two are the same; on a cluster with
more CPUs per GPU (§5.5) the same work then finishes sooner under proportional allocation,
which is the effect §5.5 measures ("the baseline gets more CPU cores per GPU, thereby
reducing data stalls"). Every mechanism faces the same work; only allocation decides speed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from synergy.scheduler.model import Cluster, Job, JobKind
from synergy.scheduler.profiles.format import TASKS, SensitivityProfile
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.throughput import iterations_per_s

#: GPU demand of a multi-GPU trace and its probability. The upstream Synergy generator's
#: Philly-like 1/2/4/8 weights (0.70/0.10/0.15/0.05), with a fifth of the 8-GPU mass moved
#: to 16 GPUs because §5.1 has multi-GPU jobs "that request up to 16 GPUs".
GPU_DEMAND_WEIGHTS: tuple[tuple[int, float], ...] = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.04), (16, 0.01))
#: Duration at the GPU-proportional allocation is 10^x minutes, x ~ U(SHORT) w.p. SHORT_P.
SHORT_P = 0.8
SHORT_EXPONENT = (1.5, 3.0)
LONG_EXPONENT = (3.0, 4.0)
#: The paper's default workload split (§5.3.2).
DEFAULT_SPLIT: tuple[int, int, int] = (20, 70, 10)


@dataclass(frozen=True)
class TraceJob:
    """One row of a trace: when a job arrives and how much work it is.

    Not a job spec: what a user submits is `synergy.scheduler.jobspec.JobSpec` (the CLI's
    and the daemon's). A trace row keeps only what the scheduling core reads of it (model,
    GPUs) plus the simulator's own facts: an id, an arrival time, and fractional
    iterations (a duration times a rate, kept exact so a recorded trace replays bit for bit).
    """

    job_id: int
    model: str
    arrival_s: float
    iterations: float
    gpus: int


@dataclass(frozen=True)
class Workload:
    jobs: tuple[TraceJob, ...]
    #: All jobs arrive at t=0: the run is judged by makespan over every job.
    static: bool = False

    @property
    def ids(self) -> list[int]:
        return sorted(s.job_id for s in self.jobs)

    def to_jobs(self, profiles: Mapping[str, SensitivityProfile]) -> list[Job]:
        """Fresh, mutable Job objects: each run gets its own, so runs never share progress."""
        return [Job(s.job_id, s.model, s.gpus, s.arrival_s, s.iterations, profiles[s.model]) for s in self.jobs]


@dataclass(frozen=True)
class WorkloadParams:
    jobs: int
    load_per_h: float
    split: tuple[float, float, float] = DEFAULT_SPLIT
    multi_gpu: bool = False
    static: bool = False
    #: (GPUs, weight) of multi-GPU demands (`--gpu-mix`; Tesserae's trace: 1:0.6,2:0.3,4:0.09,8:0.01).
    gpu_mix: tuple[tuple[int, float], ...] = GPU_DEMAND_WEIGHTS


def parse_split(text: str) -> tuple[int, int, int]:
    """`--split image,language,speech` as whole percentages summing to 100."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != len(TASKS):
        raise SimInputError(f"--split needs three percentages (image,language,speech), got {text!r}")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise SimInputError(f"--split takes whole percentages like 20,70,10, got {text!r}") from None
    if any(v < 0 for v in values) or sum(values) != 100:
        raise SimInputError(f"--split percentages must be non-negative and sum to 100, got {text!r}")
    return values  # type: ignore[return-value]


def task_sequence(n: int, split: Sequence[float]) -> list[str]:
    """Tasks for jobs 0..n-1 so that every prefix is as close to the split as it can be.

    Each job goes to the task furthest below its quota (ties in TASKS order). No task ever
    strays a whole job from its quota, so whenever the quotas are whole numbers (100 jobs at
    20/70/10) the counts are exact, and any window of jobs (the measured 4000:5000) has the
    split too, not just the whole trace.
    """
    total = float(sum(split))
    if total <= 0:
        raise SimInputError("--split must give some task a positive share")
    share = [s / total for s in split]
    count = [0] * len(share)
    out: list[str] = []
    for i in range(1, n + 1):
        deficits = [share[t] * i - count[t] for t in range(len(share))]
        best = max(range(len(share)), key=lambda t: (deficits[t], -t))
        count[best] += 1
        out.append(TASKS[best])
    return out


def assign_models(tasks: Sequence[str], models_by_task: Mapping[str, Sequence[str]]) -> list[str]:
    """Round-robin over each task's models, in the zoo's order."""
    nxt = {t: 0 for t in TASKS}
    out: list[str] = []
    for task in tasks:
        names = models_by_task.get(task) or ()
        if not names:
            raise SimInputError(f"--split gives task {task!r} a share but no model of that task is known")
        out.append(names[nxt[task] % len(names)])
        nxt[task] += 1
    return out


def parse_gpu_mix(text: str) -> tuple[tuple[int, float], ...]:
    """`--gpu-mix 1:0.6,2:0.3,...`: GPUs:weight pairs, weights positive (renormalised)."""
    out = []
    for part in str(text).split(","):
        try:
            g, w = part.split(":")
            pair = (int(g), float(w))
        except ValueError:
            raise SimInputError(f"--gpu-mix takes GPUS:WEIGHT pairs like 1:0.6,2:0.4, got {text!r}") from None
        if pair[0] < 1 or not (pair[1] > 0 and math.isfinite(pair[1])):
            raise SimInputError(f"--gpu-mix needs GPUs >= 1 and positive weights, got {part!r}")
        out.append(pair)
    if len({g for g, _ in out}) != len(out):
        raise SimInputError(f"--gpu-mix lists a GPU count twice: {text!r}")
    return tuple(out)


def gpu_demand_choices(
    cluster_gpus: int, mix: Sequence[tuple[int, float]] = GPU_DEMAND_WEIGHTS
) -> tuple[list[int], list[float]]:
    """Multi-GPU sizes that fit the cluster, weights renormalised over them."""
    sizes = [g for g, _ in mix if g <= cluster_gpus]
    weights = [w for g, w in mix if g <= cluster_gpus]
    if not sizes:
        raise SimInputError(f"--gpu-mix: no size fits the cluster's {cluster_gpus} GPUs")
    total = sum(weights)
    return sizes, [w / total for w in weights]


def generate(
    params: WorkloadParams,
    profiles: Mapping[str, SensitivityProfile],
    models_by_task: Mapping[str, Sequence[str]],
    cluster: Cluster,
    rng: np.random.Generator,
) -> Workload:
    """Draw a Philly-derived trace; the same rng state gives the same trace.

    Draws happen in a fixed order (arrivals, duration class, both exponents, GPU demand),
    all of them even when a flag makes one unused, so toggling --static or --multi-gpu
    changes only what it says.
    """
    n = params.jobs
    if n < 1:
        raise SimInputError(f"--jobs must be at least 1, got {n}")
    if not params.static and not (params.load_per_h > 0 and math.isfinite(params.load_per_h)):
        raise SimInputError(f"--load must be a positive number of jobs per hour, got {params.load_per_h}")
    load = params.load_per_h if params.load_per_h > 0 else 1.0
    gaps = rng.exponential(3600.0 / load, size=n)
    long = rng.random(n) >= SHORT_P
    x_short = rng.uniform(*SHORT_EXPONENT, size=n)
    x_long = rng.uniform(*LONG_EXPONENT, size=n)
    sizes, weights = gpu_demand_choices(int(cluster.total.gpus), params.gpu_mix)
    gpus = rng.choice(np.array(sizes), p=np.array(weights), size=n)

    arrivals = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    duration_s = 60.0 * np.power(10.0, np.where(long, x_long, x_short))
    models = assign_models(task_sequence(n, params.split), models_by_task)

    specs: list[TraceJob] = []
    for i in range(n):
        model = models[i]
        if model not in profiles:
            raise SimInputError(f"model {model!r} has no sensitivity profile")
        g = int(gpus[i]) if params.multi_gpu else 1
        probe = Job(i, model, g, 0.0, 1.0, profiles[model])
        rate = iterations_per_s(probe, profiles[model].speed(*profiles[model].reference))
        specs.append(TraceJob(
            job_id=i,
            model=model,
            arrival_s=0.0 if params.static else float(arrivals[i]),
            iterations=float(duration_s[i]) * rate,
            gpus=g,
        ))
    return Workload(tuple(specs), static=params.static)


def make_elastic(jobs: Sequence[Job], share: float, seed: int) -> list[Job]:
    """Make about `share` of the jobs elastic (Lyra §5), the same ones for a given seed.

    An elastic job keeps its work and requested size (the size its profile's rate holds
    at) and may run anywhere from half of it (at least 1 GPU) to twice it, one GPU per worker.
    """
    if not 0.0 <= share <= 1.0:
        raise SimInputError(f"--elastic-share must be between 0 and 1, got {share}")
    ordered = sorted(jobs, key=lambda j: j.id)
    draws = np.random.default_rng([seed, 9]).random(len(ordered))
    out = []
    for job, u in zip(ordered, draws):
        if u < share:
            job = replace(job, kind=JobKind.ELASTIC, min_gpus=max(1, job.gpus // 2), max_gpus=2 * job.gpus,
                          gpus_per_worker=1)
        out.append(job)
    return out


def restrict_types(jobs: Sequence[Job], share: float, cluster: Cluster, seed: int) -> list[Job]:
    """Restrict about `share` of the jobs to one GPU type each, the same ones for a seed: a
    type drawn in proportion to its GPUs among the types with enough GPUs for the job
    (`synergy-sim --typed-share`). Untyped clusters have nothing to restrict to."""
    if not 0.0 <= share <= 1.0:
        raise SimInputError(f"--typed-share must be between 0 and 1, got {share}")
    types = [t for t in cluster.gpu_types if t]
    if not types:
        raise SimInputError("--typed-share needs a cluster with GPU types (--cluster FILE)")
    gpus = {t: cluster.of_type(t).total.gpus for t in types}
    rng = np.random.default_rng([seed, 11])
    out = []
    for job in sorted(jobs, key=lambda j: j.id):
        u, v = rng.random(), rng.random()
        fits = [t for t in types if gpus[t] >= job.gpus]
        if u < share and fits:
            total = sum(gpus[t] for t in fits)
            acc, pick = 0.0, fits[-1]
            for t in fits:
                acc += gpus[t] / total
                if v < acc:
                    pick = t
                    break
            job = replace(job, gpu_types=frozenset({pick}))
        out.append(job)
    return out


def default_measure_window(ids: Sequence[int]) -> frozenset[int]:
    """The paper's steady state scaled to the trace: jobs 4000:5000 of 6000 is positions
    [2/3, 5/6) of the trace in job-id order."""
    ordered = sorted(ids)
    n = len(ordered)
    lo, hi = (2 * n) // 3, (5 * n) // 6
    if hi <= lo:
        lo, hi = 0, n
    return frozenset(ordered[lo:hi])


def parse_measure(text: str) -> tuple[int, int]:
    """`--measure A:B`: job ids A (inclusive) to B (exclusive)."""
    a, sep, b = str(text).partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise SimInputError(f"--measure takes a job-id window like 4000:5000, got {text!r}") from None
    if not sep or lo < 0 or hi <= lo:
        raise SimInputError(f"--measure needs 0 <= START < END (START:END), got {text!r}")
    return lo, hi

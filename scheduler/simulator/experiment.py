"""One simulated experiment, from flags to metrics: the part `run`, `compare` and `sweep` share.

A `RunSpec` is plain, picklable data (sweeps send it to worker processes); `prepare` turns
it into a cluster, profiles and a workload once, and `simulate` runs one mechanism over
that workload with fresh Job objects, so comparing mechanisms compares them on the very
same jobs.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from synergy.scheduler.arrays import settings as array_settings
from synergy.scheduler.core import Scheduler
from synergy.scheduler.model import Cluster, Job, Resources, Server, ServerPool
from synergy.scheduler.profiles.format import TASKS, ProfileError, SensitivityProfile
from synergy.scheduler.profiles.pairs import PAIRS_KEY, PairTable, from_class_rule, load_pairs
from synergy.scheduler.registry import MECHANISMS, POLICIES, build_scheduler
from synergy.scheduler.simulator.engine import (
    DEFAULT_MAX_TIME_S,
    DEFAULT_ROUND_S,
    EngineConfig,
    SimResult,
    Simulation,
)
from synergy.scheduler.simulator.cpu_jobs import (CpuJobParams, CpuTraceJob, cpu_job_metrics, generate_cpu_jobs,
                                                   read_cpu_trace)
from synergy.scheduler.simulator.cpu_jobs import to_jobs as cpu_to_jobs
from synergy.scheduler.simulator.cluster_file import build_servers, load_cluster_file
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.metrics import summarise
from synergy.scheduler.simulator.inference import DEFAULT_CHECKPOINT_S, InferencePool, build_pool
from synergy.scheduler.simulator.trace import read_trace
from synergy.scheduler.simulator.workload import (
    DEFAULT_SPLIT,
    Workload,
    WorkloadParams,
    default_measure_window,
    generate,
    make_elastic,
    restrict_types,
)

DEFAULT_JOBS = 6000
DEFAULT_STATIC_JOBS = 1000
DEFAULT_MAX_TIME_H = DEFAULT_MAX_TIME_S / 3600.0
#: OPT's program 2 (placing the ideal allocations, bin packing) gets no CP-SAT time by
#: default in the simulator: a Fig. 9 run calls the core ~6400 times, and on 16 servers
#: CP-SAT seldom beats the repaired greedy placements anyway. With 0, OPT deploys the best
#: of the greedy/repair candidates and TUNE's own allocation; program 1 (the ideal) and the
#: upper bound `Opt.ideal_solution().upper_bound` do not depend on this limit.
DEFAULT_OPT_PLACEMENT_LIMIT = 0.0


@dataclass(frozen=True)
class RunSpec:
    servers: int = 16
    gpus_per_server: int = 8
    cpus_per_server: float = 24.0
    mem_per_server: float = 500.0
    policy: str = "fifo"
    mechanism: str = "tune"
    load: float = 9.0
    #: Jobs in the generated trace; None = DEFAULT_JOBS (dynamic) or DEFAULT_STATIC_JOBS.
    jobs: int | None = None
    multi_gpu: bool = False
    static: bool = False
    split: tuple[int, int, int] = DEFAULT_SPLIT
    seed: int = 0
    round_s: float = DEFAULT_ROUND_S
    #: Job-id window [start, end); None = the default steady-state window.
    measure: tuple[int, int] | None = None
    profiles: str | None = None
    trace: str | None = None
    max_time_h: float = DEFAULT_MAX_TIME_H
    #: Synergy-OPT's CP-SAT budget for program 2 (placement), in solver seconds; see
    #: DEFAULT_OPT_PLACEMENT_LIMIT. Other mechanisms ignore it.
    opt_placement_limit: float = DEFAULT_OPT_PLACEMENT_LIMIT
    #: Placement scorer by name (placement/scorers.py SCORERS); None = the mechanism's own.
    scorer: str | None = None
    #: Tesserae's migration-minimising relabelling (placement/migration.py), on by default.
    migration_matching: bool = True
    #: Seconds of work a job migrated between consecutive rounds redoes (engine.py).
    migration_cost_s: float = 0.0
    #: Seconds each (re)start of a job's process makes no progress (engine.py).
    start_cost_s: float = 0.0
    #: Multi-GPU demand mix, (GPUs, weight) pairs; None = GPU_DEMAND_WEIGHTS.
    gpu_mix: tuple[tuple[int, float], ...] | None = None
    # CODA's CPU array (simulator/cpu_jobs.py, arrays/cpu_array.py): CPU-only jobs, generated
    # (cpu_jobs.rate_per_h > 0) or from cpu_trace, on cpu_servers servers without GPUs (the
    # GPU servers' CPUs and memory) plus what they may borrow from GPU servers.
    cpu_jobs: CpuJobParams | None = None
    cpu_trace: str | None = None
    cpu_servers: int = 0
    borrow_fraction: float = 1.0
    trim_training: bool = True

    @property
    def has_cpu_jobs(self) -> bool:
        return self.cpu_jobs is not None or self.cpu_trace is not None

    #: Lyra's capacity loaning: inference servers (shaped like the training ones) whose
    #: idle ones are loaned to training, and their demand ("diurnal" or a CSV file).
    inference_servers: int = 0
    inference_trace: str = "diurnal"
    #: Seconds of running between a job's checkpoints (what a reclaim costs it).
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    #: Fraction of jobs made elastic (Lyra §5; workload.make_elastic).
    elastic_share: float = 0.0
    #: A cluster file of server groups mixing GPU types (simulator/cluster_file.py); when
    #: set, it replaces servers/gpus_per_server/cpus_per_server/mem_per_server.
    cluster_file: str | None = None
    #: Fraction of jobs restricted to one GPU type (workload.restrict_types).
    typed_share: float = 0.0
    #: Tesserae's packing (placement/packing.py), with the pair table of the `pairs` profile
    #: file, or one generated from the task-class rule (profiles/pairs.py) when None.
    packing: bool = False
    pairs: str | None = None


@dataclass(frozen=True)
class ProfileSet:
    profiles: Mapping[str, SensitivityProfile]
    #: Models a generated trace draws from, per task, in round-robin order.
    models_by_task: Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class Prepared:
    spec: RunSpec
    cluster: Cluster
    profile_set: ProfileSet
    workload: Workload
    measured: frozenset[int]
    #: CPU-only jobs (none unless the spec asks for them); never measured for GPU metrics.
    cpu_trace: tuple[CpuTraceJob, ...] = ()
    inference: InferencePool | None = None
    #: The pairwise packing profile; None = packing off.
    pairs: PairTable | None = None


@dataclass
class RunReport:
    metrics: dict[str, Any]
    result: SimResult
    measured: frozenset[int]


def zoo_profiles(path: str | None) -> ProfileSet:
    """The built-in zoo, with a user's profile file merged over it."""
    from synergy.scheduler.profiles import zoo

    try:
        profiles = zoo.get_profiles(path)
    except ProfileError as exc:
        raise SimInputError(f"--profiles: {exc}") from None
    return ProfileSet(profiles, {t: tuple(zoo.MODELS_BY_TASK.get(t, ())) for t in TASKS})


def check_names(policy: str, mechanisms: Sequence[str]) -> None:
    """Names users type, checked against the registry (the one place plug-ins are listed)."""
    if policy not in POLICIES:
        raise SimInputError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    for m in mechanisms:
        if m not in MECHANISMS:
            raise SimInputError(f"unknown mechanism {m!r}; choose one of {', '.join(MECHANISMS)}")


def _check_spec(spec: RunSpec) -> None:
    if spec.servers < 1:
        raise SimInputError(f"--servers must be at least 1, got {spec.servers}")
    if spec.gpus_per_server < 1:
        raise SimInputError(f"--gpus-per-server must be at least 1, got {spec.gpus_per_server}")
    for flag, value in (("--cpus-per-server", spec.cpus_per_server), ("--mem-per-server", spec.mem_per_server),
                        ("--round-s", spec.round_s), ("--max-time-h", spec.max_time_h)):
        if not (value > 0 and math.isfinite(value)):
            raise SimInputError(f"{flag} must be a positive number, got {value}")
    if not (0 <= spec.migration_cost_s < spec.round_s):
        raise SimInputError(f"--migration-cost-s must be >= 0 and below --round-s, got {spec.migration_cost_s}")
    if not (spec.start_cost_s >= 0 and math.isfinite(spec.start_cost_s)):
        raise SimInputError(f"--start-cost-s must be a number >= 0, got {spec.start_cost_s}")
    if spec.cpu_servers < 0:
        raise SimInputError(f"--cpu-servers must be >= 0, got {spec.cpu_servers}")
    try:
        array_settings.cpu_array(spec.borrow_fraction, spec.trim_training)
    except ValueError as exc:
        raise SimInputError(str(exc)) from None
    if spec.cpu_jobs is not None and spec.cpu_trace is not None:
        raise SimInputError("--cpu-trace replays recorded CPU-only jobs; drop --cpu-jobs-per-h")
    if spec.cpu_jobs is not None:
        spec.cpu_jobs.check()
    if not (spec.opt_placement_limit >= 0 and math.isfinite(spec.opt_placement_limit)):
        raise SimInputError(f"--opt-placement-limit must be a number of seconds >= 0, got {spec.opt_placement_limit}")
    if spec.inference_servers < 0:
        raise SimInputError(f"--inference-servers must be >= 0, got {spec.inference_servers}")
    if not (spec.checkpoint_s > 0 and math.isfinite(spec.checkpoint_s)):
        raise SimInputError(f"--checkpoint-s must be a positive number, got {spec.checkpoint_s}")
    if not 0.0 <= spec.typed_share <= 1.0:
        raise SimInputError(f"--typed-share must be between 0 and 1, got {spec.typed_share}")
    if not 0.0 <= spec.elastic_share <= 1.0:
        raise SimInputError(f"--elastic-share must be between 0 and 1, got {spec.elastic_share}")
    if spec.pairs is not None and not spec.packing:
        raise SimInputError("--pairs is the pair table of packing; add --packing")
    check_names(spec.policy, [spec.mechanism])


def build_cluster(spec: RunSpec) -> Cluster:
    if spec.cluster_file is not None:
        return load_cluster(spec)
    gpu = Cluster.homogeneous(spec.servers, spec.gpus_per_server, spec.cpus_per_server, spec.mem_per_server)
    cpu = tuple(Server(f"c{i}", Resources(0, spec.cpus_per_server, spec.mem_per_server), pool=ServerPool.CPU_ONLY)
                for i in range(spec.cpu_servers))
    return Cluster(gpu.servers + cpu) if cpu else gpu


def load_cluster(spec: RunSpec) -> Cluster:
    """The cluster file's servers, plus --cpu-servers shaped like its first GPU server."""
    servers = build_servers(load_cluster_file(spec.cluster_file or ""))
    one = next(s.capacity for s in servers if s.capacity.gpus > 0)
    cpu = tuple(Server(f"c{i}", Resources(0, one.cpus, one.mem_gb), pool=ServerPool.CPU_ONLY)
                for i in range(spec.cpu_servers))
    return Cluster(servers + cpu)


def build(spec: RunSpec, pairs: PairTable | None = None) -> Scheduler:
    """The spec's policy and mechanism from the registry, with OPT's placement budget applied
    and packing on with `pairs` (None: off).

    The registry builds OPT with its library defaults (what the daemon runs); the simulator
    only overrides `placement_limit`, keeping every other setting the registry chose.
    """
    scheduler = build_scheduler(spec.policy, spec.mechanism, spec.scorer, spec.migration_matching, pairs)
    if spec.mechanism == "opt":
        mechanism = replace(scheduler.mechanism, placement_limit=spec.opt_placement_limit)  # type: ignore[type-var]
        scheduler = replace(scheduler, mechanism=mechanism)
    return replace(scheduler, cpu_array=array_settings.cpu_array(spec.borrow_fraction, spec.trim_training))


def pair_table(spec: RunSpec, profiles: Mapping[str, SensitivityProfile]) -> PairTable | None:
    """The run's packing profile: the `--pairs` file's, else the task-class rule over the
    run's models; None without packing."""
    if not spec.packing:
        return None
    if spec.pairs is None:
        return from_class_rule(profiles)
    try:
        table = load_pairs(spec.pairs)
    except ProfileError as exc:
        raise SimInputError(f"--pairs: {exc}") from None
    if not len(table):
        raise SimInputError(f"--pairs {spec.pairs}: the file has no {PAIRS_KEY!r} entries")
    return table


def prepare(spec: RunSpec, profile_set: ProfileSet | None = None) -> Prepared:
    """Validate the spec and build everything a run needs, once."""
    _check_spec(spec)
    cluster = build_cluster(spec)
    if spec.typed_share > 0 and not any(cluster.gpu_types):
        raise SimInputError("--typed-share needs a cluster with GPU types (--cluster FILE)")
    ps = profile_set if profile_set is not None else zoo_profiles(spec.profiles)
    pairs = pair_table(spec, ps.profiles)
    if spec.trace is not None:
        workload = read_trace(spec.trace, ps.profiles, int(cluster.total.gpus))
    else:
        jobs = spec.jobs if spec.jobs is not None else (DEFAULT_STATIC_JOBS if spec.static else DEFAULT_JOBS)
        params = WorkloadParams(jobs, spec.load, spec.split, spec.multi_gpu or spec.gpu_mix is not None, spec.static)
        if spec.gpu_mix is not None:
            params = replace(params, gpu_mix=spec.gpu_mix)
        workload = generate(params, ps.profiles, ps.models_by_task, cluster, np.random.default_rng(spec.seed))
    ids = workload.ids
    if spec.measure is not None:
        lo, hi = spec.measure
        measured = frozenset(i for i in ids if lo <= i < hi)
        if not measured:
            raise SimInputError(
                f"--measure {lo}:{hi} selects no job (the trace has job ids {ids[0]}..{ids[-1]})"
            )
    elif workload.static:
        measured = frozenset(ids)
    else:
        measured = default_measure_window(ids)
    cpu: tuple[CpuTraceJob, ...] = ()
    if spec.cpu_trace is not None:
        cpu = read_cpu_trace(spec.cpu_trace)
    elif spec.cpu_jobs is not None:
        until = max((j.arrival_s for j in workload.jobs), default=0.0) or spec.cpu_jobs.duration_h * 3600.0
        cpu = generate_cpu_jobs(spec.cpu_jobs, until, np.random.default_rng([spec.seed, 1]))
    inference = None
    if spec.inference_servers > 0:
        one = cluster.servers[0].capacity
        inference = build_pool(spec.inference_servers, spec.inference_trace, one, spec.checkpoint_s)
    return Prepared(spec, cluster, ps, workload, measured, cpu, inference, pairs)


def _gpu_jobs(prep: Prepared, spec: RunSpec) -> list[Job]:
    """Fresh training jobs for one run (a run advances its jobs in place)."""
    jobs = prep.workload.to_jobs(prep.profile_set.profiles)
    if spec.typed_share > 0:
        jobs = restrict_types(jobs, spec.typed_share, prep.cluster, spec.seed)
    return make_elastic(jobs, spec.elastic_share, spec.seed) if spec.elastic_share > 0 else jobs


def simulate(prep: Prepared, mechanism: str | None = None, memoise: bool = True,
             clock: Callable[[], float] = time.perf_counter) -> RunReport:
    """Run one mechanism (default: the spec's) over the prepared workload."""
    spec = prep.spec if mechanism is None else replace(prep.spec, mechanism=mechanism)
    check_names(spec.policy, [spec.mechanism])
    scheduler = build(spec, prep.pairs)
    config = EngineConfig(spec.round_s, spec.max_time_h * 3600.0, prep.measured, memoise, spec.migration_cost_s,
                          prep.inference, start_cost_s=spec.start_cost_s)
    t0 = clock()
    placeholder = next(iter(prep.profile_set.profiles.values()))
    result = Simulation(scheduler, prep.cluster, _gpu_jobs(prep, spec) + cpu_to_jobs(prep.cpu_trace, placeholder),
                        config).run()
    metrics: dict[str, Any] = {
        "policy": spec.policy,
        "mechanism": spec.mechanism,
        "seed": None if spec.trace else spec.seed,
        "load": None if (prep.workload.static or spec.trace) else spec.load,
        "jobs": len(prep.workload.jobs),
        "static": prep.workload.static,
        "opt_placement_limit": spec.opt_placement_limit if spec.mechanism == "opt" else None,
        "migration_matching": spec.migration_matching,
        "migration_cost_s": spec.migration_cost_s,
        "start_cost_s": spec.start_cost_s,
        "inference_servers": spec.inference_servers,
        "elastic_share": spec.elastic_share,
        "packing": spec.packing,
    }
    metrics.update(summarise(result, prep.measured))
    if prep.cpu_trace:
        # The GPU jobs' cost of sharing: the same run without the CPU-only jobs.
        alone = Simulation(scheduler, prep.cluster, _gpu_jobs(prep, spec), config).run()
        base = summarise(alone, prep.measured)
        metrics.update(cpu_job_metrics(result, prep.cpu_trace))
        metrics["gpu_avg_jct_h_without_cpu_jobs"] = base["avg_jct_h"]
        metrics["gpu_jct_slowdown"] = (metrics["avg_jct_h"] / base["avg_jct_h"]
                                       if metrics["avg_jct_h"] and base["avg_jct_h"] else None)
    metrics["wall_s"] = clock() - t0
    return RunReport(metrics, result, prep.measured)

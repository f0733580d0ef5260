"""The scheduling core's data model.

Everything here is plain data: no gRPC types, no clock, no threads. The daemon and the
simulator both translate their own records into these types, call the core, and translate
the answer back, which is what lets the simulator replay exactly what the daemon would do.
"""
from __future__ import annotations

import enum
import math
from functools import cached_property
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from synergy.common.values import value
from synergy.scheduler.profiles.format import SensitivityProfile

#: Tolerance for floating-point resource comparisons (CPUs and GB are fractional when a
#: multi-GPU job is split proportionally over servers).
EPS = 1e-6


@value
class Resources:
    """A vector along the three dimensions Synergy arbitrates."""

    gpus: float = 0.0
    cpus: float = 0.0
    mem_gb: float = 0.0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpus + other.gpus, self.cpus + other.cpus, self.mem_gb + other.mem_gb)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpus - other.gpus, self.cpus - other.cpus, self.mem_gb - other.mem_gb)

    def scale(self, k: float) -> Resources:
        return Resources(self.gpus * k, self.cpus * k, self.mem_gb * k)

    def fits_in(self, other: Resources) -> bool:
        return (
            self.gpus <= other.gpus + EPS
            and self.cpus <= other.cpus + EPS
            and self.mem_gb <= other.mem_gb + EPS
        )

    def exceeds_on_any(self, other: Resources) -> bool:
        """True when some CPU or memory component is above `other` (GPUs are fixed)."""
        return self.cpus > other.cpus + EPS or self.mem_gb > other.mem_gb + EPS


class ServerPool(str, enum.Enum):
    """Which array a server belongs to.

    Seam for Lyra (servers loaned from an inference pool and reclaimed). CPU_ONLY servers
    form CODA's CPU array with every GPU-less server: CPU-only jobs alone run there
    (arrays/cpu_array.py); the training mechanisms schedule the TRAINING pool.
    """

    TRAINING = "training"
    LOANED = "loaned"
    CPU_ONLY = "cpu_only"
    #: Back with the inference cluster (the daemon's reclaimed nodes): no training work.
    INFERENCE = "inference"


class AdminState(str, enum.Enum):
    """What an administrator set on a server (the daemon persists it; `synergy cordon`).

    READY takes new work; CORDONED keeps its running jobs where they are but takes nothing
    new; DRAINING runs nothing (its jobs are moved). The filters in `placement/filters.py`
    turn it into scheduling decisions, so the simulator can replay a cordon too.
    """

    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"


@dataclass(frozen=True)
class Server:
    id: str
    capacity: Resources
    pool: ServerPool = ServerPool.TRAINING
    admin: AdminState = AdminState.READY
    #: When the server last proved alive (the daemon: its agent's last heartbeat), on the
    #: same time axis as `RoundInput.now_s`; None = liveness not tracked (the simulator).
    last_heartbeat_s: float | None = None
    #: The GPU model (e.g. "V100", "T4"); "" = untyped (a homogeneous cluster). Jobs may
    #: restrict the types they accept (`Job.gpu_types`), profiles may carry a speed per type,
    #: and the GPU-proportional share is taken per type (heterogeneous clusters).
    gpu_type: str = ""


@dataclass(frozen=True)
class Cluster:
    servers: tuple[Server, ...]
    #: The servers whose shape defines the GPU-proportional share, when `servers` are not
    #: it: the daemon takes what profiling leases hold out of `servers`' capacities, and a
    #: node whose CPUs a profile holds must not make every job's share zero. None = `servers`.
    share_basis: tuple[Server, ...] | None = None

    @classmethod
    def homogeneous(cls, n: int, gpus: int = 8, cpus: float = 24, mem_gb: float = 500) -> Cluster:
        return cls(tuple(Server(f"s{i}", Resources(gpus, cpus, mem_gb)) for i in range(n)))

    @cached_property
    def total(self) -> Resources:
        # Cached: the core asks for it per job per round, and a Cluster never changes.
        return Resources(
            sum(s.capacity.gpus for s in self.servers),
            sum(s.capacity.cpus for s in self.servers),
            sum(s.capacity.mem_gb for s in self.servers),
        )

    def proportional_share(self, gpus: float, gpu_type: str | None = None) -> Resources:
        """GPU-proportional CPU and memory for `gpus` GPUs on this cluster.

        Derived from the cluster's shape, never baked into a profile: the same job gets
        3 CPUs/GPU on a DGX-2-like server and 6 on a server with twice the cores. On a
        heterogeneous cluster it is the smallest per-GPU share of any GPU server, so that
        every GPU can carry it: the guarantee "never slower than proportional" is then one
        that holds wherever the job lands.

        `gpu_type` takes it among that type's servers alone ("" = the untyped ones): the
        share a job landing on that type is guaranteed. None = every GPU server, as above;
        on an untyped cluster both are the same.
        """
        per = self.share_per_gpu(gpu_type)
        return Resources(gpus, per[0] * gpus, per[1] * gpus)

    def share_per_gpu(self, gpu_type: str | None = None) -> tuple[float, float]:
        """`proportional_share(1, gpu_type)`'s (CPUs, GB) without building it: the guarantee
        check asks once per job per round."""
        return self._per_gpu if gpu_type is None else self._per_gpu_by_type.get(gpu_type, (0.0, 0.0))

    @property
    def basis(self) -> tuple[Server, ...]:
        """The servers whose shape defines the GPU-proportional share."""
        return self.servers if self.share_basis is None else self.share_basis

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """The GPU types of its GPU servers, sorted ("" = untyped ones)."""
        return tuple(sorted({s.gpu_type for s in self.servers if s.capacity.gpus > 0}))

    @cached_property
    def typed(self) -> bool:
        """True when some GPU server has a type: the core then schedules per type."""
        return self.gpu_types not in ((), ("",))

    def of_type(self, gpu_type: str) -> Cluster:
        """Its GPU servers of `gpu_type`, whose proportional share is that type's."""
        return Cluster(
            tuple(s for s in self.servers if s.gpu_type == gpu_type and s.capacity.gpus > 0),
            share_basis=tuple(s for s in self.basis if s.gpu_type == gpu_type),
        )

    @cached_property
    def interchangeable(self) -> tuple[tuple[str, ...], ...]:
        """Ids of servers that can swap labels (same pool, GPU type and capacity), in
        cluster order, groups of two or more (placement/migration.py). Cached: the
        migration matching asks every round."""
        groups: dict[tuple[str, str, Resources], list[str]] = {}
        for s in self.servers:
            groups.setdefault((s.pool.value, s.gpu_type, s.capacity), []).append(s.id)
        return tuple(tuple(ids) for ids in groups.values() if len(ids) > 1)

    def gpu_type_of(self, server_id: str) -> str:
        """The GPU type of one of its servers ("" when untyped or not in it)."""
        return self._type_by_id.get(server_id, "")

    @cached_property
    def _type_by_id(self) -> dict[str, str]:
        return {s.id: s.gpu_type for s in self.servers if s.gpu_type}

    @cached_property
    def _per_gpu(self) -> tuple[float, float]:
        return _smallest_per_gpu(self.basis)

    @cached_property
    def _per_gpu_by_type(self) -> dict[str, tuple[float, float]]:
        types = {s.gpu_type for s in self.basis}
        return {t: _smallest_per_gpu([s for s in self.basis if s.gpu_type == t]) for t in types}


def _smallest_per_gpu(servers: Sequence[Server]) -> tuple[float, float]:
    """(CPUs per GPU, GB per GPU) that every GPU server of `servers` can give each GPU."""
    gpu_servers = [s.capacity for s in servers if s.capacity.gpus > 0]
    if not gpu_servers:
        return (0.0, 0.0)
    return (
        min(c.cpus / c.gpus for c in gpu_servers),
        min(c.mem_gb / c.gpus for c in gpu_servers),
    )


class JobKind(str, enum.Enum):
    """Seam for job kinds beyond fixed-size data-parallel training.

    ELASTIC (Lyra: a min/max GPU range) jobs are sized each round by `elastic/two_phase.py`.
    CPU_ONLY (CODA) jobs take no GPU: `arrays/cpu_array.py` places them in the CPU array
    (CPU servers, and CPUs borrowed from GPU servers within a limit).
    """

    TRAINING = "training"
    ELASTIC = "elastic"
    CPU_ONLY = "cpu_only"


@dataclass(slots=True)
class Job:
    """A job as the core sees it: owned and mutated only by the shell (daemon/simulator).

    The core reads jobs and never writes them, so a round is a pure function of its input.
    """

    id: int
    model: str
    gpus: int
    arrival_s: float
    iterations: float
    profile: SensitivityProfile
    done_iterations: float = 0.0
    #: Attained service in GPU-seconds (LAS orders by it).
    attained_gpu_s: float = 0.0
    kind: JobKind = JobKind.TRAINING
    #: Elastic range (Lyra); None for fixed-size jobs. An ELASTIC job runs at min_gpus plus
    #: whole workers of `gpus_per_worker`, up to max_gpus; `gpus` is the size its profile's
    #: iteration time was measured at (scheduler/elastic/scaling.py).
    min_gpus: int | None = None
    max_gpus: int | None = None
    gpus_per_worker: int = 1
    #: CPU_ONLY jobs: the CPUs and GB of host memory they ask for (training jobs: unused,
    #: their profile decides).
    cpus: float = 0.0
    mem_gb: float = 0.0
    #: Who submitted it, for DRF between users inside the CPU array (arrays/drf.py); ""
    #: makes the job its own user.
    user: str = ""
    #: May it run on servers loaned from the inference cluster (Lyra §4: reclaiming them
    #: preempts it)? None = the default rule of `loaning/eligibility.py` (elastic or short).
    loanable: bool | None = None
    #: GPU types the job accepts (`Server.gpu_type`); empty = any type.
    gpu_types: frozenset[str] = frozenset()
    #: Never share a GPU with another job (Tesserae §4.2 packing skips it): for jobs with
    #: deadlines or high priority that must not be slowed by a partner.
    no_share: bool = False

    @property
    def remaining_iterations(self) -> float:
        return max(0.0, self.iterations - self.done_iterations)


@value
class Placement:
    """The share of one job on one server."""

    server_id: str
    gpus: int
    cpus: float
    mem_gb: float

    @property
    def resources(self) -> Resources:
        return Resources(self.gpus, self.cpus, self.mem_gb)


@value
class Allocation:
    job_id: int
    placements: tuple[Placement, ...]
    #: Packing (Tesserae §4.2): this job runs on the very GPUs of that job's allocation (same
    #: servers, same GPU counts, at most two jobs per GPU), with its own CPUs and memory. Its
    #: placements' GPUs are therefore not extra demand on the servers. None = GPUs its own.
    packed_with: int | None = None

    @property
    def total(self) -> Resources:
        ps = self.placements
        if len(ps) == 1:  # most jobs: the same floats as the sum below, one object built
            p = ps[0]
            return Resources(0.0 + p.gpus, 0.0 + p.cpus, 0.0 + p.mem_gb)
        out = Resources()
        for p in ps:
            out = out + p.resources
        return out

    @property
    def held(self) -> tuple[tuple[str, Resources], ...]:
        """(server, what this allocation takes from it) per placement: what every check of
        "is a server over-committed" sums. A packed allocation takes no GPUs of its own (they
        are its host's, counted once there), only its CPUs and memory."""
        if self.packed_with is None:
            return tuple((p.server_id, p.resources) for p in self.placements)
        return tuple((p.server_id, Resources(0.0, p.cpus, p.mem_gb)) for p in self.placements)

    @property
    def per_gpu(self) -> tuple[float, float]:
        """(CPUs per GPU, GB per GPU): what the sensitivity profile is indexed by."""
        ps = self.placements
        if len(ps) == 1:  # `total`'s single-piece values, divided without building it
            p = ps[0]
            return ((0.0 + p.cpus) / p.gpus, (0.0 + p.mem_gb) / p.gpus) if p.gpus else (0.0, 0.0)
        t = self.total
        return (t.cpus / t.gpus, t.mem_gb / t.gpus) if t.gpus else (0.0, 0.0)

    @property
    def is_split(self) -> bool:
        return len(self.placements) > 1

    def with_placements(self, placements: tuple[Placement, ...]) -> Allocation:
        """This allocation on other placements, every other field kept: what
        `dataclasses.replace(self, placements=...)` gives, built directly because the
        migration matching renames hundreds of thousands per simulation and `replace` was
        a tenth of the Fig. 9 run. A new field must be passed on here too
        (tests/test_placement_speed.py checks that every field survives)."""
        return Allocation(self.job_id, placements, self.packed_with)


#: The core's value objects (synergy.common.values). A round hands the next its allocations,
#: and an allocation that did not change is last round's very object, so none is ever
#: assigned after it is built. A Fig. 9 round builds about 340 `Placement`s: as frozen
#: dataclasses they were a tenth of the simulator's work (docs/simulator.md).
VALUE_TYPES: tuple[type, ...] = (Resources, Placement, Allocation)


@dataclass(frozen=True)
class RoundInput:
    """Everything a round decision depends on. Time is passed in, never read."""

    now_s: float
    cluster: Cluster
    #: Active jobs (queued and running), in any order; the policy orders them.
    jobs: Sequence[Job]
    #: Last round's allocations, for placement plug-ins that prefer not to migrate.
    previous: Mapping[int, Allocation] = field(default_factory=dict)
    round_s: float = 300.0
    #: A server whose `last_heartbeat_s` is older than this (relative to `now_s`) gets no
    #: new work: it may be dead, and the leases of its jobs expire before it is declared lost.
    heartbeat_window_s: float = math.inf
    #: Stand-ins for jobs waiting for a profiling lease (profiles/knee.py): the policy ranks
    #: them among the queued jobs, but never ahead of a job of `previous` (core.behind_running),
    #: and TUNE packs them last. A stand-in the round places holds the room its lease takes
    #: (placement/profiling.py: `place_after_round`), never a GPU a running job holds: an
    #: arrival does not preempt running work to be profiled.
    last: frozenset[int] = frozenset()


@dataclass(frozen=True)
class RoundOutput:
    allocations: dict[int, Allocation]
    #: Why each active job without an allocation waits, in words a user can act on.
    waiting: dict[int, str] = field(default_factory=dict)
    #: Jobs that were given their GPU-proportional share instead of their best-case demand.
    reverted: frozenset[int] = frozenset()
    #: Jobs of `RoundInput.previous` this round migrates -> what the move buys, in words
    #: (placement/migration.py: why_moved); a move the round cannot name is not made.
    moves: dict[int, str] = field(default_factory=dict)

"""The profiling phase in the simulator (issue 14): the daemon's rule, replayed round by round.

A job profiled live (`ProfilingReplay.jobs`) is seen by the core only as a stand-in until its
profile is known, exactly as in synergyd (daemon/profiling.py, daemon/rounds.py):

* while it waits for room, the round sees it at its proportional share (a profile flat above
  the share, `profiles/knee.py`), ranked by the policy among the queued jobs but behind
  every running one (`RoundInput.last`: it takes no GPU a running job holds), so that the
  jobs placed leave it that room when it ranks above them, and drops its allocation; once
  the round is decided, a lease is placed in what neither the round's allocations nor the
  other leases hold, by the same core function the daemon calls
  (`placement.profiling.place_after_round`: the asks the round placed first, then the
  others in arrival order; `sub_core` where the share is below one CPU per GPU);
* under its lease it trains at the lease's allocation for `profile_s` seconds (the windows
  of its points; the points themselves lie at or below the lease, so this is the lease's
  speed, a small optimism), and the core is given the cluster less what leases hold (the
  GPU-proportional share stays the whole cluster's, `Cluster.share_basis`);
* at the first boundary after that it runs on where it was profiled (no restart): the
  lease's allocation becomes its `previous`, and from then on the core decides for it like
  for any running job, with its profile.

Pure: `profiling_round` takes the round's input and the lease state and returns the round's
allocations and the new state; the engine (engine.py) keeps the state between rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from synergy.scheduler.model import Allocation, Cluster, Job, JobKind, Resources, RoundInput, RoundOutput
from synergy.scheduler.placement.profiling import ProfilingAsk, place_after_round, sub_core
from synergy.scheduler.profiles.knee import knee_profile


@dataclass(frozen=True)
class ProfilingReplay:
    """Which jobs are profiled live, and how long a lease lasts."""

    jobs: frozenset[int]
    profile_s: float

    def __post_init__(self) -> None:
        if not self.profile_s >= 0:
            raise ValueError(f"profile_s must be a number >= 0, got {self.profile_s!r}")


@dataclass(frozen=True)
class Leases:
    """Leases under way (job id -> its allocation and when it was placed), and the jobs
    whose profiling is over."""

    under: Mapping[int, tuple[Allocation, float]]
    done: frozenset[int] = frozenset()


def at_share(jobs: Sequence[Job], cluster: Cluster) -> list[Job]:
    """`jobs` as a daemon sees a job it has no profile for: flat above the proportional
    share, at the unknown pace (profiles/knee.py; daemon/profiles.proportional_profile)."""
    share = cluster.proportional_share(1)
    return [replace(j, profile=knee_profile(j.model, j.profile.task, share.cpus, share.mem_gb)) for j in jobs]


def profiling_round(
    inp: RoundInput,
    replay: ProfilingReplay,
    leases: Leases,
    decide: Callable[[RoundInput], RoundOutput],
) -> tuple[RoundOutput, Leases]:
    """One round with the profiling phase: leases that ran `profile_s` end (the job runs on
    with the lease's allocation as its `previous`), the core (`decide`) decides for the jobs
    it may see on the cluster less the leases, and the waiting jobs get leases in what is
    left. Returns the round's allocations (the core's and the leases') and the new state."""
    t = inp.now_s
    active = {j.id: j for j in inp.jobs}
    under = {jid: v for jid, v in leases.under.items() if jid in active}
    done = set(leases.done)
    for jid, (_, since) in list(under.items()):
        if t - since >= replay.profile_s - 1e-9:
            del under[jid]
            done.add(jid)
    profiles = [j for j in inp.jobs if j.id in replay.jobs and j.id not in done and j.kind != JobKind.CPU_ONLY]
    hidden = {j.id for j in profiles}
    lease_hold = _held(alloc for alloc, _ in under.values())
    cluster = inp.cluster
    seen = Cluster(tuple(replace(s, capacity=s.capacity - lease_hold.get(s.id, Resources())) for s in cluster.servers),
                   share_basis=cluster.share_basis or cluster.servers)
    waiting = sorted((j for j in profiles if j.id not in under), key=lambda j: (j.arrival_s, j.id))
    # Jobs waiting for a lease are seen at their proportional share (the daemon's rule,
    # daemon/rounds.py), so that the round leaves them room to be profiled in.
    stand_ins = at_share(waiting, cluster)
    core_in = replace(inp, cluster=seen, jobs=[j for j in inp.jobs if j.id not in hidden] + stand_ins,
                      previous={jid: a for jid, a in inp.previous.items() if jid not in hidden},
                      last=frozenset(j.id for j in stand_ins))
    out = decide(core_in)
    granted = frozenset(j.id for j in stand_ins if j.id in out.allocations)
    out = replace(out, allocations={jid: a for jid, a in out.allocations.items() if jid not in hidden},
                  waiting={jid: why for jid, why in out.waiting.items() if jid not in hidden},
                  reverted=frozenset(out.reverted - hidden))
    held = _held([*out.allocations.values(), *(alloc for alloc, _ in under.values())])
    asks = [ProfilingAsk(j.id, j.gpus, j.gpu_types) for j in waiting]
    for jid, p in place_after_round(asks, granted, cluster, held, sub_core=sub_core(cluster)).items():
        under[jid] = (Allocation(jid, (p,)), t)
    allocations = {**out.allocations, **{jid: alloc for jid, (alloc, _) in under.items()}}
    waiting_why = {**out.waiting, **{j.id: "waiting for room to profile in" for j in waiting if j.id not in under}}
    return replace(out, allocations=allocations, waiting=waiting_why), Leases(under, frozenset(done))


def _held(allocs) -> dict[str, Resources]:
    out: dict[str, Resources] = {}
    for alloc in allocs:
        for sid, r in alloc.held:
            out[sid] = out.get(sid, Resources()) + r
    return out


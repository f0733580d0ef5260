"""Synergy-TUNE (§4.2), the mechanism Synergy runs in production.

1. The runnable set is the top jobs in policy order whose GPU demand fits; CPU and memory
   never make TUNE skip a job, so GPUs do not idle while a job that fits waits.
2. Jobs are packed largest first (GPU, then CPU, then memory demand) on the best-fit server;
   multi-GPU jobs are consolidated when possible, else split over the fewest servers with
   CPU and memory proportional to GPUs on each.
3. A job that does not fit at its best-case demand
   (1) falls back to its GPU-proportional share if its demand was above it, and
   (2a) if it still does not fit, co-located jobs holding more than their proportional
        share are switched back to proportional until it does.
Every job therefore ends with at least its GPU-proportional throughput.

CPU and memory nobody demanded (§5.3.2) are not handed out here: with `redistribute` the
core hands them out (mechanisms/leftover.py), so that packed guests and CPU-only jobs never
find them taken.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Sequence

from synergy.scheduler.mechanisms.base import pack_order, runnable_by_gpu
from synergy.scheduler.mechanisms.pack_trace import RELEASE, REVERT, TAKE, WAIT, PackMemo, PackTrace, replay
from synergy.scheduler.model import EPS, Job, Placement, RoundInput, RoundOutput
from synergy.scheduler.placement.fit import place
from synergy.scheduler.placement.scorers import Scorer, avoid_stranding, best_fit
from synergy.scheduler.state import ClusterState
from synergy.scheduler.throughput import best_case_per_gpu, proportional_per_gpu


@dataclass(frozen=True)
class Tune:
    name: str = "tune"
    order_only: ClassVar[bool] = True
    #: Only `runnable_by_gpu`'s jobs are packed (mechanisms/base.py).
    runnable_only: ClassVar[bool] = True
    scorer: Scorer = field(default=best_fit)
    #: The core gives CPU and memory nobody demanded to co-located jobs that benefit
    #: (§5.3.2; mechanisms/leftover.py). `allocate` itself never does: its answer holds
    #: demands only. False gives §4.2's packing alone.
    redistribute: bool = True
    #: Score last the servers a placement would leave with GPUs but not enough CPU or
    #: memory for the round's smallest demand (placement/scorers.py: avoid_stranding).
    avoid_stranding: bool = True
    #: Replay the steps this round's packing shares with the last one instead of searching
    #: again (mechanisms/pack_trace.py): the same result, faster. False searches every step.
    resume: bool = True
    #: The last packings (one per setting: cluster, scorer, share), for `resume`; each
    #: instance keeps its own.
    memo: PackMemo = field(default_factory=PackMemo, compare=False, repr=False)

    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        return _TuneRound(inp, self.scorer, self.memo if self.resume else None).run(ordered, self.avoid_stranding)


def pack_demands(
    inp: RoundInput, runnable: Sequence[Job], demand: dict[int, tuple[float, float]],
    scorer: Scorer = best_fit,
) -> RoundOutput:
    """TUNE's packing steps for given per-GPU demands instead of best-case ones.

    Synergy-OPT places its ideal (program 1) allocations with it: the result is its warm
    start, and its answer whenever it already is optimal for the placement program.
    """
    rnd = _TuneRound(inp, scorer)
    return rnd.output(rnd.pack(runnable, demand, {}))


class _TuneRound:
    """The state of one TUNE decision: what each placed job holds per GPU."""

    def __init__(self, inp: RoundInput, scorer: Scorer, memo: PackMemo | None = None) -> None:
        self.state = ClusterState(inp.cluster)
        self.cluster = inp.cluster
        self.scorer = scorer
        self.prop = proportional_per_gpu(inp.cluster)
        self.per_gpu: dict[int, tuple[float, float]] = {}
        self.gpus: dict[int, int] = {}
        self.reverted: set[int] = set()
        self.last = inp.last
        self.memo = memo
        #: What this packing does, step by step, when a memo keeps it for the next round.
        self.trace: PackTrace | None = None

    def run(self, ordered: Sequence[Job], stranding_aware: bool = True) -> RoundOutput:
        runnable, waiting = runnable_by_gpu(ordered, self.state.free_gpus)
        # Demand depends only on the profile and the cluster: compute it once per model.
        by_profile: dict[int, tuple[float, float]] = {}
        demand = {}
        for j in runnable:
            key = id(j.profile)
            if key not in by_profile:
                by_profile[key] = best_case_per_gpu(j, self.cluster)
            demand[j.id] = by_profile[key]
        if stranding_aware and by_profile:
            smallest = (min(c for c, _ in by_profile.values()), min(m for _, m in by_profile.values()))
            self.scorer = avoid_stranding(self.scorer, *smallest)
        return self.output(self.pack(runnable, demand, waiting))

    def pack(
        self, runnable: Sequence[Job], demand: dict[int, tuple[float, float]], waiting: dict[int, str]
    ) -> dict[int, str]:
        """Place every runnable job (steps 1 and 2(a) as needed); returns who still waits.

        With a memo, the steps the last packing began with are replayed, not searched."""
        order = pack_order(runnable, demand, self.last)
        if self.memo is None:
            for job in order:
                self._step(job, *demand[job.id], waiting)
            return waiting
        setting = (self.cluster, self.scorer, self.prop)
        steps = [(j.id, j.gpus, *demand[j.id]) for j in order]
        trace = self.trace = self.memo.resume(setting, steps)
        replay(trace.ops, self.state, self.per_gpu, self.gpus, self.reverted, waiting)
        k = len(trace.steps)
        for job, step in zip(order[k:], steps[k:]):
            self._step(job, step[2], step[3], waiting)
            trace.end_step(step)
        self.memo.keep(trace)
        return waiting

    def _step(self, job: Job, c: float, m: float, waiting: dict[int, str]) -> None:
        if not self._place(job, c, m):
            waiting[job.id] = reason = f"no placement for {job.gpus} GPUs even at the proportional share"
            if self.trace is not None:
                self.trace.ops.append((WAIT, job.id, reason))

    def output(self, waiting: dict[int, str]) -> RoundOutput:
        return RoundOutput(self.state.allocations(), waiting, frozenset(self.reverted))

    # -- the three steps -------------------------------------------------------------------
    def _place(self, job: Job, c: float, m: float) -> bool:
        found = place(self.state, job.gpus, c, m, self.scorer)
        if found is None and self._above_prop(c, m):  # step 1
            c, m = self.prop
            self._mark_reverted(job.id)
            found = place(self.state, job.gpus, c, m, self.scorer)
        if found is None:  # step 2(a): its demand is now at or below proportional
            found = self._make_room(job, c, m)
        if found is None:  # last resort: no over-allocated job left anywhere
            self._revert_everywhere()
            found = place(self.state, job.gpus, c, m, self.scorer)
        if found is None:
            return False
        self._reserve(job.id, found, (c, m), job.gpus)
        return True

    # -- every change to the round's state, recorded when traced ----------------------------
    def _reserve(self, jid: int, placements: tuple[Placement, ...], share: tuple[float, float] | None = None,
                 gpus: int = 0) -> None:
        """Reserve `placements` for `jid`, at `share` per GPU on `gpus` GPUs (None: as before)."""
        self.state.reserve(jid, placements)
        if share is not None:
            self.per_gpu[jid] = share
            self.gpus[jid] = gpus
        if self.trace is not None:
            self.trace.ops.append((TAKE, jid, placements, share, gpus))

    def _release(self, jid: int) -> tuple[Placement, ...]:
        if self.trace is not None:
            self.trace.ops.append((RELEASE, jid))
        return self.state.release(jid)

    def _mark_reverted(self, jid: int) -> None:
        self.reverted.add(jid)
        if self.trace is not None:
            self.trace.ops.append((REVERT, jid))

    def _make_room(self, job: Job, c: float, m: float) -> tuple[Placement, ...] | None:
        """Switch over-allocated co-located jobs to proportional until `job` fits.

        Servers are tried best fit on GPUs alone (ignoring CPU and memory): consolidated on
        the tightest server with enough free GPUs, else the fewest servers by free GPUs.
        """
        st = self.state
        for i in st.by_free_gpus(job.gpus):
            if self._free_on(i, job.gpus, c, m):
                return (Placement(st.ids[i], job.gpus, c * job.gpus, m * job.gpus),)
        if job.gpus == 1:
            return None
        # Reverting a split job to make room on a later server changes what it holds on the
        # earlier ones too (a job below its share on CPU and above on memory takes CPU back
        # there), so a piece found first may no longer fit: collect again until the pieces
        # found all still fit (each pass reverts jobs for good, so this ends).
        for _ in range(len(self.per_gpu) + 1):
            pieces = self._pieces(job, c, m)
            if pieces is None or all(st.fits(st.index[p.server_id], p.gpus, p.cpus, p.mem_gb) for p in pieces):
                return pieces
        return None

    def _pieces(self, job: Job, c: float, m: float) -> tuple[Placement, ...] | None:
        """A split placement for `job`, fewest servers by free GPUs, making room as it goes."""
        st = self.state
        pieces: list[Placement] = []
        need = job.gpus
        for i in list(st.by_free_gpus(1, descending=True)):
            k = int(min(st.free_g[i] + 1e-9, need))
            if k <= 0 or not self._free_on(i, k, c, m):
                continue
            pieces.append(Placement(st.ids[i], k, c * k, m * k))
            need -= k
            if need == 0:
                return tuple(pieces)
        return None

    def _free_on(self, i: int, k: int, c: float, m: float) -> bool:
        """Revert over-allocated jobs on server i, most over-allocated first, until k GPUs
        at (c, m) per GPU fit there. Returns whether they fit."""
        st = self.state
        if st.fits(i, k, c * k, m * k):
            return True
        candidates = sorted(
            (jid for jid in st.on_server[i] if self._above_prop(*self.per_gpu[jid])),
            key=lambda jid: (-self._excess(jid), jid),
        )
        for jid in candidates:
            self._revert(jid)
            if st.fits(i, k, c * k, m * k):
                return True
        return False

    def _revert(self, jid: int) -> bool:
        """Give job `jid` exactly its proportional share wherever it runs, if that fits."""
        st = self.state
        cp, mp = self.prop
        old = self._release(jid)
        new = tuple(Placement(p.server_id, p.gpus, cp * p.gpus, mp * p.gpus) for p in old)
        if all(st.fits(st.index[p.server_id], p.gpus, p.cpus, p.mem_gb) for p in new):
            self._reserve(jid, new, (cp, mp), self.gpus[jid])
            self._mark_reverted(jid)
            return True
        self._reserve(jid, old)
        return False

    def _revert_everywhere(self) -> None:
        """Switch every over-allocated job to proportional at once.

        Reverting one job at a time can deadlock: a split job below proportional on CPU but
        above on memory needs CPU back on a server whose CPU another over-allocated job holds,
        and vice versa. Released together, every job holds at most its proportional share on
        every server, which fits where the server has its whole capacity. Where part of it is
        out of the round's hands (profiling leases hold it; the share stays the cluster's,
        `Cluster.share_basis`) the share may not fit: that job keeps what it held, which
        does (nothing else holds more than before).
        """
        st = self.state
        cp, mp = self.prop
        over = [jid for jid in sorted(self.per_gpu) if self._above_prop(*self.per_gpu[jid])]
        released = {jid: self._release(jid) for jid in over}
        for jid, old in released.items():
            new = tuple(Placement(p.server_id, p.gpus, cp * p.gpus, mp * p.gpus) for p in old)
            if not all(st.fits(st.index[p.server_id], p.gpus, p.cpus, p.mem_gb) for p in new):
                self._reserve(jid, old)
                continue
            self._reserve(jid, new, (cp, mp), self.gpus[jid])
            self._mark_reverted(jid)

    def _above_prop(self, c: float, m: float) -> bool:
        return c > self.prop[0] + EPS or m > self.prop[1] + EPS

    def _excess(self, jid: int) -> float:
        """How far above its share a job is, relative to the share (absolute where the share
        is zero: a GPU server with no CPUs or memory makes the smallest share zero)."""
        c, m = self.per_gpu[jid]
        cp, mp = self.prop
        over_c, over_m = max(0.0, c - cp), max(0.0, m - mp)
        return self.gpus[jid] * ((over_c / cp if cp else over_c) + (over_m / mp if mp else over_m))

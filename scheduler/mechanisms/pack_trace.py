"""TUNE's packing resumed where the last round's stopped agreeing (issue 17, simulator speed).

TUNE packs every runnable job again each round, largest demand first (mechanisms/tune.py).
From one round to the next most of that order stays: an arrival enters it at its demand's
place, a finished job leaves it, and every job before the first difference is packed onto
the same cluster exactly as last round, step by step: a step's outcome depends only on the
cluster, the scorer, the proportional share, and what the steps before it did. Packing is
deterministic, so replaying those steps' reservations gives the very state the search would
reach, without searching: in the Fig. 9 run 36% of all placements are such steps.

`PackTrace` records one packing as it happens (each step's reservations, releases, reverts and
waits, in order); `PackMemo` keeps the last one per setting (cluster, scorer, share). The next
packing on the same setting replays the longest common prefix and searches from there on.
Nothing else is kept between rounds, and a memo that matches nothing costs a few
comparisons: results are identical either way (tests/test_tune_resume.py runs both on the
same rounds).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from synergy.scheduler.model import Placement
from synergy.scheduler.state import ClusterState

#: One step of the pack order: (job id, GPUs, CPUs per GPU, GB per GPU) demanded.
Step = tuple[int, int, float, float]

# Kinds of recorded operations.
TAKE = 0     # (TAKE, job id, placements, (c, m) per GPU or None to keep it, GPUs)
RELEASE = 1  # (RELEASE, job id)
REVERT = 2   # (REVERT, job id): the job was switched to its proportional share
WAIT = 3     # (WAIT, job id, reason)


@dataclass
class PackTrace:
    """One packing: its setting, its steps and every operation they made, in order."""

    #: What a step's outcome depends on besides the steps before it: (cluster, scorer,
    #: proportional share per GPU). Compared with ==.
    setting: tuple[Any, ...]
    steps: list[Step] = field(default_factory=list)
    #: len(ops) when each step had finished.
    marks: list[int] = field(default_factory=list)
    ops: list[tuple] = field(default_factory=list)

    def end_step(self, step: Step) -> None:
        self.steps.append(step)
        self.marks.append(len(self.ops))

    def common_prefix(self, setting: tuple[Any, ...], steps: Sequence[Step]) -> int:
        """How many of `steps` this packing began with, on the same setting."""
        if setting != self.setting:
            return 0
        k = 0
        for mine, theirs in zip(self.steps, steps):
            if mine != theirs:
                break
            k += 1
        return k

    def resumed(self, k: int) -> PackTrace:
        """A trace of this packing's first `k` steps (to be continued)."""
        end = self.marks[k - 1] if k else 0
        return PackTrace(self.setting, self.steps[:k], self.marks[:k], self.ops[:end])


def replay(ops: Sequence[tuple], state: ClusterState, per_gpu: dict[int, tuple[float, float]],
           gpus: dict[int, int], reverted: set[int], waiting: dict[int, str]) -> None:
    """Apply recorded operations to a fresh round's state, in order: the state, shares,
    reverts and waits the steps that made them left behind. Reservations are made with
    `ClusterState.hold` (they fitted when recorded, on the same setting), in runs between
    releases: the same arithmetic in the same order as `reserve`."""
    takes: list[tuple[int, tuple[Placement, ...]]] = []
    for op in ops:
        kind = op[0]
        if kind == TAKE:
            _, jid, placements, share, g = op
            takes.append((jid, placements))
            if share is not None:
                per_gpu[jid] = share
                gpus[jid] = g
        elif kind == RELEASE:
            state.hold(takes)
            takes = []
            state.release(op[1])
        elif kind == REVERT:
            reverted.add(op[1])
        else:
            waiting[op[1]] = op[2]
    state.hold(takes)


#: Packings a memo keeps, one per setting: a typed cluster packs each GPU type apart every
#: round (placement/gpu_types.py), and each type resumes from its own last packing.
KEPT = 8


@dataclass
class PackMemo:
    """The last packings of one TUNE instance (a daemon's, a simulation's), newest first, one
    per setting. The list is replaced whole after each packing, so a reader sees one list or
    the next, never half of one."""

    traces: list[PackTrace] = field(default_factory=list)

    @property
    def last(self) -> PackTrace | None:
        return self.traces[0] if self.traces else None

    def resume(self, setting: tuple[Any, ...], steps: Sequence[Step]) -> PackTrace:
        """A trace to continue: the longest prefix of `steps` a kept packing on `setting`
        began with (empty when none did)."""
        for trace in self.traces:
            k = trace.common_prefix(setting, steps)
            if k:
                return trace.resumed(k)
        return PackTrace(setting)

    def keep(self, trace: PackTrace) -> None:
        self.traces = [trace, *(t for t in self.traces if t.setting != trace.setting)][:KEPT]

    def __reduce__(self) -> tuple:
        """Pickled empty: synergyd sends its scheduler to the decider worker each round, and
        the worker keeps its own copy's memo (scheduler/daemon/decider.py)."""
        return (PackMemo, ())

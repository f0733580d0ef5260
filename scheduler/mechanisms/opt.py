"""Synergy-OPT (§4.1): the upper bound that Synergy-TUNE is measured against (§5.6).

OPT solves two integer programs per round with OR-Tools CP-SAT, and for reporting one LP
(GLOP) for the upper bound.

Program 1, the ideal allocation (§4.1.1, LP(1-5) solved as an ILP as in the paper). All CPU
and memory of the cluster sit in one super-machine. Each runnable job takes one cell (c, m)
of its sensitivity grid (constraint 4); cells are per GPU, so a g-GPU job on (c, m) takes
g*c CPUs and g*m GB, and the totals stay within the cluster's (2, 3). The objective (1) sums
the jobs' progress W, and we take W to be a job's speed *relative to its own GPU-proportional
speed*: iterations of different models are not comparable, speedups are, so the program
maximises the sum of per-job speedups. Fairness (5) then reads W >= 1; with exactly one cell
per job that is "only cells at least as fast as proportional", so slower cells are left out
instead of constrained. The job's exact proportional point is always a candidate, even
between grid points, so the program is always feasible (everyone proportional fits).
Jobs with the same profile and GPU count are interchangeable: they form one class with an
integer count per cell, so the program grows with the number of distinct (model, GPUs)
pairs, not with the number of jobs.

The upper bound. The ILP only bounds allocations on grid cells, but TUNE's leftover step
(and OPT's) hands out CPU and memory between grid points, and such allocations can beat it.
LP(1-5) itself, with fractional y, bounds every allocation: a profile is bilinear between
grid points, so any (c, m) is a convex combination of cells with the same resources and the
same speed (Theorem 4.1 then applies as stated). `ideal_solution` reports both: the ILP's
allocation and objective, and the LP's value as `upper_bound`, the number to compare TUNE
and OPT with (§5.6).

Program 2, a feasible placement (§4.1.2). The paper's second LP places the ideal allocations
minimising fragmented jobs but lets x[i, j] be fractional: a 6-GPU job may get 3.3 GPUs on
one server and 2.7 on another, which cannot be deployed (§4.1.3). We solve it in integers:
x[i, j] whole GPUs of job j on server i, its CPU and memory there proportional to
x[i, j] / g_j (the split rule of §4.2), per-server capacities, z[i, j] = "job j uses server
i", minimise sum z. An integral placement of the ideal need not exist (it is bin packing),
so each job may instead fall back to its GPU-proportional share, at the cost of the speedup
it loses: the objective is lexicographic, first that loss, then sum z. The warm starts are
greedy: TUNE's own packing run on the ideal demands (`tune.pack_demands`, best fit and
alignment), each followed by a 2-exchange repair; when one of them already keeps every ideal
and splits no more jobs than their GPU counts force, it is optimal and CP-SAT is skipped.
Jobs that did not get their ideal cell are reported in `RoundOutput.reverted` (when TUNE's
allocation wins below, its own: the jobs it switched to proportional).

The deployed allocation. TUNE's own allocation joins the candidates (the greedy placements,
program 2's answer): program 2 only chooses between a job's ideal and its proportional
share, while TUNE may settle on a third cell or between cells. Each candidate is judged as
deployed, with the CPU and memory it leaves unallocated handed out (`leftover.redistribute`,
the step the core runs for OPT as for TUNE); the candidate that places most jobs with the
largest sum of speedups wins, so the deployed OPT is never below TUNE and never above
`upper_bound`. OPT answers with the winner's demands alone: the core hands the leftovers
out so that packed guests and CPU-only jobs never find them taken.

Cost (2-core machine, 128 GPUs, 256 queued jobs). Program 1: 5-60 ms. Program 2 is the
expensive part: on 16 servers CP-SAT seldom improves on the repaired greedy within a
second, while on 2-4 servers it often finds a much better placement in milliseconds;
`placement_limit` caps it and 0 skips it (about 30 ms per round instead of about 200 ms).

GPU types (§6). On a typed cluster the core asks OPT for each runnable job's GPU type
(`choose_types`, the job x type dimension of W: mechanisms/opt_types.py), then runs the
programs above per type, on that type's servers with the job's profile on the type.

Reproducibility. CP-SAT runs on one worker with a fixed seed and *deterministic* time
limits, so the same input always gives the same allocation; the wall-clock limit is only a
safety net that a healthy round never reaches. Memos are per instance and keyed on the exact
input, so they change how fast a round is decided, never what it decides.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Hashable, Mapping, Sequence, TypeVar

from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from synergy.scheduler.mechanisms import opt_types
from synergy.scheduler.mechanisms.base import runnable_by_gpu
from synergy.scheduler.mechanisms.leftover import redistribute
from synergy.scheduler.mechanisms.tune import Tune, pack_demands
from synergy.scheduler.model import Cluster, Job, Placement, RoundInput, RoundOutput, Server
from synergy.scheduler.placement.scorers import Scorer, alignment, best_fit
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.state import ClusterState
from synergy.scheduler.throughput import proportional_per_gpu

#: Objective coefficients are speedups times this, rounded (CP-SAT needs integers).
SPEEDUP_SCALE = 10_000
#: Program units are thousandths of a CPU (of a GB) times the cluster's GPU count: then the
#: proportional share of one GPU, C/G, is a whole number whenever C is a multiple of 0.001,
#: and "everyone proportional" fits exactly. Values that are still not whole round up for
#: demands and down for capacities, so every integer solution also fits in real numbers.
_RESOLUTION = 1000
_ROUND_TOL = 1e-6

T = TypeVar("T")
#: Program 1's answer: per class, how many of its jobs take each candidate cell.
Counts = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Cell:
    """One candidate per-GPU allocation of a job class."""

    cpus: float
    mem_gb: float
    #: Speed relative to the job's GPU-proportional speed (W of program 1).
    speedup: float
    cpu_units: int
    mem_units: int
    #: round(SPEEDUP_SCALE * speedup): the objective coefficient.
    weight: int
    #: Objective lost when a job on this cell falls back to its proportional share.
    fallback_loss: int


@dataclass(frozen=True)
class IdealAllocation:
    """Program 1's answer on the super-machine (§4.1.1), for reporting."""

    #: job id -> (CPUs per GPU, GB per GPU) of the ILP, i.e. (c*_j / g_j, m*_j / g_j).
    per_gpu: dict[int, tuple[float, float]]
    #: The ILP's sum over runnable jobs of speed / GPU-proportional speed (grid cells only).
    objective: float
    #: Whether CP-SAT proved `objective` optimal.
    optimal: bool
    #: LP(1-5) itself: an upper bound on the sum of speedups of *any* allocation of these
    #: jobs, on or off the grid (see `_lp_bound`). Report TUNE and OPT against this.
    upper_bound: float


@dataclass(frozen=True)
class _Units:
    """CPU and memory in program units (see _RESOLUTION)."""

    #: GPU-proportional CPUs and GB per GPU, and the same in program units.
    cp: float
    mp: float
    prop_c: int
    prop_m: int
    scale: float

    @classmethod
    def of(cls, cluster: Cluster) -> _Units:
        cp, mp = proportional_per_gpu(cluster)
        scale = max(1.0, cluster.total.gpus) * _RESOLUTION
        return cls(cp, mp, _units_up(cp * scale), _units_up(mp * scale), scale)

    def demand(self, x: float) -> int:
        return _units_up(x * self.scale)

    def capacity(self, x: float) -> int:
        y = x * self.scale
        near = round(y)
        return near if abs(y - near) <= _ROUND_TOL * max(1.0, abs(near)) else math.floor(y)


def _units_up(y: float) -> int:
    near = round(y)
    return near if abs(y - near) <= _ROUND_TOL * max(1.0, abs(near)) else math.ceil(y)


@dataclass
class _Class:
    """Interchangeable runnable jobs: same profile, same GPU count (policy order kept)."""

    profile: SensitivityProfile
    gpus: int
    jobs: list[Job]
    #: Candidate cells, fastest (then cheapest) first.
    cells: tuple[Cell, ...]
    #: Index of a cell using no more than the proportional share: the proportional point,
    #: or the cell that dominates it. Everyone there is always feasible.
    safe: int


@dataclass(frozen=True)
class Opt:
    """Synergy-OPT: the per-round optimum of the CPU/memory split, TUNE's upper bound.

    Deterministic, and slower than TUNE by design: the paper deploys TUNE and uses OPT to
    measure how far TUNE is from optimal (§5.6).
    """

    name: str = "opt"
    #: Its memo is keyed on exactly the ordered jobs' fixed fields and the cluster.
    order_only: ClassVar[bool] = True
    #: Only `runnable_by_gpu`'s jobs are packed (mechanisms/base.py).
    runnable_only: ClassVar[bool] = True
    #: The core hands out what the deployed allocation leaves free (mechanisms/leftover.py).
    redistribute: ClassVar[bool] = True
    scorer: Scorer = field(default=best_fit)
    #: CP-SAT deterministic time limits (solver "seconds", reproducible). Program 1 is
    #: solved to optimality well within its limit at 128 GPUs. Program 2 (bin packing)
    #: seldom proves optimality on many servers: its limit trades the quality of the
    #: deployed allocation for time per round, and 0 keeps the repaired greedy placement.
    ideal_limit: float = 0.5
    placement_limit: float = 0.05
    #: Wall-clock safety net per program, far above what the deterministic limits take
    #: (about 3 s per solver second on a loaded 2-core machine), so it never decides.
    time_limit_s: float = 10.0
    seed: int = 0
    memo_size: int = 1024
    #: Per-instance memo (see the module doc); mutated in place, never part of equality.
    _memo: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False,
                               hash=False)

    # -- the Mechanism interface ---------------------------------------------------------------
    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        key = ("round", inp.cluster, tuple((j.id, j.gpus, j.profile) for j in ordered))
        out = self._memoised(key, lambda: self._allocate(ordered, inp))
        return RoundOutput(dict(out.allocations), dict(out.waiting), out.reverted)

    def choose_types(self, ordered: Sequence[Job], types: Mapping[str, Cluster],
                     greedy: Mapping[int, str]) -> dict[int, str]:
        """The job x GPU-type dimension (§6) on a typed cluster: see mechanisms/opt_types.py."""
        return opt_types.choose_types(ordered, types, greedy, lambda: self._solver(self.ideal_limit),
                                      self._memoised)

    # -- reporting ---------------------------------------------------------------------------
    def ideal(self, ordered: Sequence[Job], inp: RoundInput) -> dict[int, tuple[float, float]]:
        """Program 1's (CPUs per GPU, GB per GPU) for each runnable job."""
        return self.ideal_solution(ordered, inp).per_gpu

    def ideal_solution(self, ordered: Sequence[Job], inp: RoundInput) -> IdealAllocation:
        """Program 1's allocation and objective, and LP(1-5)'s upper bound (§5.6)."""
        runnable, _ = runnable_by_gpu(ordered, inp.cluster.total.gpus)
        units = _Units.of(inp.cluster)
        classes = self._classes(runnable, units)
        counts, objective, optimal = self._program1(classes, inp.cluster, units)
        per_gpu = {job.id: (cell.cpus, cell.mem_gb) for job, cell in _assign_cells(classes, counts)}
        key = ("lp", inp.cluster, tuple((c.profile, c.gpus, len(c.jobs)) for c in classes))
        bound = self._memoised(key, lambda: _lp_bound(classes, inp.cluster, units))
        return IdealAllocation(per_gpu, objective, optimal, max(bound, objective))

    # -- one round ---------------------------------------------------------------------------
    def _allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        cluster = inp.cluster
        runnable, waiting = runnable_by_gpu(ordered, cluster.total.gpus)
        if not runnable:
            return RoundOutput({}, waiting)
        units = _Units.of(cluster)
        classes = self._classes(runnable, units)
        counts, _, _ = self._program1(classes, cluster, units)
        ideal = {job.id: cell for job, cell in _assign_cells(classes, counts)}
        demand = {jid: (cell.cpus, cell.mem_gb) for jid, cell in ideal.items()}
        # Best fit packs tightly; alignment sends each job to the servers with most room in
        # the dimensions it needs, which packs a full cluster of small jobs far better.
        greedy = [_swap_in(pack_demands(inp, runnable, demand, scorer), runnable, ideal, cluster)
                  for scorer in (self.scorer, alignment)]
        candidates = list(greedy)
        solved = _Program2(self, cluster, units, runnable, ideal).solve(greedy)
        if solved is not None:
            candidates.append(solved)
        # TUNE too: it may settle on cells program 2 does not offer (its best case, or
        # off-grid leftovers), and OPT must never deploy less than TUNE.
        candidates.append(Tune(scorer=self.scorer, resume=False).allocate(ordered, inp))
        by_id = {j.id: j for j in runnable}
        deployed = [_topped_up(c, by_id, cluster) for c in candidates]
        best = candidates[max(range(len(candidates)), key=lambda k: _merit(deployed[k], runnable, units, k))]
        out_waiting = dict(waiting)
        for job in runnable:
            if job.id not in best.allocations:
                out_waiting[job.id] = best.waiting.get(
                    job.id, f"no placement for {job.gpus} GPUs even at the proportional share")
        return RoundOutput(best.allocations, out_waiting, best.reverted)

    # -- program 1 ---------------------------------------------------------------------------
    def _classes(self, runnable: Sequence[Job], units: _Units) -> list[_Class]:
        by_key: dict[tuple[SensitivityProfile, int], _Class] = {}
        for job in runnable:
            cls = by_key.get((job.profile, job.gpus))
            if cls is None:
                cells, safe = self._memoised(
                    ("cells", job.profile, units), lambda: _candidates(job.profile, units))
                cls = by_key[(job.profile, job.gpus)] = _Class(job.profile, job.gpus, [], cells, safe)
            cls.jobs.append(job)
        return list(by_key.values())

    def _program1(
        self, classes: list[_Class], cluster: Cluster, units: _Units
    ) -> tuple[Counts, float, bool]:
        total = cluster.total
        cap_c, cap_m = units.capacity(total.cpus), units.capacity(total.mem_gb)
        key = ("p1", units, cap_c, cap_m, tuple((c.profile, c.gpus, len(c.jobs)) for c in classes))
        return self._memoised(key, lambda: self._solve_program1(classes, cap_c, cap_m))

    def _solve_program1(
        self, classes: list[_Class], cap_c: int, cap_m: int
    ) -> tuple[Counts, float, bool]:
        # Fast path: every job on its fastest (then cheapest) cell, cells[0], fits.
        if (sum(len(c.jobs) * c.gpus * c.cells[0].cpu_units for c in classes) <= cap_c
                and sum(len(c.jobs) * c.gpus * c.cells[0].mem_units for c in classes) <= cap_m):
            counts = tuple(tuple(len(c.jobs) if t == 0 else 0 for t in range(len(c.cells))) for c in classes)
            return counts, _objective(classes, counts), True

        model = cp_model.CpModel()
        n: list[list[cp_model.IntVar]] = []
        terms: list[cp_model.IntVar] = []
        cpu_k: list[int] = []
        mem_k: list[int] = []
        obj_k: list[int] = []
        for c in classes:
            size = len(c.jobs)
            row = [model.new_int_var(0, size, "") for _ in c.cells]
            model.add(cp_model.LinearExpr.sum(row) == size)  # (4): one cell per job
            for t, (var, cell) in enumerate(zip(row, c.cells)):
                terms.append(var)
                cpu_k.append(c.gpus * cell.cpu_units)
                mem_k.append(c.gpus * cell.mem_units)
                obj_k.append(cell.weight)
                model.add_hint(var, size if t == c.safe else 0)  # a feasible start
            n.append(row)
        model.add(cp_model.LinearExpr.weighted_sum(terms, cpu_k) <= cap_c)  # (2)
        model.add(cp_model.LinearExpr.weighted_sum(terms, mem_k) <= cap_m)  # (3)
        model.maximize(cp_model.LinearExpr.weighted_sum(terms, obj_k))  # (1)
        solver = self._solver(self.ideal_limit)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # Cannot happen (the hint is feasible); say so plainly if it ever does.
            raise RuntimeError(f"Synergy-OPT program 1 found no allocation ({solver.status_name(status)})")
        counts = tuple(tuple(int(solver.value(v)) for v in row) for row in n)
        return counts, _objective(classes, counts), status == cp_model.OPTIMAL

    # -- shared helpers ----------------------------------------------------------------------
    def _solver(self, limit: float) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.num_workers = 1
        p.random_seed = self.seed
        p.max_deterministic_time = limit
        p.max_time_in_seconds = self.time_limit_s
        return solver

    def _memoised(self, key: Hashable, compute: Callable[[], T]) -> T:
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        value = compute()
        self._memo[key] = value
        if len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)
        return value


def _candidates(profile: SensitivityProfile, units: _Units) -> tuple[tuple[Cell, ...], int]:
    """Grid cells at least as fast as proportional (constraint 5), plus the proportional
    point itself, minus dominated ones (no faster than a point using no more of either)."""
    prop_speed = profile.speed(units.cp, units.mp)
    # A profile at zero speed at the proportional share is measured against its peak.
    norm = prop_speed if prop_speed > 0 else profile.saturated
    kept = _pareto([(units.cp, units.mp, prop_speed)]
                   + [(c, m, t) for c, m, t in profile.cells() if t >= prop_speed - 1e-9])
    prop_weight = round(prop_speed / norm * SPEEDUP_SCALE)
    cells = []
    for c, m, t in kept:
        weight = round(t / norm * SPEEDUP_SCALE)
        cells.append(Cell(c, m, t / norm, units.demand(c), units.demand(m), weight,
                          max(0, weight - prop_weight)))
    safe = next(i for i, cell in enumerate(cells)
                if cell.cpu_units <= units.prop_c and cell.mem_units <= units.prop_m)
    return tuple(cells), safe


def _lp_bound(classes: list[_Class], cluster: Cluster, units: _Units) -> float:
    """LP(1-5) with fractional y: an upper bound for any allocation, not only grid cells.

    A profile is bilinear between grid points, so any (c, m) inside the grid is a convex
    combination of grid cells with exactly its resources and exactly its speed; below the
    first CPU row speed falls linearly to zero, which the point (0, first column) covers;
    past the last row or column it is clamped, i.e. dominated by the boundary. Hence every
    allocation (with at least the profile's first memory column, the process memory a job
    cannot run without) is a feasible LP point, and fairness (5) holds on average. The
    proportional point is a candidate too, for clusters whose share lies below the grid.
    """
    lp = pywraplp.Solver("synergy-opt-bound", pywraplp.Solver.GLOP_LINEAR_PROGRAMMING)
    total = cluster.total
    cpu = lp.Constraint(-lp.infinity(), total.cpus)  # (2)
    mem = lp.Constraint(-lp.infinity(), total.mem_gb)  # (3)
    objective = lp.Objective()
    objective.SetMaximization()
    for c in classes:
        p = c.profile
        prop = p.speed(units.cp, units.mp)
        norm = prop if prop > 0 else p.saturated
        one_cell = lp.Constraint(len(c.jobs), len(c.jobs))  # (4), summed over the class
        fair = lp.Constraint(len(c.jobs) * prop / norm, lp.infinity())  # (5), likewise
        points = p.cells() + [(0.0, p.mem_gb_per_gpu[0], 0.0), (units.cp, units.mp, prop)]
        for cpus, mem_gb, speed in _pareto(points):
            y = lp.NumVar(0.0, lp.infinity(), "")
            cpu.SetCoefficient(y, c.gpus * cpus)
            mem.SetCoefficient(y, c.gpus * mem_gb)
            one_cell.SetCoefficient(y, 1.0)
            fair.SetCoefficient(y, speed / norm)
            objective.SetCoefficient(y, speed / norm)
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        raise RuntimeError("Synergy-OPT upper-bound LP found no optimum")
    return objective.Value()


def _pareto(points: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """Points not dominated by a faster (or as fast) point using no more of either resource."""
    kept: list[tuple[float, float, float]] = []
    for c, m, t in sorted(points, key=lambda p: (-p[2], p[0], p[1])):  # fastest, then cheapest
        if not any(kc <= c + 1e-9 and km <= m + 1e-9 for kc, km, _ in kept):
            kept.append((c, m, t))
    return kept


def _objective(classes: list[_Class], counts: Counts) -> float:
    return sum(k * cell.speedup for c, row in zip(classes, counts) for k, cell in zip(row, c.cells))


def _assign_cells(classes: list[_Class], counts: Counts) -> list[tuple[Job, Cell]]:
    """Hand a class's cells to its jobs: the fastest to the highest priority."""
    out: list[tuple[Job, Cell]] = []
    for c, row in zip(classes, counts):
        slots = [cell for cell, k in zip(c.cells, row) for _ in range(k)]  # cells: fastest first
        out.extend(zip(c.jobs, slots))
    return out


def _merit(out: RoundOutput, runnable: Sequence[Job], units: _Units, order: int) -> tuple:
    """Candidates rank by jobs placed, then sum of speedups, then fewer pieces, then order."""
    total = 0.0
    pieces = 0
    for job in runnable:
        alloc = out.allocations.get(job.id)
        if alloc is None:
            continue
        prop = job.profile.speed(units.cp, units.mp)
        total += job.profile.speed(*alloc.per_gpu) / (prop if prop > 0 else job.profile.saturated)
        pieces += len(alloc.placements)
    return len(out.allocations), round(total, 9), -pieces, -order


def _holding(out: RoundOutput, cluster: Cluster) -> ClusterState:
    state = ClusterState(cluster)
    for jid, alloc in out.allocations.items():
        state.reserve(jid, alloc.placements)
    return state


def _topped_up(out: RoundOutput, jobs: dict[int, Job], cluster: Cluster) -> RoundOutput:
    """The candidate with unallocated CPU and memory handed out, as the core will."""
    state = _holding(out, cluster)
    if not redistribute(state, jobs):
        return out
    return RoundOutput(state.allocations(), out.waiting, out.reverted)


def _swap_in(out: RoundOutput, runnable: Sequence[Job], ideal: dict[int, Cell],
             cluster: Cluster) -> RoundOutput:
    """Repair a greedy placement: a single-GPU job that fell back regains its ideal cell by
    trading servers with a single-GPU job elsewhere that keeps its own allocation (a
    2-exchange, in policy order; nobody's allocation shrinks)."""
    if not out.reverted:
        return out
    state = _holding(out, cluster)
    reverted = set(out.reverted)
    singles = [j.id for j in runnable if j.gpus == 1 and j.id in state.held]
    for x in [jid for jid in singles if jid in reverted]:
        (px,) = state.held[x]
        a = state.index[px.server_id]
        want = ideal[x]
        for y in singles:
            (py,) = state.held[y]
            b = state.index[py.server_id]
            # y takes x's GPU on a; x takes y's GPU on b, at its ideal.
            if b != a and state.fits(a, 0, py.cpus - px.cpus, py.mem_gb - px.mem_gb) and state.fits(
                    b, 0, want.cpus - py.cpus, want.mem_gb - py.mem_gb):
                state.release(x)
                state.release(y)
                state.reserve(y, (Placement(px.server_id, 1, py.cpus, py.mem_gb),))
                state.reserve(x, (Placement(py.server_id, 1, want.cpus, want.mem_gb),))
                reverted.discard(x)
                break
    return RoundOutput(state.allocations(), dict(out.waiting), frozenset(reverted))


@dataclass(frozen=True)
class _Placing:
    """A program-2 solution over interchangeable jobs, independent of job ids.

    Per single-GPU group and server: jobs there at their ideal cell, and at the proportional
    fall-back; per multi-GPU job and server: GPUs at the ideal, and at the fall-back (one of
    the two is all zero).
    """

    ideal: tuple[tuple[int, ...], ...]
    fallback: tuple[tuple[int, ...], ...]
    multi_ideal: tuple[tuple[int, ...], ...]
    multi_fallback: tuple[tuple[int, ...], ...]


class _Program2:
    """Integral placement of the ideal allocations on the servers (§4.1.2; see module doc).

    Single-GPU jobs never fragment, so those with the same profile and ideal cell form one
    group with an integer count per server; multi-GPU jobs get variables of their own.
    """

    def __init__(self, opt: Opt, cluster: Cluster, units: _Units, runnable: Sequence[Job],
                 ideal: dict[int, Cell]) -> None:
        self.opt = opt
        self.cluster = cluster
        self.units = units
        self.ideal = ideal
        self.servers: list[Server] = [s for s in cluster.servers if s.capacity.gpus >= 1]
        self.index = {s.id: i for i, s in enumerate(self.servers)}
        groups: dict[tuple[SensitivityProfile, Cell], list[Job]] = {}
        self.multis: list[Job] = []
        for job in runnable:
            if job.gpus == 1:
                groups.setdefault((job.profile, ideal[job.id]), []).append(job)
            elif job.gpus > 1:
                self.multis.append(job)
        self.groups = list(groups.items())
        self.group_of = {j.id: q for q, (_, jobs) in enumerate(self.groups) for j in jobs}

    def solve(self, greedy: Sequence[RoundOutput]) -> RoundOutput | None:
        """Program 2's placement when it beats every greedy one; None otherwise."""
        placings = [self._encode(out) for out in greedy]
        cost, first = min((self._cost(p), n) for n, p in enumerate(placings))
        hint = placings[first]
        if self.opt.placement_limit <= 0 or (cost[:2] == (0, 0) and cost[2] <= self._fewest_pieces()):
            return None  # nothing to solve, or the greedy is already optimal
        key = ("p2", self.cluster, self.units,
               tuple((profile, cell, len(jobs)) for (profile, cell), jobs in self.groups),
               tuple((j.profile, j.gpus, self.ideal[j.id]) for j in self.multis), hint)
        found = self.opt._memoised(key, lambda: self._solve(hint))
        if found is None or self._cost(found) >= cost:
            return None
        return self._decode(found)

    # -- what program 2 trades, most important first --------------------------------------------
    def _cost(self, p: _Placing) -> tuple[int, int, int]:
        """(jobs left unplaced, objective lost to fall-backs, pieces of multi-GPU jobs)."""
        unplaced = lost = pieces = 0
        for ((_, cell), jobs), a, b in zip(self.groups, p.ideal, p.fallback):
            unplaced += len(jobs) - sum(a) - sum(b)
            lost += cell.fallback_loss * sum(b)
        for job, a, b in zip(self.multis, p.multi_ideal, p.multi_fallback):
            unplaced += sum(a) + sum(b) != job.gpus
            lost += self.ideal[job.id].fallback_loss * (sum(b) > 0)
            pieces += sum(1 for x, y in zip(a, b) if x or y)
        return unplaced, lost, pieces

    def _fewest_pieces(self) -> int:
        most = max((int(s.capacity.gpus) for s in self.servers), default=0)
        return sum(math.ceil(j.gpus / most) for j in self.multis) if most else 0

    def _can_fall_back(self, cell: Cell) -> bool:
        """Falling back frees room only for a cell above proportional in some dimension."""
        return cell.cpu_units > self.units.prop_c or cell.mem_units > self.units.prop_m

    # -- between job ids and counts ----------------------------------------------------------
    def _encode(self, out: RoundOutput) -> _Placing:
        n = len(self.servers)
        a = [[0] * n for _ in self.groups]
        b = [[0] * n for _ in self.groups]
        ma = [[0] * n for _ in self.multis]
        mb = [[0] * n for _ in self.multis]
        row = {j.id: k for k, j in enumerate(self.multis)}
        for jid, alloc in out.allocations.items():
            back = jid in out.reverted
            for p in alloc.placements:
                i = self.index[p.server_id]
                if jid in row:
                    (mb if back else ma)[row[jid]][i] += p.gpus
                elif jid in self.group_of:
                    (b if back else a)[self.group_of[jid]][i] += 1

        def freeze(rows: list[list[int]]) -> tuple[tuple[int, ...], ...]:
            return tuple(tuple(r) for r in rows)

        return _Placing(freeze(a), freeze(b), freeze(ma), freeze(mb))

    def _decode(self, p: _Placing) -> RoundOutput:
        """Jobs of a group take its ideal slots in policy order, the fall-backs last."""
        u = self.units
        state = ClusterState(self.cluster)
        reverted: set[int] = set()
        ids = [s.id for s in self.servers]
        for ((_, cell), jobs), a, b in zip(self.groups, p.ideal, p.fallback):
            slots = [(i, False) for i, k in enumerate(a) for _ in range(k)]
            slots += [(i, True) for i, k in enumerate(b) for _ in range(k)]
            for job, (i, back) in zip(jobs, slots):
                c, m = (u.cp, u.mp) if back else (cell.cpus, cell.mem_gb)
                state.reserve(job.id, (Placement(ids[i], 1, c, m),))
                if back:
                    reverted.add(job.id)
        for job, a, b in zip(self.multis, p.multi_ideal, p.multi_fallback):
            back = sum(b) > 0
            cell = self.ideal[job.id]
            c, m = (u.cp, u.mp) if back else (cell.cpus, cell.mem_gb)
            state.reserve(job.id, tuple(
                Placement(ids[i], k, c * k, m * k) for i, k in enumerate(b if back else a) if k))
            if back:
                reverted.add(job.id)
        return RoundOutput(state.allocations(), {}, frozenset(reverted))

    # -- the program ---------------------------------------------------------------------------
    def _solve(self, hint: _Placing) -> _Placing | None:
        u = self.units
        model = cp_model.CpModel()
        servers = range(len(self.servers))
        gpu_cap = [int(s.capacity.gpus) for s in self.servers]
        # Per server: GPU-count variables placed there, with their per-GPU CPU and memory.
        terms: list[list[cp_model.IntVar]] = [[] for _ in servers]
        cpu_k: list[list[int]] = [[] for _ in servers]
        mem_k: list[list[int]] = [[] for _ in servers]
        penalty_t: list[cp_model.IntVar] = []
        penalty_k: list[int] = []
        z_all: list[cp_model.IntVar] = []

        def counts(hi: list[int], hinted: tuple[int, ...], c_units: int, m_units: int) -> list[cp_model.IntVar]:
            out = [model.new_int_var(0, hi[i], "") for i in servers]
            for i, (var, h) in enumerate(zip(out, hinted)):
                model.add_hint(var, h)
                terms[i].append(var)
                cpu_k[i].append(c_units)
                mem_k[i].append(m_units)
            return out

        group_vars = []
        for q, ((_, cell), jobs) in enumerate(self.groups):
            hi = [min(len(jobs), g) for g in gpu_cap]
            a = counts(hi, hint.ideal[q], cell.cpu_units, cell.mem_units)
            b = counts(hi, hint.fallback[q], u.prop_c, u.prop_m) if self._can_fall_back(cell) else []
            model.add(cp_model.LinearExpr.sum(a + b) == len(jobs))
            if b and cell.fallback_loss:
                penalty_t.extend(b)
                penalty_k.extend([cell.fallback_loss] * len(b))
            group_vars.append((a, b))

        multi_vars = []
        for k, job in enumerate(self.multis):
            cell, g = self.ideal[job.id], job.gpus
            hi = [min(g, cap) for cap in gpu_cap]
            a = counts(hi, hint.multi_ideal[k], cell.cpu_units, cell.mem_units)
            if self._can_fall_back(cell):
                b = counts(hi, hint.multi_fallback[k], u.prop_c, u.prop_m)
                back = model.new_bool_var("")
                model.add_hint(back, sum(hint.multi_fallback[k]) > 0)
                model.add(cp_model.LinearExpr.sum(a) == g - g * back)
                model.add(cp_model.LinearExpr.sum(b) == g * back)
                if cell.fallback_loss:
                    penalty_t.append(back)
                    penalty_k.append(cell.fallback_loss)
            else:
                b = []
                model.add(cp_model.LinearExpr.sum(a) == g)
            z = [model.new_bool_var("") for _ in servers]
            for i in servers:
                model.add((a[i] + b[i] if b else a[i]) <= hi[i] * z[i])
                model.add_hint(z[i], bool(hint.multi_ideal[k][i] or hint.multi_fallback[k][i]))
            z_all.extend(z)
            multi_vars.append((a, b))

        for i, s in enumerate(self.servers):
            model.add(cp_model.LinearExpr.sum(terms[i]) <= gpu_cap[i])
            model.add(cp_model.LinearExpr.weighted_sum(terms[i], cpu_k[i]) <= u.capacity(s.capacity.cpus))
            model.add(cp_model.LinearExpr.weighted_sum(terms[i], mem_k[i]) <= u.capacity(s.capacity.mem_gb))
        # Lexicographic: any objective lost to fall-backs outweighs every extra piece.
        model.minimize((len(z_all) + 1) * cp_model.LinearExpr.weighted_sum(penalty_t, penalty_k)
                       + cp_model.LinearExpr.sum(z_all))
        solver = self.opt._solver(self.opt.placement_limit)
        if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        zeros = (0,) * len(self.servers)

        def value(vs: list[cp_model.IntVar]) -> tuple[int, ...]:
            return tuple(int(solver.value(v)) for v in vs) if vs else zeros

        return _Placing(
            tuple(value(a) for a, _ in group_vars), tuple(value(b) for _, b in group_vars),
            tuple(value(a) for a, _ in multi_vars), tuple(value(b) for _, b in multi_vars),
        )

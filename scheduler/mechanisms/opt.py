"""Synergy-OPT (§4.1): the upper bound that Synergy-TUNE is measured against.

OPT solves two integer programs per round with OR-Tools CP-SAT.

Program 1 (ideal allocation, LP(1-5) solved as an ILP as in the paper). All CPU and memory of
the cluster sit in one super-machine. Each runnable job picks one cell (c, m) of its
sensitivity grid (constraint 4); a g-GPU job on cell (c, m) takes g*c CPUs and g*m GB, and
the totals stay within the cluster's (2, 3). The objective (1) is the sum of the jobs'
progress, where a job's progress W is its speed *relative to its own GPU-proportional speed*:
iterations of different models are not comparable, speedups are, so the program maximises
the sum of per-job speedups. Fairness (5) is "W >= 1"; with one cell per job it is exactly
"only cells at least as fast as proportional", so such cells are filtered out instead of
constrained. The job's exact proportional point (C_g, M_g) is always a candidate even between
grid points, so the program is always feasible. Jobs with the same profile and GPU count are
interchangeable, so they form one class with an integer count per cell: the program's size
depends on the number of distinct (model, GPUs) pairs, not on the number of jobs. Its
objective is the upper bound on the cluster's throughput (Theorem 4.1).

Program 2 (feasible allocation on the servers, §4.1.2). The paper's second LP places the
ideal allocations minimising fragmented jobs, but lets x[i, j] be fractional: a 6-GPU job may
get 3.3 GPUs on one server and 2.7 on another, an upper bound that cannot be deployed
(§4.1.3). We solve it in integers instead: x[i, j] whole GPUs of job j on server i, with CPU
and memory proportional to x[i, j] / g_j (the split rule of §4.2), per-server capacities,
and z[i, j] = "job j uses server i"; the objective minimises sum z. An integral placement of
the ideal may not exist (bin packing), so each job may also fall back to its
GPU-proportional share, at a cost of the speedup it loses; the objective is lexicographic:
first the speedup lost to fall-backs, then sum z. Jobs that fall back are reported in
`RoundOutput.reverted`. The greedy warm start is TUNE's own packing run on the ideal
demands (`tune.pack_demands`), so a job that cannot keep its ideal is handled exactly as
TUNE would handle it; when that greedy already keeps every ideal and fragments no more jobs
than the GPU counts force, it is optimal and the solver is skipped.

What the deployed allocation is worth: never less than TUNE's. Program 2 only chooses
between a job's ideal and its proportional share, so when the ideal does not pack, TUNE
(which can settle on a third cell, its best case) may do better; OPT then also runs TUNE and
keeps whichever allocation has the larger sum of speedups. `ideal_solution` exposes the
program-1 objective and its proven bound for reporting.

Reproducibility: CP-SAT runs on one worker with a fixed seed and a *deterministic* time
limit, so the same input always gives the same allocation; the wall-clock limit is only a
safety net that a healthy round never reaches. Memos are per instance and keyed on the
exact input, so they change how fast a round is decided, never what it decides.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Sequence

from ortools.sat.python import cp_model

from synergy.scheduler.mechanisms.base import runnable_by_gpu
from synergy.scheduler.mechanisms.tune import Tune, pack_demands
from synergy.scheduler.model import Cluster, Job, Placement, RoundInput, RoundOutput
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


@dataclass(frozen=True)
class Cell:
    """One candidate per-GPU allocation of a job class."""

    cpus: float
    mem_gb: float
    #: Speed relative to the job's GPU-proportional speed (W of program 1).
    speedup: float
    cpu_units: int
    mem_units: int
    #: SPEEDUP_SCALE * speedup, rounded: the objective coefficient.
    weight: int
    #: Objective lost when a job on this cell falls back to its proportional share.
    fallback_loss: int


@dataclass(frozen=True)
class IdealAllocation:
    """Program 1's answer: the super-machine optimum (§4.1.1)."""

    #: job id -> (CPUs per GPU, GB per GPU), i.e. (c*_j / g_j, m*_j / g_j).
    per_gpu: dict[int, tuple[float, float]]
    #: Sum of per-job speedups of the solution found.
    objective: float
    #: Proven upper bound on that sum (equals `objective` when `optimal`).
    bound: float
    optimal: bool


@dataclass
class _Class:
    """Interchangeable runnable jobs: same profile, same GPU count (policy order kept)."""

    profile: SensitivityProfile
    gpus: int
    jobs: list[Job]
    cells: tuple[Cell, ...]
    #: Index in `cells` of the job's proportional point, or -1 when a cell dominates it.
    prop: int


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
        return cls(cp, mp, _demand(cp * scale), _demand(mp * scale), scale)

    def cpu(self, c: float) -> int:
        return _demand(c * self.scale)

    def mem(self, m: float) -> int:
        return _demand(m * self.scale)

    def cap(self, x: float) -> int:
        near = round(x * self.scale)
        return near if abs(x * self.scale - near) <= _ROUND_TOL * max(1.0, abs(near)) else math.floor(x * self.scale)


def _demand(x: float) -> int:
    near = round(x)
    return near if abs(x - near) <= _ROUND_TOL * max(1.0, abs(near)) else math.ceil(x)


@dataclass
class Opt:
    """Synergy-OPT: optimal per-round CPU/memory split, the upper bound for TUNE (§4.1, §5.6).

    Deterministic; not meant for production rounds (the paper deploys TUNE and uses OPT to
    measure how far TUNE is from optimal).
    """

    name: str = "opt"
    scorer: Scorer = field(default=best_fit)
    #: CP-SAT deterministic time limits (solver "seconds", reproducible) for program 1 and
    #: program 2. Program 1 is solved to optimality well within its limit at 128 GPUs;
    #: program 2 (bin packing) rarely proves optimality, so its limit trades quality of the
    #: deployed allocation for time per round (0 keeps the greedy placement).
    ideal_limit: float = 1.0
    placement_limit: float = 0.1
    #: Wall-clock safety net per program (only reached on a badly overloaded machine).
    time_limit_s: float = 2.0
    seed: int = 0
    memo_size: int = 2048
    _memo: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)

    # -- the Mechanism interface -------------------------------------------------------------
    def allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        key = ("round", inp.cluster, tuple((j.id, j.gpus, j.profile) for j in ordered))
        out = self._memoised(key, lambda: self._allocate(ordered, inp))
        return RoundOutput(dict(out.allocations), dict(out.waiting), out.reverted)

    # -- reporting ---------------------------------------------------------------------------
    def ideal(self, ordered: Sequence[Job], inp: RoundInput) -> dict[int, tuple[float, float]]:
        """Program 1's per-GPU (CPUs, GB) for each runnable job."""
        return self.ideal_solution(ordered, inp).per_gpu

    def ideal_solution(self, ordered: Sequence[Job], inp: RoundInput) -> IdealAllocation:
        runnable, _ = runnable_by_gpu(ordered, inp.cluster.total.gpus)
        units = _Units.of(inp.cluster)
        classes = self._classes(runnable, units)
        counts, objective, bound, optimal = self._program1(classes, inp.cluster, units)
        per_gpu = {
            job.id: (cell.cpus, cell.mem_gb) for job, cell in _assign_cells(classes, counts)
        }
        return IdealAllocation(per_gpu, objective, bound, optimal)

    # -- one round ---------------------------------------------------------------------------
    def _allocate(self, ordered: Sequence[Job], inp: RoundInput) -> RoundOutput:
        cluster = inp.cluster
        runnable, waiting = runnable_by_gpu(ordered, cluster.total.gpus)
        if not runnable:
            return RoundOutput({}, waiting)
        units = _Units.of(cluster)
        classes = self._classes(runnable, units)
        counts, _, _, _ = self._program1(classes, cluster, units)
        ideal = {job.id: cell for job, cell in _assign_cells(classes, counts)}
        demand = {jid: (c.cpus, c.mem_gb) for jid, c in ideal.items()}
        # Two warm starts: TUNE's best fit packs tightly; alignment spreads each job toward
        # the servers with most room in the dimensions it needs, which packs a full cluster
        # of single-GPU jobs far better.
        greedy = [pack_demands(inp, runnable, demand, scorer) for scorer in (self.scorer, alignment)]
        placed = _Program2(self, cluster, units, runnable, ideal).solve(greedy)
        best = placed
        if any(ideal[jid].fallback_loss for jid in placed.reverted):
            # The ideal did not pack everywhere; TUNE may settle on better third cells.
            tuned = Tune(scorer=self.scorer).allocate(ordered, inp)
            if _total_speedup(tuned, runnable, units) > _total_speedup(placed, runnable, units) + 1e-9:
                best = tuned
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
                cells, prop = self._memoised(
                    ("cells", job.profile, units), lambda: _candidates(job.profile, units))
                cls = by_key[(job.profile, job.gpus)] = _Class(job.profile, job.gpus, [], cells, prop)
            cls.jobs.append(job)
        return list(by_key.values())

    def _program1(
        self, classes: list[_Class], cluster: Cluster, units: _Units
    ) -> tuple[list[list[int]], float, float, bool]:
        total = cluster.total
        cap_c, cap_m = units.cap(total.cpus), units.cap(total.mem_gb)
        key = ("p1", units, cap_c, cap_m, tuple((c.profile, c.gpus, len(c.jobs)) for c in classes))
        return self._memoised(key, lambda: self._solve_program1(classes, cap_c, cap_m))

    def _solve_program1(
        self, classes: list[_Class], cap_c: int, cap_m: int
    ) -> tuple[list[list[int]], float, float, bool]:
        # Fast path: every job on its fastest (then cheapest) cell already fits the super-machine.
        best = [max(range(len(c.cells)), key=lambda t, c=c: (c.cells[t].weight, -t)) for c in classes]
        use_c = sum(len(c.jobs) * c.gpus * c.cells[b].cpu_units for c, b in zip(classes, best))
        use_m = sum(len(c.jobs) * c.gpus * c.cells[b].mem_units for c, b in zip(classes, best))
        if use_c <= cap_c and use_m <= cap_m:
            counts = [[len(c.jobs) if t == b else 0 for t in range(len(c.cells))] for c, b in zip(classes, best)]
            value = _objective(classes, counts)
            return counts, value, value, True

        model = cp_model.CpModel()
        n: list[list[cp_model.IntVar]] = []
        cpu_terms, cpu_coefs, mem_terms, mem_coefs, obj_terms, obj_coefs = [], [], [], [], [], []
        for c in classes:
            size = len(c.jobs)
            row = [model.new_int_var(0, size, "") for _ in c.cells]
            model.add(cp_model.LinearExpr.sum(row) == size)  # (4)
            for var, cell in zip(row, c.cells):
                cpu_terms.append(var)
                cpu_coefs.append(c.gpus * cell.cpu_units)
                mem_terms.append(var)
                mem_coefs.append(c.gpus * cell.mem_units)
                obj_terms.append(var)
                obj_coefs.append(cell.weight)
            # Hint: everyone proportional (always feasible), or the cheapest cell.
            hint = c.prop if c.prop >= 0 else min(
                range(len(c.cells)), key=lambda t, c=c: (c.cells[t].cpu_units + c.cells[t].mem_units, t))
            for t, var in enumerate(row):
                model.add_hint(var, size if t == hint else 0)
            n.append(row)
        model.add(cp_model.LinearExpr.weighted_sum(cpu_terms, cpu_coefs) <= cap_c)  # (2)
        model.add(cp_model.LinearExpr.weighted_sum(mem_terms, mem_coefs) <= cap_m)  # (3)
        model.maximize(cp_model.LinearExpr.weighted_sum(obj_terms, obj_coefs))  # (1)
        solver = self._solver(self.ideal_limit)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise RuntimeError(f"Synergy-OPT program 1 found no allocation (CP-SAT status {solver.status_name(status)})")
        counts = [[int(solver.value(v)) for v in row] for row in n]
        value = _objective(classes, counts)
        bound = max(value, solver.best_objective_bound / SPEEDUP_SCALE)
        return counts, value, bound, status == cp_model.OPTIMAL

    # -- shared helpers ----------------------------------------------------------------------
    def _solver(self, limit: float) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.num_workers = 1
        p.random_seed = self.seed
        p.max_deterministic_time = limit
        p.max_time_in_seconds = self.time_limit_s
        return solver

    def _memoised(self, key: Hashable, compute):
        hit = self._memo.get(key)
        if hit is not None:
            self._memo.move_to_end(key)
            return hit
        value = compute()
        self._memo[key] = value
        if len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)
        return value


def _candidates(profile: SensitivityProfile, units: _Units) -> tuple[tuple[Cell, ...], int]:
    """Grid cells at least as fast as proportional (constraint 5), plus the proportional
    point itself, minus dominated ones (no faster than a cell that uses no more of either)."""
    prop_speed = profile.speed(units.cp, units.mp)
    # A profile that is at zero speed at the proportional share is measured against its peak.
    norm = prop_speed if prop_speed > 0 else profile.saturated
    raw = [(units.cp, units.mp, prop_speed)]
    raw += [(c, m, t) for c, m, t in profile.cells() if t >= prop_speed - 1e-9]
    # Fastest first, then cheapest: a point is kept unless an earlier (no slower) kept point
    # uses no more CPU and no more memory.
    raw.sort(key=lambda p: (-p[2], p[0], p[1]))
    kept: list[tuple[float, float, float]] = []
    for c, m, t in raw:
        if not any(kc <= c + 1e-9 and km <= m + 1e-9 for kc, km, _ in kept):
            kept.append((c, m, t))
    prop_weight = round(prop_speed / norm * SPEEDUP_SCALE)
    cells = tuple(
        Cell(c, m, t / norm, units.cpu(c), units.mem(m), w, max(0, w - prop_weight))
        for c, m, t in kept
        for w in (round(t / norm * SPEEDUP_SCALE),)
    )
    prop = next((i for i, (c, m, _) in enumerate(kept) if c == units.cp and m == units.mp), -1)
    return cells, prop


def _objective(classes: list[_Class], counts: list[list[int]]) -> float:
    return sum(k * cell.speedup for c, row in zip(classes, counts) for k, cell in zip(row, c.cells))


def _assign_cells(classes: list[_Class], counts: list[list[int]]) -> list[tuple[Job, Cell]]:
    """Hand a class's cells to its jobs: the fastest to the highest priority."""
    out: list[tuple[Job, Cell]] = []
    for c, row in zip(classes, counts):
        order = sorted(range(len(c.cells)), key=lambda t, c=c: (-c.cells[t].speedup, t))
        slots = [c.cells[t] for t in order for _ in range(row[t])]
        out.extend(zip(c.jobs, slots))
    return out


def _total_speedup(out: RoundOutput, runnable: Sequence[Job], units: _Units) -> float:
    total = 0.0
    for job in runnable:
        alloc = out.allocations.get(job.id)
        if alloc is None:
            continue
        prop = job.profile.speed(units.cp, units.mp)
        norm = prop if prop > 0 else job.profile.saturated
        total += job.profile.speed(*alloc.per_gpu) / norm
    return total


@dataclass(frozen=True)
class _Placing:
    """A program-2 solution over interchangeable jobs, independent of job ids.

    Per single-GPU group and server: how many jobs sit there at their ideal cell and how
    many at the proportional fall-back; per multi-GPU job: GPUs per server at the ideal and
    at the fall-back (one of the two is all zero).
    """

    ideal: tuple[tuple[int, ...], ...]
    fallback: tuple[tuple[int, ...], ...]
    multi_ideal: tuple[tuple[int, ...], ...]
    multi_fallback: tuple[tuple[int, ...], ...]


class _Program2:
    """Integral placement of the ideal allocations on the servers (§4.1.2, see module doc).

    Single-GPU jobs never fragment, so those with the same profile and ideal cell form one
    group with an integer count per server; multi-GPU jobs get variables of their own.
    """

    def __init__(self, opt: Opt, cluster: Cluster, units: _Units, runnable: Sequence[Job],
                 ideal: dict[int, Cell]) -> None:
        self.opt = opt
        self.cluster = cluster
        self.units = units
        self.ideal = ideal
        self.servers = [s for s in cluster.servers if s.capacity.gpus >= 1]
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

    # -- the three things program 2 trades, most important first ------------------------------
    def _revertable(self, cell: Cell) -> bool:
        return cell.cpu_units > self.units.prop_c or cell.mem_units > self.units.prop_m

    def _pieces_lower_bound(self) -> int:
        most = max((int(s.capacity.gpus) for s in self.servers), default=0)
        return sum(math.ceil(j.gpus / most) for j in self.multis) if most else 0

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

    # -- solving -------------------------------------------------------------------------------
    def solve(self, greedy: Sequence[RoundOutput]) -> RoundOutput:
        """The best of the greedy placements and of the program, as a round's allocations."""
        options = [(self._cost(self._encode(out)), n, out) for n, out in enumerate(greedy)]
        cost, _, best = min(options, key=lambda o: (o[0], o[1]))
        if cost[0] == 0 and cost[1] == 0 and cost[2] <= self._pieces_lower_bound():
            return best  # already optimal for program 2
        hint = self._encode(best)
        key = ("p2", self.cluster, self.units,
               tuple((profile, cell, len(jobs)) for (profile, cell), jobs in self.groups),
               tuple((j.profile, j.gpus, self.ideal[j.id]) for j in self.multis), hint)
        found = self.opt._memoised(key, lambda: self._solve(hint))
        if found is None or self._cost(found) >= cost:
            return best
        return self._decode(found)

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
        freeze = lambda rows: tuple(tuple(r) for r in rows)  # noqa: E731
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
            pieces = tuple(Placement(ids[i], k, c * k, m * k) for i, k in enumerate(b if back else a) if k)
            state.reserve(job.id, pieces)
            if back:
                reverted.add(job.id)
        return RoundOutput(state.allocations(), {}, frozenset(reverted))

    def _solve(self, hint: _Placing) -> _Placing | None:
        u = self.units
        model = cp_model.CpModel()
        servers = range(len(self.servers))
        gpu_cap = [int(s.capacity.gpus) for s in self.servers]
        # Per server: the GPU-count variables placed there, with per-GPU CPU and memory units.
        terms: list[list] = [[] for _ in servers]
        cpu_k: list[list[int]] = [[] for _ in servers]
        mem_k: list[list[int]] = [[] for _ in servers]
        penalty_t, penalty_k, z_all = [], [], []

        def on(i: int, var, c_units: int, m_units: int) -> None:
            terms[i].append(var)
            cpu_k[i].append(c_units)
            mem_k[i].append(m_units)

        def counts(hi: list[int], hint_row: tuple[int, ...]) -> list:
            out = [model.new_int_var(0, hi[i], "") for i in servers]
            for var, h in zip(out, hint_row):
                model.add_hint(var, h)
            return out

        group_vars = []
        for q, ((_, cell), jobs) in enumerate(self.groups):
            hi = [min(len(jobs), g) for g in gpu_cap]
            a = counts(hi, hint.ideal[q])
            b = counts(hi, hint.fallback[q]) if self._revertable(cell) else []
            model.add(cp_model.LinearExpr.sum(a + b) == len(jobs))
            for i in servers:
                on(i, a[i], cell.cpu_units, cell.mem_units)
                if b:
                    on(i, b[i], u.prop_c, u.prop_m)
            if b and cell.fallback_loss:
                penalty_t.extend(b)
                penalty_k.extend([cell.fallback_loss] * len(b))
            group_vars.append((a, b))

        multi_vars = []
        for k, job in enumerate(self.multis):
            cell, g = self.ideal[job.id], job.gpus
            hi = [min(g, cap) for cap in gpu_cap]
            a = counts(hi, hint.multi_ideal[k])
            z = [model.new_bool_var("") for _ in servers]
            for var, x, y in zip(z, hint.multi_ideal[k], hint.multi_fallback[k]):
                model.add_hint(var, bool(x or y))
            if self._revertable(cell):
                b = counts(hi, hint.multi_fallback[k])
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
            for i in servers:
                model.add((a[i] + b[i] if b else a[i]) <= hi[i] * z[i])
                on(i, a[i], cell.cpu_units, cell.mem_units)
                if b:
                    on(i, b[i], u.prop_c, u.prop_m)
            z_all.extend(z)
            multi_vars.append((a, b))

        for i, s in enumerate(self.servers):
            model.add(cp_model.LinearExpr.sum(terms[i]) <= gpu_cap[i])
            model.add(cp_model.LinearExpr.weighted_sum(terms[i], cpu_k[i]) <= u.cap(s.capacity.cpus))
            model.add(cp_model.LinearExpr.weighted_sum(terms[i], mem_k[i]) <= u.cap(s.capacity.mem_gb))
        # Lexicographic: any objective lost to fall-backs outweighs every extra piece.
        model.minimize((len(z_all) + 1) * cp_model.LinearExpr.weighted_sum(penalty_t, penalty_k)
                       + cp_model.LinearExpr.sum(z_all))
        solver = self.opt._solver(self.opt.placement_limit)
        if solver.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        value = lambda vs: tuple(int(solver.value(v)) for v in vs) if vs else (0,) * len(servers)  # noqa: E731
        return _Placing(
            tuple(value(a) for a, _ in group_vars), tuple(value(b) for _, b in group_vars),
            tuple(value(a) for a, _ in multi_vars), tuple(value(b) for _, b in multi_vars),
        )

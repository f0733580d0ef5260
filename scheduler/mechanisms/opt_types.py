"""Synergy-OPT's GPU-type dimension (Synergy §6, heterogeneous clusters).

§6 extends OPT's sensitivity matrix to three dimensions, W_j[t][c][m]: job j's throughput on
GPU type t with c CPUs and m GB per GPU. We solve it in two stages. This program picks each
runnable job's type; program 1 and 2 (opt.py) then run per type, on that type's servers and
with the job's profile on that type, as for a homogeneous cluster.

The type program. Jobs with the same profile, accepted types and GPU count are one class
with an integer count n[k, t] per type (so it grows with distinct classes, not jobs):

    maximise   sum_k,t  n[k, t] * W_k[t]
    subject to sum_t n[k, t] = |class k|              every runnable job gets one type
               sum_k n[k, t] * gpus_k <= GPUs of t     per-type GPU capacity
               n[k, t] = 0 unless class k accepts t

W_k[t] is the class's speed on t at its best-case cell there (no slower than t's
proportional share), relative to its speed at the proportional share of its fastest accepted
type: iterations of different models are not comparable, speedups are (as in program 1).
The runnable set is the greedy one (`gpu_types.choose_greedy`, policy order), which is a
feasible solution and the solver's hint, so the program only moves jobs between types and
never changes who runs. CP-SAT with a fixed seed and a deterministic limit: reproducible.
"""
from __future__ import annotations

from typing import Callable, Hashable, Mapping, Sequence, TypeVar

from ortools.sat.python import cp_model

from synergy.scheduler.elastic.scaling import base_gpus
from synergy.scheduler.model import Cluster, Job
from synergy.scheduler.placement.gpu_types import accepts, on_type
from synergy.scheduler.throughput import best_case_per_gpu, proportional_speed

#: Objective coefficients are round(SCALE * W).
SCALE = 10_000
T = TypeVar("T")


def type_weights(job: Job, types: Mapping[str, Cluster]) -> dict[str, float]:
    """W_j[t] for the types of `types` that `job` accepts (see the module doc)."""
    ok = [t for t in types if accepts(job, t)]
    views = {t: on_type(job, t) for t in ok}
    norm = max((proportional_speed(views[t], types[t]) for t in ok), default=0.0) or 1.0
    return {t: views[t].profile.speed(*best_case_per_gpu(views[t], types[t])) / norm for t in ok}


def choose_types(
    ordered: Sequence[Job], types: Mapping[str, Cluster], greedy: Mapping[int, str],
    solver: Callable[[], cp_model.CpSolver], memo: Callable[[Hashable, Callable[[], T]], T],
) -> dict[int, str]:
    """Job id -> GPU type for the jobs of `greedy`, maximising the sum of W_j[t]."""
    classes: dict[tuple, list[Job]] = {}
    for job in ordered:
        if job.id in greedy:
            classes.setdefault((job.profile, job.gpu_types, base_gpus(job)), []).append(job)
    names = list(types)
    if len(names) < 2:
        return dict(greedy)
    keys = list(classes)
    weights = [type_weights(classes[k][0], types) for k in keys]
    hint = [[sum(1 for j in classes[k] if greedy[j.id] == t) for t in names] for k in keys]
    memo_key = ("types", tuple((k, len(classes[k])) for k in keys),
                tuple((t, types[t].total.gpus) for t in names), tuple(map(tuple, hint)))
    counts = memo(memo_key, lambda: _solve(keys, classes, weights, names, types, hint, solver))
    if counts is None:
        return dict(greedy)
    out: dict[int, str] = {}
    for k, w, row in zip(keys, weights, counts):
        # The class's highest-priority jobs take its fastest types.
        slots = [t for t in sorted(names, key=lambda t: (-w.get(t, 0.0), t)) for _ in range(row[names.index(t)])]
        out.update({job.id: t for job, t in zip(classes[k], slots)})
    return out


def _solve(keys: list[tuple], classes: Mapping[tuple, list[Job]], weights: list[dict[str, float]],
           names: list[str], types: Mapping[str, Cluster], hint: list[list[int]],
           solver: Callable[[], cp_model.CpSolver]) -> list[list[int]] | None:
    model = cp_model.CpModel()
    n = []
    for k, w, h in zip(keys, weights, hint):
        size = len(classes[k])
        row = [model.new_int_var(0, size if t in w else 0, "") for t in names]
        for var, value in zip(row, h):
            model.add_hint(var, value)
        model.add(cp_model.LinearExpr.sum(row) == size)
        n.append(row)
    for ti, t in enumerate(names):
        model.add(cp_model.LinearExpr.weighted_sum([row[ti] for row in n], [k[2] for k in keys])
                  <= int(types[t].total.gpus + 1e-9))
    terms = [row[ti] for row in n for ti in range(len(names))]
    coeffs = [round(SCALE * w.get(t, 0.0)) for w in weights for t in names]
    model.maximize(cp_model.LinearExpr.weighted_sum(terms, coeffs))
    s = solver()
    if s.solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return [[int(s.value(v)) for v in row] for row in n]

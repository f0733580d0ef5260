"""Migration-minimising placement (Tesserae §4.1, Algorithms 2 and 3): relabel, don't move.

The mechanisms place each round from scratch, blind to where jobs ran last round. Two plans
that differ only by the names of interchangeable servers are the same plan, yet a job that
ran on `s1` and is now placed on `s0` must checkpoint, stop and restart. This step runs after
the mechanism: it renames the new plan's servers, one bijection per class of interchangeable
servers, so that as few running jobs as possible change GPUs.

Algorithm 2's cost of giving the new plan's node `b` the old plan's label `a` is the moves
in and out of `a`, each move of a job costing 0.5, amortised over the job's GPUs:

    cost(a, b) = 0.5 * sum_j |old_a[j] - new_b[j]| / gpus[j]

over the jobs `j` present in both rounds (`old_a[j]`, `new_b[j]`: j's GPUs on the node).
Algorithm 3 finds it with a GPU-level assignment inside the node pair; here no two jobs share
a GPU, so that assignment's optimum is the closed form above (a job keeps min(old, new) of its
GPUs and moves the rest), which `tests/test_migration.py` checks against the GPU-level
assignment. (A packed pair, placement/packing.py, shares GPUs; Definition 1 as we apply it
counts GPUs per server, not GPU indices, so the closed form is still the cost minimised, and
host and guest sit on the same servers, so a rename moves them together.) A job held whole
on one server in both rounds then costs 0 if it keeps its server and exactly 1 (0.5 out, 0.5 in) otherwise, so for consolidated jobs the minimum cost is the
minimum number of migrations. A split job whose pieces partly stay costs a fraction: the
matching minimises Tesserae's cost, which for split jobs can differ from the job count.

Only interchangeable servers swap labels: same pool, same GPU type and the same capacity this round (after
what jobs kept in place hold). The new plan's content of a server moves whole to a server of
equal capacity, so every allocation stays feasible, each job keeps its GPUs, CPUs and memory
per GPU, a consolidated job stays consolidated and a split job stays on as many servers.

Pure and deterministic: `scipy.optimize.linear_sum_assignment` on matrices built in the
cluster's server order; servers the matching leaves free keep their own label when they can.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from synergy.scheduler.model import Allocation, Cluster, Placement

#: (the mechanism's allocations, last round's, the servers it placed on) -> relabelled allocations.
Relabeller = Callable[[Mapping[int, Allocation], Mapping[int, Allocation], Cluster], dict[int, Allocation]]

#: Cost of one move of a whole job in or out of a node (Algorithm 3, line 7).
MOVE_COST = 0.5
#: Preference for a server keeping its own label when the matching is otherwise tied: small
#: enough (summed over every server, at most this) never to outweigh a real difference in
#: cost, whose steps are fractions 1/gpus of a job.
_KEEP_BONUS = 1e-9


def gpu_map(placements: Iterable[Placement]) -> dict[str, int]:
    """Server -> GPUs of one allocation: what decides whether a job moved."""
    out: dict[str, int] = defaultdict(int)
    for p in placements:
        out[p.server_id] += p.gpus
    return dict(out)


def migrated(old: Sequence[Placement], new: Sequence[Placement]) -> bool:
    """True when a job running on `old` must restart to run on `new`: its GPUs on some server
    changed (Tesserae's Definition 1). Placement order and CPU / memory do not count: the
    same GPUs with other CPUs or memory is a resize in place."""
    return gpu_map(old) != gpu_map(new)


def count_migrations(previous: Mapping[int, Allocation], current: Mapping[int, Allocation]) -> int:
    """Jobs placed in both rounds whose GPUs changed."""
    return sum(
        1 for jid, alloc in current.items() if jid in previous and migrated(previous[jid].placements, alloc.placements)
    )


def node_cost(old: Mapping[int, int], new: Mapping[int, int], gpus: Mapping[int, int]) -> float:
    """Algorithm 3: the cost of giving a node holding `new` (job -> GPUs) the label of one that
    held `old`, counting only jobs in `gpus` (those present in both rounds, -> their GPUs)."""
    total = 0.0
    for j in set(old) | set(new):
        if j in gpus:
            total += abs(old.get(j, 0) - new.get(j, 0)) / gpus[j]
    return MOVE_COST * total


def plan_cost(
    previous: Mapping[int, Allocation], current: Mapping[int, Allocation], servers: Iterable[str] | None = None
) -> float:
    """Algorithm 2's objective with every server keeping its label: the sum of `node_cost`
    over servers (all of them, or `servers`), jobs present in both rounds only."""
    gpus = _common_gpus(previous, current)
    old, new = _by_node(previous, gpus), _by_node(current, gpus)
    names = set(old) | set(new) if servers is None else set(servers)
    return sum(node_cost(old.get(s, {}), new.get(s, {}), gpus) for s in names)


def relabel_to_previous(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, Allocation]:
    """The mechanism's `allocations` on `cluster`, with servers renamed to migrate the fewest
    jobs placed in `previous` too (the default `Scheduler.relabel`)."""
    mapping = relabelling(allocations, previous, cluster)
    if not mapping:
        return dict(allocations)
    return {jid: _renamed(alloc, mapping) for jid, alloc in allocations.items()}


def relabelling(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[str, str]:
    """New label of each server whose label changes (empty: keep the plan as it is).

    Per class of interchangeable servers, a maximum-weight matching between the new plan's
    nodes holding jobs of both rounds and the old plan's: the weight of (b, a) is what the
    pair saves on `node_cost` against moving everything, sum_j min(old_a[j], new_b[j]) /
    gpus[j]. Since cost(a, b) = C_old(a) + C_new(b) - saving(a, b), where C is the cost of
    moving a node's jobs out (or in) entirely, and the other servers save nothing anywhere, maximising the saving over these nodes minimises
    Algorithm 2's total cost over all permutations of the class.
    """
    gpus = _common_gpus(previous, allocations)
    if not gpus:
        return {}
    old, new = _by_node(previous, gpus), _by_node(allocations, gpus)
    mapping: dict[str, str] = {}
    for members in cluster.interchangeable:
        rows = [s for s in members if s in new]  # new nodes holding common jobs
        cols = [s for s in members if s in old]  # old nodes that held them
        if not rows or not cols:
            continue
        col_of = {s: k for k, s in enumerate(cols)}
        homes: dict[int, list[tuple[int, int]]] = defaultdict(list)  # job -> [(column, old GPUs)]
        for a in cols:
            for j, o in old[a].items():
                homes[j].append((col_of[a], o))
        saving = np.zeros((len(rows), len(cols)))
        for r, b in enumerate(rows):
            for j, n in new[b].items():
                for c, o in homes.get(j, ()):
                    saving[r, c] += min(o, n) / gpus[j]
            if b in col_of:
                saving[r, col_of[b]] += _KEEP_BONUS / len(rows)
        r_idx, c_idx = linear_sum_assignment(saving, maximize=True)
        assigned = {rows[r]: cols[c] for r, c in zip(r_idx, c_idx)}
        if all(b == a for b, a in assigned.items()):
            continue
        mapping.update(_complete(members, assigned))
    return {b: a for b, a in mapping.items() if b != a}


# -- helpers ---------------------------------------------------------------------------------------


def _common_gpus(previous: Mapping[int, Allocation], current: Mapping[int, Allocation]) -> dict[int, int]:
    """Jobs placed in both rounds -> their GPUs this round (Algorithm 2, line 2: the others
    neither migrate nor count)."""
    out: dict[int, int] = {}
    for jid in sorted(current):  # one summation order, whatever order the plans come in
        alloc, prev = current[jid], previous.get(jid)
        if prev is not None and prev.placements and alloc.placements:
            pl = alloc.placements
            g = pl[0].gpus if len(pl) == 1 else sum(p.gpus for p in pl)
            if g > 0:
                out[jid] = g
    return out


def _by_node(allocations: Mapping[int, Allocation], jobs: Mapping[int, int]) -> dict[str, dict[int, int]]:
    """Server -> {job -> GPUs} for the jobs in `jobs`."""
    nodes: dict[str, dict[int, int]] = defaultdict(dict)
    for jid in jobs:
        for p in allocations[jid].placements:
            if p.gpus > 0:
                node = nodes[p.server_id]
                node[jid] = node.get(jid, 0) + p.gpus
    return nodes


def _complete(members: Sequence[str], assigned: Mapping[str, str]) -> dict[str, str]:
    """`assigned` (new node -> old label) extended to a bijection of `members`: each remaining
    server keeps its own label when it is free, else takes the first free one in order."""
    taken = set(assigned.values())
    free_rows = [s for s in members if s not in assigned]
    mapping = dict(assigned)
    rest = []
    for s in free_rows:
        if s not in taken:
            mapping[s] = s
            taken.add(s)
        else:
            rest.append(s)
    free_labels = [s for s in members if s not in taken]
    mapping.update(zip(rest, free_labels))
    return mapping


def _renamed(alloc: Allocation, mapping: Mapping[str, str]) -> Allocation:
    # Keeps `packed_with`: host and guest are renamed alike, so move together. Most jobs
    # hold one placement, and this runs for nearly every job of every round: that case first.
    placements = alloc.placements
    if len(placements) == 1:
        p = placements[0]
        to = mapping.get(p.server_id)
        return alloc if to is None else alloc.with_placements((Placement(to, p.gpus, p.cpus, p.mem_gb),))
    if not any(p.server_id in mapping for p in placements):
        return alloc
    return alloc.with_placements(
        tuple(Placement(mapping.get(p.server_id, p.server_id), p.gpus, p.cpus, p.mem_gb) for p in placements)
    )

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

Relabelling moves a node's content whole, so it cannot undo a move that only consolidates:
A and B on `s0`, C on `s1`, A ends, and best fit now puts B and C together on `s0`; no
renaming keeps both B and C where they were. `stay_put` then puts each job the plan still
moves back on the GPUs it ran on, with the plan's CPUs and memory for it, wherever they are
still free in the plan: a move must buy something the round can name, and `why_moved` names
it (the node it ran on takes no new work, its GPUs there went to other jobs, or its new
share does not fit there).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from synergy.scheduler.model import EPS, Allocation, Cluster, Placement, Resources

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
    jobs placed in `previous` too, then each job still moved put back where it ran when its
    GPUs there are free (`stay_put`): the default `Scheduler.relabel`."""
    return stay_put(relabelled(allocations, previous, cluster), previous, cluster)


def relabelled(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, Allocation]:
    """Tesserae's step alone: `allocations` with servers renamed by `relabelling`."""
    mapping = relabelling(allocations, previous, cluster)
    if not mapping:
        return dict(allocations)
    return {jid: _renamed(alloc, mapping) for jid, alloc in allocations.items()}


def stay_put(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, Allocation]:
    """`allocations` with every job that would migrate put back on the servers and GPU counts
    it had in `previous`, keeping this round's CPUs and memory per piece, wherever that can be
    made to fit on `cluster` (in job id order: the oldest first).

    Where the job's old room went to jobs that did not run there (new this round, or moving
    anyway), those are placed elsewhere in the plan, each whole on one server of its GPU type
    with what the plan gave it (a moving one back on its own old server when it fits there),
    so the plan keeps every job it placed with the same resources. Only the layout changes:
    every job's speed and every guarantee the mechanism gave it stay as they were.

    Left moving: jobs whose old servers are not in `cluster` (closed, another pool) or of
    another GPU type than the plan's, whose pieces changed shape (split <-> consolidated),
    packed pairs (they move with their host's relabelling), and jobs whose old room the plan
    needs for others.
    """
    moving = [jid for jid in sorted(allocations) if jid in previous and allocations[jid].placements
              and migrated(previous[jid].placements, allocations[jid].placements)]
    if not moving:
        return dict(allocations)
    room = _Room(dict(allocations), previous, cluster)
    for jid in moving:
        if not room.movable(jid) or not room.moving(jid):
            continue
        back = _back_home(room.plan[jid], previous[jid], cluster)
        if back is not None:
            room.try_pin(jid, back)
    return room.plan


class _Room:
    """A plan being laid out again: what it holds on each server of the cluster, and which
    single-piece jobs sit on each (the ones a pin may relocate)."""

    def __init__(self, plan: dict[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster) -> None:
        self.plan, self.previous, self.cluster = plan, previous, cluster
        self.caps = {s.id: s.capacity for s in cluster.servers}
        self.order = {sid: k for k, sid in enumerate(self.caps)}
        self.hosts = {a.packed_with for a in plan.values() if a.packed_with is not None}
        self.load = _load(plan.values(), self.caps)
        #: Servers with a GPU free: the only places a relocated piece can go (a full plan
        #: has few, and scanning every server per relocation cost most of the round).
        self.gpu_free = {sid for sid, cap in self.caps.items() if cap.gpus - self.load[sid].gpus > EPS}
        self.singles: dict[str, set[int]] = defaultdict(set)
        for jid, a in plan.items():
            if len(a.placements) == 1:
                self.singles[a.placements[0].server_id].add(jid)

    def movable(self, jid: int) -> bool:
        """Not part of a packed pair (a pair's GPUs are shared), placed on the cluster's servers."""
        a = self.plan[jid]
        return (a.packed_with is None and jid not in self.hosts and bool(a.placements)
                and all(p.server_id in self.caps for p in a.placements))

    def moving(self, jid: int) -> bool:
        prev = self.previous.get(jid)
        return prev is None or migrated(prev.placements, self.plan[jid].placements)

    def try_pin(self, jid: int, back: Allocation) -> bool:
        """Put `jid` on `back`, relocating single-piece jobs that are new or moving anyway off
        its servers as needed; all or nothing."""
        changed: dict[int, Allocation] = {jid: back}
        load = _Overlay(self.load)
        load.shift(self.plan[jid], -1)
        load.shift(back, +1)
        home = [sid for sid, _ in back.held]
        for sid in home:
            if load[sid].fits_in(self.caps[sid]):
                continue
            movers = sorted(
                (j for j in self.singles.get(sid, ()) if j != jid and j not in changed and self.movable(j)
                 and self.moving(j)),
                key=lambda j: (-self.plan[j].placements[0].gpus, j),
            )
            for j in movers:
                if load[sid].fits_in(self.caps[sid]):
                    break
                piece = self.plan[j].placements[0]
                dest = self._destination(j, piece, load, set(home))
                if dest is not None:
                    changed[j] = self.plan[j].with_placements((Placement(dest, piece.gpus, piece.cpus, piece.mem_gb),))
                    load.shift(self.plan[j], -1)
                    load.shift(changed[j], +1)
            if not load[sid].fits_in(self.caps[sid]):
                return False
        for j, alloc in changed.items():
            old = self.plan[j]
            if len(old.placements) == 1:
                self.singles[old.placements[0].server_id].discard(j)
            if len(alloc.placements) == 1:
                self.singles[alloc.placements[0].server_id].add(j)
            self.plan[j] = alloc
        self.load.update(load.changes)
        for sid in load.changes:
            if self.caps[sid].gpus - self.load[sid].gpus > EPS:
                self.gpu_free.add(sid)
            else:
                self.gpu_free.discard(sid)
        return True

    def _destination(self, jid: int, piece: Placement, load: _Overlay, avoid: set[str]) -> str | None:
        """Where a relocated piece goes: its own old server when it fits there, else best fit
        on GPUs among the servers of its GPU type outside `avoid`."""
        gpu_type = self.cluster.gpu_type_of(piece.server_id)
        prev = self.previous.get(jid)
        old = list(gpu_map(prev.placements)) if prev is not None else []
        fits = [s for s in sorted(self.gpu_free | load.changes.keys(), key=self.order.__getitem__)
                if s not in avoid and self.cluster.gpu_type_of(s) == gpu_type
                and (load[s] + piece.resources).fits_in(self.caps[s])]
        if len(old) == 1 and old[0] in fits:
            return old[0]
        if not fits:
            return None
        return min(fits, key=lambda s: (self.caps[s].gpus - load[s].gpus - piece.gpus, self.order[s]))


class _Overlay:
    """Per-server load over a base mapping, the changes kept apart until committed."""

    def __init__(self, base: Mapping[str, Resources]) -> None:
        self.base, self.changes = base, {}

    def __getitem__(self, sid: str) -> Resources:
        return self.changes.get(sid, self.base[sid])

    def shift(self, alloc: Allocation, sign: int) -> None:
        for sid, res in alloc.held:
            if sid in self.base:
                self.changes[sid] = self[sid] + res.scale(sign)


def why_moved(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, str]:
    """Job -> what its move buys, for each job of `previous` that `allocations` migrates, in
    words for its history (`cluster`: the servers the round could place on)."""
    moved = [jid for jid in sorted(allocations) if jid in previous and previous[jid].placements
             and migrated(previous[jid].placements, allocations[jid].placements)]
    if not moved:
        return {}
    caps = {s.id: s.capacity for s in cluster.servers}
    # Only the servers the moved jobs ran on matter: one pass over the plan for those.
    left = {p.server_id for jid in moved for p in previous[jid].placements}
    load = {sid: Resources() for sid in left}
    pieces: dict[str, dict[int, int]] = defaultdict(dict)  # server -> {job: GPUs there}
    for j, a in allocations.items():
        for sid, res in a.held:
            if sid in load:
                load[sid] = load[sid] + res
        for p in a.placements:
            if p.server_id in left and p.gpus > 0:
                pieces[p.server_id][j] = pieces[p.server_id].get(j, 0) + p.gpus
    on_server = {sid: list(d.items()) for sid, d in pieces.items()}
    reasons: dict[int, str] = {}
    for jid in moved:
        alloc, prev = allocations[jid], previous[jid]
        old = sorted(gpu_map(prev.placements))
        closed = [s for s in old if s not in caps]
        if closed:
            reasons[jid] = f"node {', '.join(closed)} takes no new work from it this round"
            continue
        if alloc.packed_with is not None:
            reasons[jid] = f"shares the GPUs of job {alloc.packed_with}"
            continue
        others = sorted({
            j for sid in old for j, g in on_server.get(sid, ()) if j != jid
            and (gpu_map(previous[j].placements) if j in previous else {}).get(sid, 0) < g
        })
        back = _back_home(alloc, prev, cluster)
        if back is None:
            shape = sorted(gpu_map(prev.placements).values()), sorted(p.gpus for p in alloc.placements)
            reasons[jid] = (f"its GPUs are laid out anew ({'+'.join(map(str, shape[0]))} per node before, "
                            f"{'+'.join(map(str, shape[1]))} now)" if shape[0] != shape[1]
                            else "its share was sized for another GPU type than the one it ran on")
        elif _fits_instead(load, caps, alloc, back):
            reasons[jid] = "placed afresh on another node (no relabelling this round)"
        elif others:
            reasons[jid] = f"its GPUs on {', '.join(old)} went to job {', '.join(map(str, others))}"
        else:
            free = {s: caps[s] - load.get(s, Resources()) for s in old}
            room = ", ".join(f"{s}: {max(0.0, r.cpus):g} CPUs, {max(0.0, r.mem_gb):g} GB free" for s, r in free.items())
            t = alloc.total
            reasons[jid] = f"its new share ({t.cpus:g} CPUs, {t.mem_gb:g} GB) does not fit where it ran ({room})"
    return reasons


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
        # imported here, not at the top: the CLI loads the core's registry and must not load scipy
        from scipy.optimize import linear_sum_assignment

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


def _load(allocations: Iterable[Allocation], caps: Mapping[str, Resources]) -> dict[str, Resources]:
    """Server -> what `allocations` hold on it, for the servers in `caps`."""
    load = {sid: Resources() for sid in caps}
    for alloc in allocations:
        for sid, res in alloc.held:
            if sid in load:
                load[sid] = load[sid] + res
    return load


def _shift(load: dict[str, Resources], alloc: Allocation, sign: int) -> None:
    """Add (sign +1) or take away (-1) what `alloc` holds from `load`, on the servers it has."""
    for sid, res in alloc.held:
        if sid in load:
            load[sid] = load[sid] + res.scale(sign)


def _fits_instead(load: Mapping[str, Resources], caps: Mapping[str, Resources], alloc: Allocation,
                  other: Allocation) -> bool:
    """Whether `other` fits where `alloc` is held in `load` (`alloc` taken out first)."""
    after = dict(load)
    _shift(after, alloc, -1)
    _shift(after, other, +1)
    return all(after[sid].fits_in(caps[sid]) for sid, _ in other.held)


def _back_home(alloc: Allocation, prev: Allocation, cluster: Cluster) -> Allocation | None:
    """`alloc`'s pieces laid out on `prev`'s servers, one piece per server of the same GPU
    count, in `prev`'s order (never by server name: renaming servers must change nothing),
    or None when the shapes differ or a server of `prev` is not in `cluster` or of another
    GPU type than the one `alloc` was sized for."""
    ids = {s.id for s in cluster.servers}
    old = list(gpu_map(prev.placements).items())  # first-appearance order
    if sorted(g for _, g in old) != sorted(p.gpus for p in alloc.placements):
        return None
    if any(sid not in ids for sid, _ in old):
        return None
    if {cluster.gpu_type_of(s) for s, _ in old} != {cluster.gpu_type_of(p.server_id) for p in alloc.placements}:
        return None
    left = list(alloc.placements)
    pieces = []
    for sid, g in old:
        piece = next(p for p in left if p.gpus == g)
        left.remove(piece)
        pieces.append(Placement(sid, g, piece.cpus, piece.mem_gb))
    return alloc.with_placements(tuple(pieces))


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

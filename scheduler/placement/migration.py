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
from typing import Callable, Container, Iterable, Mapping, Sequence

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
    if len(old) == 1 and len(new) == 1:  # the common case, asked ~100 times per round
        a, b = old[0], new[0]
        return a.server_id != b.server_id or a.gpus != b.gpus
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
    GPUs there are free (`stay_put`): the default `Scheduler.relabel`.

    `stay_put` reads the plan renamed rather than being handed `relabelled`'s: most jobs the
    renaming moves, it puts back on last round's very allocation, so building their renamed
    ones first (about 80 a Fig. 9 round) was work thrown away."""
    return stay_put(allocations, previous, cluster, relabelling(allocations, previous, cluster))


def relabelled(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, Allocation]:
    """Tesserae's step alone: `allocations` with servers renamed by `relabelling`."""
    mapping = relabelling(allocations, previous, cluster)
    if not mapping:
        return dict(allocations)
    return {jid: _renamed(alloc, mapping, previous.get(jid)) for jid, alloc in allocations.items()}


def stay_put(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster,
    mapping: Mapping[str, str] | None = None,
) -> dict[int, Allocation]:
    """`allocations` with every job that would migrate put back on the servers and GPU counts
    it had in `previous`, keeping this round's CPUs and memory per piece, wherever that can be
    made to fit on `cluster` (in job id order: the oldest first). With `mapping` (new label
    of a server, `relabelling`'s) it lays out `relabelled(allocations, ...)`, the same answer,
    without building a renamed allocation for a job it then puts back.

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
    room = _Room(allocations, previous, cluster, mapping or {})
    if not room.moving:
        return room.plan()
    for jid in room.moving:
        if jid not in room.free:  # not movable, or put back already by an earlier pin
            continue
        back = _home_pieces(room.pieces[jid], previous[jid], cluster, room.caps, room.typed)
        if back is not None:
            room.try_pin(jid, back)
    return room.plan()


#: One piece of a job in the room: (server, GPUs, CPUs, GB), a `Placement`'s fields.
_Piece = tuple[str, int, float, float]
#: Per-server load in the room: (GPUs, CPUs, GB), summed exactly as `Resources` sums them.
_Load = tuple[float, float, float]


class _Room:
    """A plan being laid out again: what it holds on each server of the cluster, and which
    single-piece jobs sit on each (the ones a pin may relocate).

    A Fig. 9 round pins ~80 jobs, most by a swap with a job that moved into their old room,
    so this is the core's inner loop. Loads are plain tuples summed in the order `Resources`
    sums them (every fit decides as before); where a job sits is a tuple of pieces, turned
    into an `Allocation` once at the end; the jobs that may still move are a set kept up to
    date instead of being recomputed per look. A job's GPUs, CPUs and memory per piece never
    change in the room, only servers (tests/test_placement_speed.py checks the room against
    the plain version it replaced). The plan is read through `mapping` (servers renamed by
    relabelling): pieces are renamed as they are read, allocations only at the end.
    """

    def __init__(self, plan: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster,
                 mapping: Mapping[str, str]) -> None:
        self.start, self.previous, self.cluster, self.mapping = plan, previous, cluster, mapping
        self.caps = {s.id: s.capacity for s in cluster.servers}
        #: What `Resources.fits_in` compares a load with: capacity + EPS per dimension.
        self.limit = {sid: (c.gpus + EPS, c.cpus + EPS, c.mem_gb + EPS) for sid, c in self.caps.items()}
        self.order = {sid: k for k, sid in enumerate(self.caps)}
        #: Whether any server has a GPU type (`Cluster.typed` looks at GPU servers only).
        self.typed = any(s.gpu_type for s in cluster.servers)
        hosts = {a.packed_with for a in plan.values() if a.packed_with is not None}
        load = {sid: (0.0, 0.0, 0.0) for sid in self.caps}
        #: Jobs a pin may put back or relocate: not part of a packed pair (a pair's GPUs are
        #: shared), placed on the cluster's servers, and moving (new, or off its old GPUs).
        self.free: set[int] = set()
        #: Server -> the single-piece jobs of `free` on it: the ones a pin may relocate.
        self.movable: dict[str, set[int]] = defaultdict(set)
        #: Single-piece job -> its piece's (GPUs, CPUs, GB), which never change in the room.
        self.shape: dict[int, tuple[int, float, float]] = {}
        #: Jobs of `free` -> their pieces as the renamed plan has them.
        self.pieces: dict[int, tuple[_Piece, ...]] = {}
        #: The jobs of both `plan` and `previous` that `plan` migrates, in id order.
        self.moving: list[int] = []
        #: Multi-piece jobs' renamed allocations, built as they are read (one-piece jobs are
        #: renamed piece by piece, and as allocations only in `plan`).
        self._split: dict[int, Allocation] = {}
        for jid, a in plan.items():
            prev = previous.get(jid)
            pieces = a.placements
            if mapping and len(pieces) == 1:
                p = pieces[0]
                sid = mapping.get(p.server_id, p.server_id)
                moves = prev is not None and (_moves_to(prev.placements, sid, p.gpus))
                renamed: tuple[_Piece, ...] = ((sid, p.gpus, p.cpus, p.mem_gb),)
            else:
                if mapping and pieces:
                    a = self._split[jid] = _renamed(a, mapping)
                    pieces = a.placements
                moves = prev is not None and bool(pieces) and migrated(prev.placements, pieces)
                renamed = tuple((p.server_id, p.gpus, p.cpus, p.mem_gb) for p in pieces)
            if moves:
                self.moving.append(jid)
            packed = a.packed_with is not None
            placed = bool(renamed)  # and only on the cluster's servers
            for sid, pg, pc, pm in renamed:
                if sid in load:
                    g, c, m = load[sid]
                    load[sid] = (g + (0.0 if packed else pg), c + pc, m + pm)
                else:
                    placed = False
            if placed and not packed and jid not in hosts and (moves or prev is None):
                self.free.add(jid)
                self.pieces[jid] = renamed
                if len(renamed) == 1:
                    sid, pg, pc, pm = renamed[0]
                    self.movable[sid].add(jid)
                    self.shape[jid] = (pg, pc, pm)
        self.moving.sort()
        self.load = load
        self.cap_g = {sid: cap.gpus for sid, cap in self.caps.items()}
        #: Servers with a GPU free: the only places a relocated piece can go (a full plan
        #: has few, and scanning every server per relocation cost most of the round).
        self.gpu_free = {sid for sid, g in self.cap_g.items() if g - load[sid][0] > EPS}
        #: Where the jobs the room moved sit now.
        self.at: dict[int, tuple[_Piece, ...]] = {}

    def plan(self) -> dict[int, Allocation]:
        """The plan laid out: the renamed one (`relabelled`'s, last round's very allocation
        where the renamed one equals it) with each job the room moved on its pieces (last
        round's very allocation where it is back on exactly that)."""
        start, at, mapping, previous, split = self.start, self.at, self.mapping, self.previous, self._split
        if not mapping:
            out = dict(start)
        else:  # renamed here, and only what the room did not move
            out = {jid: a if jid in at else split.get(jid) or _renamed(a, mapping, previous.get(jid))
                   for jid, a in start.items()}
        for jid, pieces in at.items():
            prev = self.previous.get(jid)
            if prev is not None and len(pieces) == 1 == len(prev.placements) and prev.packed_with is None:
                p = prev.placements[0]
                if (p.server_id, p.gpus, p.cpus, p.mem_gb) == pieces[0]:
                    out[jid] = prev
                    continue
            out[jid] = self.start[jid].with_placements(tuple(Placement(*t) for t in pieces))
        return out

    def try_pin(self, jid: int, back: tuple[_Piece, ...]) -> bool:
        """Put `jid` on `back`, relocating single-piece jobs that are new or moving anyway off
        its servers as needed; all or nothing."""
        free, base, limit, at, movable, shape = self.free, self.load, self.limit, self.at, self.movable, self.shape
        now = at.get(jid) or self.pieces[jid]
        changed: dict[int, tuple[_Piece, ...]] = {jid: back}
        #: Single-piece jobs changed -> the server they leave.
        left = {jid: now[0][0]} if len(now) == 1 else {}
        load: dict[str, _Load] = {}  # the changes, over self.load, until committed
        # Every server of a movable job and of `back` is the room's (movable, _home_pieces).
        for sid, pg, pc, pm in now:
            g, c, m = load.get(sid) or base[sid]
            load[sid] = (g - pg, c - pc, m - pm)
        for sid, pg, pc, pm in back:
            g, c, m = load.get(sid) or base[sid]
            load[sid] = (g + pg, c + pc, m + pm)
        home = [back[0][0]] if len(back) == 1 else [t[0] for t in back]
        avoid = set(home)
        for sid in home:
            lg, lc, lm = limit[sid]
            g, c, m = load[sid]
            if g <= lg and c <= lc and m <= lm:
                continue
            # Largest piece first, then the oldest job.
            movers = sorted([(-shape[j][0], j) for j in movable.get(sid, ()) if j != jid and j not in changed])
            for _, j in movers:
                pg, pc, pm = shape[j]
                dest = self._destination(j, pg, pc, pm, load, avoid)
                if dest is None:
                    continue
                changed[j] = ((dest, pg, pc, pm),)
                left[j] = sid
                g, c, m = load[sid]  # the piece sat on `sid`, which it leaves
                load[sid] = g, c, m = (g - pg, c - pc, m - pm)
                dg, dc, dm = load.get(dest) or base[dest]
                load[dest] = (dg + pg, dc + pc, dm + pm)
                if g <= lg and c <= lc and m <= lm:
                    break
            else:
                g, c, m = load[sid]
                if not (g <= lg and c <= lc and m <= lm):
                    return False
        previous = self.previous
        for j, pieces in changed.items():
            at[j] = pieces
            if j in left:
                movable[left[j]].discard(j)
            # `back` is `previous`'s GPUs server by server: never moving; a relocated one may be.
            if j != jid:
                prev = previous.get(j)
                if prev is None or _moves_to(prev.placements, pieces[0][0], pieces[0][1]):
                    free.add(j)
                    movable[pieces[0][0]].add(j)  # relocated: single-piece
                    continue
            free.discard(j)
        base.update(load)
        cap_g, gpu_free = self.cap_g, self.gpu_free
        for sid, (g, _, _) in load.items():
            if cap_g[sid] - g > EPS:
                gpu_free.add(sid)
            else:
                gpu_free.discard(sid)
        return True

    def _destination(self, jid: int, pg: int, pc: float, pm: float, load: dict[str, _Load],
                     avoid: set[str]) -> str | None:
        """Where a relocated piece (`pg` GPUs, `pc` CPUs, `pm` GB) goes: its own old server when
        it fits there, else best fit on GPUs among the servers of its GPU type outside `avoid`
        (ties: cluster order)."""
        prev = self.previous.get(jid)
        own = None  # its old server, when it ran on exactly one
        if prev is not None:
            if len(prev.placements) == 1:
                own = prev.placements[0].server_id
            else:
                old = list(gpu_map(prev.placements))
                own = old[0] if len(old) == 1 else None
        typed, cluster, base, limit, cap_g, order = (self.typed, self.cluster, self.load, self.limit, self.cap_g,
                                                     self.order)
        gpu_type = cluster.gpu_type_of(self.pieces[jid][0][0]) if typed else ""
        best, best_key = None, None
        for s in self.gpu_free | load.keys():
            if s in avoid or (typed and cluster.gpu_type_of(s) != gpu_type):
                continue
            g, c, m = load.get(s) or base[s]
            lg, lc, lm = limit[s]
            if g + pg <= lg and c + pc <= lc and m + pm <= lm:
                if s == own:
                    return s
                key = (cap_g[s] - g - pg, order[s])
                if best_key is None or key < best_key:
                    best, best_key = s, key
        return best


def _moves_to(old: Sequence[Placement], server: str, gpus: int) -> bool:
    """`migrated(old, [a piece of `gpus` GPUs on `server`])`, without building the piece."""
    if len(old) == 1:
        return old[0].server_id != server or old[0].gpus != gpus
    return gpu_map(old) != {server: gpus}


def why_moved(
    allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation], cluster: Cluster
) -> dict[int, str]:
    """Job -> what its move buys, for each job of `previous` that `allocations` migrates, in
    words for its history (`cluster`: the servers the round could place on)."""
    moved = _moved(allocations, previous)
    if not moved:
        return {}
    caps = {s.id: s.capacity for s in cluster.servers}
    # Only the servers the moved jobs ran on matter: one pass over the plan for those.
    left = {p.server_id for jid in moved for p in previous[jid].placements}
    load = {sid: Resources() for sid in left}
    pieces: dict[str, dict[int, int]] = defaultdict(dict)  # server -> {job: GPUs there}
    for j, a in allocations.items():
        for p in a.placements:
            sid = p.server_id
            if sid in left:  # what `a.held` adds there (a packed job's GPUs are its host's)
                load[sid] = load[sid] + Resources(0.0 if a.packed_with is not None else p.gpus, p.cpus, p.mem_gb)
                if p.gpus > 0:
                    pieces[sid][j] = pieces[sid].get(j, 0) + p.gpus
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
        saving = [[0.0] * len(cols) for _ in rows]  # Python floats: numpy's per-cell += is slower
        for r, b in enumerate(rows):
            row = saving[r]
            for j, n in new[b].items():
                for c, o in homes.get(j, ()):
                    row[c] += min(o, n) / gpus[j]
            if b in col_of:
                row[col_of[b]] += _KEEP_BONUS / len(rows)
        # imported here, not at the top: the CLI loads the core's registry and must not load scipy
        from scipy.optimize import linear_sum_assignment

        r_idx, c_idx = linear_sum_assignment(np.array(saving), maximize=True)
        assigned = {rows[r]: cols[c] for r, c in zip(r_idx.tolist(), c_idx.tolist())}  # Python ints: faster
        if all(b == a for b, a in assigned.items()):
            continue
        mapping.update(_complete(members, assigned))
    return {b: a for b, a in mapping.items() if b != a}


# -- helpers ---------------------------------------------------------------------------------------


def _moved(allocations: Mapping[int, Allocation], previous: Mapping[int, Allocation]) -> list[int]:
    """Jobs placed in `previous` and in `allocations` too that `allocations` migrates, in id
    order (`_Room` finds those placed in `allocations` as it reads the plan). Every round
    asks it of every job: `migrated` is written out for one-piece jobs."""
    out = []
    for jid in sorted(allocations):
        prev = previous.get(jid)
        if prev is None:
            continue
        old, new = prev.placements, allocations[jid].placements
        if not old:
            continue
        if len(old) == 1 and len(new) == 1:
            if old[0].server_id != new[0].server_id or old[0].gpus != new[0].gpus:
                out.append(jid)
        elif migrated(old, new):
            out.append(jid)
    return out


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
        placements = allocations[jid].placements
        if len(placements) == 1:  # most jobs: the job's first and only entry
            p = placements[0]
            if p.gpus > 0:
                nodes[p.server_id][jid] = p.gpus
            continue
        for p in placements:
            if p.gpus > 0:
                node = nodes[p.server_id]
                node[jid] = node.get(jid, 0) + p.gpus
    return nodes


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
    now = tuple((p.server_id, p.gpus, p.cpus, p.mem_gb) for p in alloc.placements)
    pieces = _home_pieces(now, prev, cluster, {s.id for s in cluster.servers})
    return None if pieces is None else alloc.with_placements(tuple(Placement(*t) for t in pieces))


def _home_pieces(now: tuple[_Piece, ...], prev: Allocation, cluster: Cluster, ids: Container[str],
                 typed: bool = True) -> tuple[_Piece, ...] | None:
    """`_back_home`'s pieces as (server, GPUs, CPUs, GB), for a job on pieces `now`; `ids`:
    the ids of `cluster`'s servers; `typed` False when none of them has a GPU type (no type
    can then differ)."""
    if len(prev.placements) == 1 and len(now) == 1:  # most jobs: one piece each
        was = prev.placements[0]
        sid = was.server_id
        on, gpus, cpus, mem = now[0]
        if was.gpus != gpus or sid not in ids or (typed and cluster.gpu_type_of(sid) != cluster.gpu_type_of(on)):
            return None
        return ((sid, was.gpus, cpus, mem),)
    old = list(gpu_map(prev.placements).items())  # first-appearance order
    if sorted(g for _, g in old) != sorted(t[1] for t in now):
        return None
    if any(sid not in ids for sid, _ in old):
        return None
    if {cluster.gpu_type_of(s) for s, _ in old} != {cluster.gpu_type_of(t[0]) for t in now}:
        return None
    left = list(now)
    pieces = []
    for sid, g in old:
        piece = next(t for t in left if t[1] == g)
        left.remove(piece)
        pieces.append((sid, g, piece[2], piece[3]))
    return tuple(pieces)


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


def _renamed(alloc: Allocation, mapping: Mapping[str, str], prev: Allocation | None = None) -> Allocation:
    """`alloc` with its servers renamed by `mapping`; `prev` itself (last round's allocation
    of the job) when the renamed one equals it, so that what did not change is the very
    object it was (a caller's comparison then stops at identity)."""
    # Keeps `packed_with`: host and guest are renamed alike, so move together. Most jobs
    # hold one placement, and this runs for nearly every job of every round: that case first.
    placements = alloc.placements
    if len(placements) == 1:
        p = placements[0]
        to = mapping.get(p.server_id)
        if prev is not None and len(prev.placements) == 1 and prev.packed_with == alloc.packed_with:
            q = prev.placements[0]  # the fields of Placement.__eq__, without building the renamed one
            if (q.server_id == (p.server_id if to is None else to) and q.gpus == p.gpus and q.cpus == p.cpus
                    and q.mem_gb == p.mem_gb and prev.job_id == alloc.job_id):
                return prev
        return alloc if to is None else alloc.with_placements((Placement(to, p.gpus, p.cpus, p.mem_gb),))
    if not any(p.server_id in mapping for p in placements):
        return alloc
    return alloc.with_placements(
        tuple(Placement(mapping.get(p.server_id, p.server_id), p.gpus, p.cpus, p.mem_gb) for p in placements)
    )

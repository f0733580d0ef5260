"""The simulator's speed-ups in the shared core are exact: each fast path gives the very
answer of the plain code it stands in for (docs/simulator.md, "Speed").

The end-to-end check is tests/test_simulator.py (memoised = unmemoised) and the Fig. 9
figures; these pin each replacement down on its own, on random states, so a divergence
names the function that caused it.
"""
from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from hypothesis import strategies as st

from profiles_for_tests import ZOO_LIKE
from synergy.scheduler.mechanisms import leftover
from synergy.scheduler.mechanisms.base import pack_order
from synergy.scheduler.model import Allocation, Cluster, Job, Placement, Resources, Server
from synergy.scheduler.placement import migration
from synergy.scheduler.placement.fit import consolidated
from synergy.scheduler.placement.gpu_types import on_type
from synergy.scheduler.placement.scorers import StrandingBestFit, avoid_stranding, best_fit
from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.state import INDEX_MIN_SERVERS, ClusterState

SETTINGS = settings(max_examples=150, deadline=None)

_amount = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.5, 12.0, 24.0, 62.5, 125.0])
#: Per-GPU CPUs and GB of a demand: the Fig. 9 zoo's range, so both stranding tests matter.
_cpus = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 4.5, 6.0])
_mem = st.sampled_from([0.0, 10.0, 20.0, 40.0, 62.5, 100.0])


@st.composite
def states(draw: st.DrawFn) -> tuple[ClusterState, list[tuple[int, float, float]]]:
    """A cluster of mixed server shapes (some with no CPU or memory at all), small enough
    to be scanned or large enough to be indexed, partly taken by earlier placements; and a
    few demands (GPUs, CPUs per GPU, GB per GPU) to place on it."""
    n = draw(st.sampled_from([1, 3, 16, INDEX_MIN_SERVERS + 8]))
    shapes = draw(st.lists(st.tuples(st.sampled_from([0, 4, 8]), st.sampled_from([0.0, 16.0, 24.0]),
                                     st.sampled_from([0.0, 250.0, 500.0])), min_size=1, max_size=3))
    servers = tuple(Server(f"s{i}", Resources(*shapes[i % len(shapes)])) for i in range(n))
    state = ClusterState(Cluster(servers))
    for jid in range(draw(st.integers(0, 2 * n))):
        i = draw(st.integers(0, n - 1))
        g = min(draw(st.integers(1, 4)), int(state.free_g[i]))
        c, m = min(draw(_amount), state.free_c[i]), min(draw(_amount), state.free_m[i])
        if g > 0:
            state.reserve(jid, (Placement(state.ids[i], g, c, m),))
    demands = draw(st.lists(st.tuples(st.integers(1, 8), _cpus, _mem), min_size=1, max_size=4))
    return state, demands


@SETTINGS
@given(states(), _cpus, _mem)
def test_tunes_scorer_is_avoid_stranding_over_best_fit(drawn, smallest_c: float, smallest_m: float) -> None:
    state, demands = drawn
    fast = avoid_stranding(best_fit, smallest_c, smallest_m)
    # Any scorer other than `best_fit` itself gets the general composition.
    plain = avoid_stranding(lambda *a: best_fit(*a), smallest_c, smallest_m)
    assert isinstance(fast, StrandingBestFit) and not isinstance(plain, StrandingBestFit)
    for gpus, c, m in demands:
        for i in range(len(state.ids)):
            assert fast(state, i, gpus, c * gpus, m * gpus) == plain(state, i, gpus, c * gpus, m * gpus)
        # The scorer's own search finds the server the general search finds.
        assert consolidated(state, gpus, c, m, fast) == consolidated(state, gpus, c, m, plain)


@SETTINGS
@given(states(), _cpus, _mem, st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6)), max_size=40))
def test_remembered_search_follows_reservations_and_releases(drawn, smallest_c: float, smallest_m: float,
                                                            steps) -> None:
    """`StrandingBestFit.best_on` keeps its keys between calls on one state: after any
    sequence of placements (runs of one demand, as TUNE makes them, and switches between
    demands) and releases, it finds what scoring every server finds."""
    state, demands = drawn
    fast = avoid_stranding(best_fit, smallest_c, smallest_m)
    plain = avoid_stranding(lambda *a: best_fit(*a), smallest_c, smallest_m)
    jid = 10**6
    for which, k in steps:
        if which == 0 and state.held:  # give a job's resources back
            state.release(sorted(state.held)[k % len(state.held)])
            continue
        gpus, c, m = demands[k % len(demands)]
        found = consolidated(state, gpus, c, m, fast)
        assert found == consolidated(state, gpus, c, m, plain)
        if found is not None:
            jid += 1
            state.reserve(jid, found)


def test_with_placements_keeps_every_other_field() -> None:
    # Fails when Allocation grows a field that `with_placements` does not pass on.
    values = {f.name: object() for f in fields(Allocation)}
    moved = (Placement("s9", 1, 2.0, 3.0),)
    renamed = Allocation(**values).with_placements(moved)
    assert renamed.placements is moved
    assert all(getattr(renamed, name) is v for name, v in values.items() if name != "placements")


@SETTINGS
@given(st.floats(0.0, 30.0), st.floats(0.0, 600.0), st.sampled_from(sorted(ZOO_LIKE)))
def test_speed_looked_up_by_exact_arguments_is_the_rounded_points(c: float, m: float, name: str) -> None:
    profile = ZOO_LIKE[name]
    first = profile.speed(c, m)
    assert profile.speed(c, m) == first  # the exact-key hit
    assert profile.speed(round(c, 6), round(m, 6)) == first
    fresh = type(profile)(profile.model, profile.task, profile.cpus_per_gpu, profile.mem_gb_per_gpu,
                          profile.throughput, profile.reference, profile.iter_time_s)
    assert fresh.speed(round(c, 6), round(m, 6)) == first


# -- stay_put: the room kept as tuples and sets, against the plain version it replaced ------------
def _plain_stay_put(allocations, previous, cluster):
    """`migration.stay_put` as merged with issue 14 (Resources arithmetic, every job's state
    recomputed per look), kept here as the reference the fast room must agree with."""
    moving = [j for j in sorted(allocations) if j in previous and allocations[j].placements
              and migration.migrated(previous[j].placements, allocations[j].placements)]
    plan = dict(allocations)
    if not moving:
        return plan
    caps = {s.id: s.capacity for s in cluster.servers}
    order = {sid: k for k, sid in enumerate(caps)}
    hosts = {a.packed_with for a in plan.values() if a.packed_with is not None}
    load = {sid: Resources() for sid in caps}
    for a in plan.values():
        for sid, res in a.held:
            if sid in load:
                load[sid] = load[sid] + res
    gpu_free = {sid for sid, cap in caps.items() if cap.gpus - load[sid].gpus > 1e-6}
    singles = {}
    for j, a in plan.items():
        if len(a.placements) == 1:
            singles.setdefault(a.placements[0].server_id, set()).add(j)

    def movable(j):
        a = plan[j]
        return a.packed_with is None and j not in hosts and bool(a.placements) and all(
            p.server_id in caps for p in a.placements)

    def still_moving(j):
        prev = previous.get(j)
        return prev is None or migration.migrated(prev.placements, plan[j].placements)

    def shift(over, alloc, sign):
        for sid, res in alloc.held:
            if sid in load:
                over[sid] = over.get(sid, load[sid]) + res.scale(sign)

    def at(over, sid):
        return over.get(sid, load[sid])

    def destination(j, piece, over, avoid):
        gpu_type = cluster.gpu_type_of(piece.server_id)
        prev = previous.get(j)
        old = list(migration.gpu_map(prev.placements)) if prev is not None else []
        fits = [s for s in sorted(gpu_free | over.keys(), key=order.__getitem__)
                if s not in avoid and cluster.gpu_type_of(s) == gpu_type
                and (at(over, s) + piece.resources).fits_in(caps[s])]
        if len(old) == 1 and old[0] in fits:
            return old[0]
        return min(fits, key=lambda s: (caps[s].gpus - at(over, s).gpus - piece.gpus, order[s])) if fits else None

    def try_pin(jid, back):
        changed, over = {jid: back}, {}
        shift(over, plan[jid], -1)
        shift(over, back, +1)
        home = [sid for sid, _ in back.held]
        for sid in home:
            if at(over, sid).fits_in(caps[sid]):
                continue
            movers = sorted((j for j in singles.get(sid, ()) if j != jid and j not in changed and movable(j)
                             and still_moving(j)), key=lambda j: (-plan[j].placements[0].gpus, j))
            for j in movers:
                if at(over, sid).fits_in(caps[sid]):
                    break
                piece = plan[j].placements[0]
                dest = destination(j, piece, over, set(home))
                if dest is not None:
                    changed[j] = plan[j].with_placements((Placement(dest, piece.gpus, piece.cpus, piece.mem_gb),))
                    shift(over, plan[j], -1)
                    shift(over, changed[j], +1)
            if not at(over, sid).fits_in(caps[sid]):
                return
        for j, alloc in changed.items():
            if len(plan[j].placements) == 1:
                singles[plan[j].placements[0].server_id].discard(j)
            if len(alloc.placements) == 1:
                singles.setdefault(alloc.placements[0].server_id, set()).add(j)
            plan[j] = alloc
        load.update(over)
        for sid in over:
            (gpu_free.add if caps[sid].gpus - load[sid].gpus > 1e-6 else gpu_free.discard)(sid)

    for jid in moving:
        if movable(jid) and still_moving(jid):
            back = migration._back_home(plan[jid], previous[jid], cluster)
            if back is not None:
                try_pin(jid, back)
    return plan


@st.composite
def plans(draw: st.DrawFn) -> tuple[Cluster, dict[int, Allocation], dict[int, Allocation]]:
    """A cluster (GPU types or not), last round's allocations and a plan that shuffles the
    same jobs over the servers as a repack does, with jobs new and gone, GPU counts and CPUs
    that change, a job on a server not in the cluster, a split job and a packed pair, near
    capacity: so pins, swaps, relocations and failures all happen."""
    n = draw(st.integers(2, 5))
    typed = draw(st.booleans())
    servers = tuple(Server(f"s{i}", Resources(4, draw(st.sampled_from([8.0, 12.0, 24.0])), 250.0),
                           gpu_type=("V100", "T4")[i % 2] if typed else "") for i in range(n))
    ids = [s.id for s in servers]

    def lay_out(jobs: list[int]) -> dict[int, Allocation]:
        free = {sid: 4 for sid in ids}
        out = {}
        for jid in jobs:
            g = draw(st.sampled_from([1, 1, 1, 2]))
            room = [sid for sid in ids if free[sid] >= g]
            if not room:
                break
            sid = draw(st.sampled_from(room))
            free[sid] -= g
            out[jid] = Allocation(jid, (Placement(sid, g, draw(st.sampled_from([1.0, 2.0, 3.0])) * g,
                                                  draw(st.sampled_from([20.0, 62.5])) * g),))
        return out

    old_jobs = list(range(draw(st.integers(1, 4 * n))))
    previous = lay_out(old_jobs)
    kept = [j for j in old_jobs if draw(st.integers(0, 5))]
    plan = lay_out(draw(st.permutations(kept + list(range(100, 100 + draw(st.integers(0, n)))))))
    if previous and draw(st.booleans()):  # one ran on a node that is gone
        jid = min(previous)
        previous[jid] = Allocation(jid, (Placement("gone", 1, 1.0, 20.0),))
    split = [j for j, a in plan.items() if a.placements[0].gpus == 2]
    if split and n > 1 and draw(st.booleans()):  # a split job, whose pieces pins keep
        a = plan[split[0]]
        p = a.placements[0]
        other = ids[(ids.index(p.server_id) + 1) % n]
        plan[a.job_id] = a.with_placements((Placement(p.server_id, 1, p.cpus / 2, p.mem_gb / 2),
                                            Placement(other, 1, p.cpus / 2, p.mem_gb / 2)))
    single = [j for j, a in plan.items() if len(a.placements) == 1]
    if len(single) >= 2 and draw(st.booleans()):
        host, guest = single[:2]
        plan[guest] = Allocation(guest, plan[host].placements, host)
    return Cluster(servers), previous, plan


@settings(max_examples=300, deadline=None)
@given(plans())
def test_stay_put_lays_out_exactly_as_the_plain_version(drawn) -> None:
    cluster, previous, plan = drawn
    assert migration.stay_put(plan, previous, cluster) == _plain_stay_put(plan, previous, cluster)


def test_stay_put_agrees_with_the_plain_version_over_fig9_rounds() -> None:
    """A stretch of the Fig. 9 trace (600 jobs, TUNE): every round's relabelled plan is put
    back exactly as the plain version puts it, with many pins per round."""
    from dataclasses import replace

    from synergy.scheduler.core import Scheduler
    from synergy.scheduler.simulator.engine import EngineConfig, Simulation
    from synergy.scheduler.simulator.experiment import RunSpec, build, prepare

    spec = RunSpec(policy="fifo", mechanism="tune", servers=4, load=2.5, jobs=300, measure=(0, 300), seed=1)
    prep = prepare(spec)
    pins = []

    def checked(allocations, previous, cluster):
        out = migration.relabelled(allocations, previous, cluster)
        fast = migration.stay_put(out, previous, cluster)
        assert fast == _plain_stay_put(out, previous, cluster)
        _assert_same_objects(migration.relabel_to_previous(allocations, previous, cluster), fast, previous)
        pins.append(migration.count_migrations(previous, out) - migration.count_migrations(previous, fast))
        return fast

    base = build(spec)
    sched = replace(Scheduler(base.policy, base.mechanism), relabel=checked)
    Simulation(sched, prep.cluster, prep.workload.to_jobs(prep.profile_set.profiles),
               EngineConfig(spec.round_s, spec.max_time_h * 3600, prep.measured)).run()
    assert sum(pins) > 100  # the room did real work: moves undone


def _assert_same_objects(fast: dict[int, Allocation], plain: dict[int, Allocation],
                         previous: dict[int, Allocation]) -> None:
    """The same plan, in the same order, with last round's very allocation in the same places."""
    assert fast == plain and list(fast) == list(plain)
    assert [fast[j] is previous.get(j) for j in fast] == [plain[j] is previous.get(j) for j in plain]


@settings(max_examples=300, deadline=None)
@given(plans())
def test_stay_put_reads_the_plan_renamed_as_it_lays_out_the_relabelled_one(drawn) -> None:
    """`stay_put` given the relabelling's mapping renames as it reads (no renamed allocation
    built for a job it puts back): the plan `stay_put(relabelled(...))` gives, with last
    round's allocations reused where that one reuses them."""
    cluster, previous, plan = drawn
    mapping = migration.relabelling(plan, previous, cluster)
    two_steps = migration.stay_put(migration.relabelled(plan, previous, cluster), previous, cluster)
    _assert_same_objects(migration.stay_put(plan, previous, cluster, mapping), two_steps, previous)
    _assert_same_objects(migration.relabel_to_previous(plan, previous, cluster), two_steps, previous)


@SETTINGS
@given(states(), st.lists(st.integers(0, 10**6), max_size=6))
def test_candidates_hold_every_server_a_search_can_choose(drawn, releases) -> None:
    """`ClusterState.candidates` on a small cluster after reservations and releases: in
    index order, and every server with room for the GPUs asked is among them (the list of
    servers with a GPU free is kept up to date, so a search never misses one). Large
    clusters give one server per shape (`representatives`, checked above)."""
    state, demands = drawn
    if len(state.ids) > INDEX_MIN_SERVERS:
        return
    held = sorted(state.held)
    for k in releases:  # give some back, then take one again elsewhere
        if held:
            jid = held.pop(k % len(held))
            placements = state.release(jid)
            if k % 3 == 0:
                state.reserve(jid, placements)
    for gpus, _, _ in demands + [(1, 0.0, 0.0)]:
        found = list(state.candidates(gpus))
        assert found == sorted(set(found))
        assert {i for i in range(len(state.ids)) if state.fits(i, gpus, 0.0, 0.0)} <= set(found)


@settings(max_examples=200, deadline=None)
@given(plans())
def test_relabelled_renames_as_the_plain_rename_and_reuses_last_rounds_equal_allocations(drawn) -> None:
    """`relabelled` hands back last round's very allocation where the renamed one equals it
    (so the engine's comparison stops at identity), and is otherwise the plain renaming."""
    cluster, previous, plan = drawn
    mapping = migration.relabelling(plan, previous, cluster)
    plain = {jid: a.with_placements(tuple(Placement(mapping.get(p.server_id, p.server_id), p.gpus, p.cpus, p.mem_gb)
                                          for p in a.placements)) for jid, a in plan.items()}
    fast = migration.relabelled(plan, previous, cluster)
    assert fast == plain
    if mapping:
        for jid, a in fast.items():
            one_piece = len(a.placements) == 1
            assert (a is previous.get(jid)) == (one_piece and previous.get(jid) == plain[jid])


def _plain_hand_out(allocations, jobs, cluster, others=(), previous=None):
    """`hand_out` as it was: the plan held on a ClusterState, then `redistribute` on it."""
    state = ClusterState(cluster)
    hosts = {a.packed_with for a in allocations.values() if a.packed_with is not None}
    eligible, plan = {}, []
    for jid in sorted(allocations):
        alloc = allocations[jid]
        pieces = alloc.placements
        if alloc.packed_with is not None or not all(p.server_id in state.index for p in pieces):
            pieces = tuple(Placement(p.server_id, 0 if alloc.packed_with is not None else p.gpus, p.cpus, p.mem_gb)
                           for p in pieces if p.server_id in state.index)
            if not pieces:
                continue
        plan.append((jid, pieces))
        job = jobs.get(jid)
        if (job is not None and len(pieces) == 1 == len(alloc.placements) and pieces[0].gpus > 0
                and alloc.packed_with is None and jid not in hosts):
            eligible[jid] = on_type(job, cluster.gpu_type_of(pieces[0].server_id)) if cluster.typed else job
    for alloc in sorted(others, key=lambda a: a.job_id):
        pieces = tuple(p for p in alloc.placements if p.server_id in state.index)
        if pieces and alloc.job_id not in allocations:
            plan.append((alloc.job_id, pieces))
    state.hold(plan)
    out = dict(allocations)
    for jid in leftover.redistribute(state, eligible):
        new = out[jid].with_placements(state.held[jid])
        prev = (previous or {}).get(jid)
        out[jid] = prev if prev is not None and prev == new else new
    return out


@settings(max_examples=300, deadline=None)
@given(plans(), st.lists(st.sampled_from(sorted(ZOO_LIKE)), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([1.0, 8.0])),
                max_size=3))
def test_hand_out_tops_up_exactly_as_redistribute_on_a_held_state(drawn, models, cpu_jobs) -> None:
    """`hand_out` keeps free CPUs and memory in plain lists instead of a ClusterState, and
    must hand out the very same floats: summed in the same order, released and reserved in
    the same order, to the same jobs (packed pairs, split jobs, typed servers, CPU-only jobs
    and a server off the cluster included)."""
    cluster, previous, plan = drawn
    jobs = {jid: Job(jid, models[jid % len(models)], sum(p.gpus for p in a.placements), 0.0, 1000,
                     ZOO_LIKE[models[jid % len(models)]]) for jid, a in plan.items()}
    ids = [s.id for s in cluster.servers] + ["gone"]
    others = [Allocation(1000 + k, (Placement(ids[i % len(ids)], 0, c, m),)) for k, (i, c, m) in enumerate(cpu_jobs)]
    # A plan the core could hand out on: what does not fit a server (a drawn plan may
    # over-commit it) is left out, CPU-only jobs first in; a packed guest's GPUs are its host's.
    free = {s.id: [s.capacity.cpus, s.capacity.mem_gb, s.capacity.gpus] for s in cluster.servers}
    fitting: dict[int, Allocation] = {}
    for a in others + [plan[j] for j in sorted(plan, key=lambda j: (plan[j].packed_with is not None, j))]:
        on = [p for p in a.placements if p.server_id in free]
        if (a.packed_with is not None and a.packed_with not in fitting) or any(
                p.cpus > free[p.server_id][0] or p.mem_gb > free[p.server_id][1]
                or (a.packed_with is None and p.gpus > free[p.server_id][2]) for p in on):
            continue
        for p in on:
            free[p.server_id][0] -= p.cpus
            free[p.server_id][1] -= p.mem_gb
            free[p.server_id][2] -= 0 if a.packed_with is not None else p.gpus
        fitting[a.job_id] = a
    others = [a for a in others if a.job_id in fitting]
    plan = {jid: a for jid, a in plan.items() if jid in fitting}
    fast = leftover.hand_out(plan, jobs, cluster, others, previous)
    plain = _plain_hand_out(plan, jobs, cluster, others, previous)
    assert fast == plain and list(fast) == list(plain)
    assert all((fast[j] is previous.get(j)) == (plain[j] is previous.get(j)) for j in fast)


# -- top_up: jobs at their saturating demand passed over, against the rule read in full ---------
#: A profile whose speed falls with more CPU past 4 per GPU (not one a real job has, but one
#: the rule must not assume away): with less than nothing free, the full rule would give such
#: a job fewer CPUs and call it a gain.
_DIPPING = SensitivityProfile("dipping", "image", (1.0, 4.0, 8.0), (20.0, 500.0),
                              ((0.3, 0.3), (1.0, 1.0), (0.6, 0.6)), (4.0, 20.0), 0.1)


def _plain_top_up(free_c, free_m, local):
    """`leftover.top_up` as it was: every job's speeds read, then the same hand-out."""
    gains = []
    for k, (jid, job, p) in enumerate(local):
        now = job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus)
        best = job.profile.speed((p.cpus + free_c) / p.gpus, (p.mem_gb + free_m) / p.gpus)
        if best > now * (1 + 1e-6):
            gains.append((-(best / now if now > 0 else float("inf")), jid, k))
    out = []
    for _, jid, k in sorted(gains):
        job, p = local[k][1], local[k][2]
        c_sat, m_sat = job.profile.best_case()
        cpus = min(max(p.cpus, c_sat * p.gpus), p.cpus + free_c)
        mem = min(max(p.mem_gb, m_sat * p.gpus), p.mem_gb + free_m)
        if job.profile.speed(cpus / p.gpus, mem / p.gpus) <= job.profile.speed(p.cpus / p.gpus, p.mem_gb / p.gpus):
            continue
        free_c = free_c + p.cpus - cpus
        free_m = free_m + p.mem_gb - mem
        out.append((jid, Placement(p.server_id, p.gpus, cpus, mem)))
    return out


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([-0.5, -0.01, 0.0, 0.5, 3.0, 24.0]), st.sampled_from([-1.0, 0.0, 10.0, 250.0]),
       st.lists(st.tuples(st.sampled_from([*sorted(ZOO_LIKE), "dipping"]), st.sampled_from([1, 2, 4]),
                          st.sampled_from(["below", "at", "above"]), st.sampled_from(["below", "at", "above"])),
                max_size=6))
def test_top_up_passes_over_saturated_jobs_exactly(free_c: float, free_m: float, drawn) -> None:
    """A job holding at least its saturating demand on both axes is passed over before its
    speeds are read, when nothing free is negative: the very pieces of the full rule, in the
    same order (it fails if the pass-over skips a job short on one axis, or runs on a
    negative free amount, where the full rule may still trim a job)."""
    local = []
    for jid, (name, gpus, at_c, at_m) in enumerate(drawn):
        profile = _DIPPING if name == "dipping" else ZOO_LIKE[name]
        c_sat, m_sat = profile.best_case()
        where = {"below": 0.5, "at": 1.0, "above": 1.25}
        piece = Placement("s0", gpus, c_sat * gpus * where[at_c], m_sat * gpus * where[at_m])
        local.append((jid, Job(jid, name, gpus, 0.0, 1000, profile), piece))
    assert leftover.top_up(free_c, free_m, local) == _plain_top_up(free_c, free_m, local)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([0.5, 1.0, 3.0]), st.sampled_from([10.0, 62.5]),
                          st.booleans()), max_size=12), st.randoms(use_true_random=False))
def test_pack_order_sorts_as_the_key_function_did(drawn, rnd) -> None:
    """`pack_order` sorts decorated tuples with each job's position: the order of a stable
    sort by (stand-in last, GPUs, CPUs, memory), ties in the order the jobs came (the ids
    are shuffled, so an order by id would differ)."""
    ids = list(range(len(drawn)))
    rnd.shuffle(ids)
    jobs = [Job(jid, "m", g, 0.0, 100, ZOO_LIKE["both"]) for jid, (g, _, _, _) in zip(ids, drawn)]
    demand = {j.id: (c, m) for j, (_, c, m, _) in zip(jobs, drawn)}
    last = frozenset(j.id for j, (_, _, _, stand_in) in zip(jobs, drawn) if stand_in)
    plain = sorted(jobs, key=lambda j: (j.id in last, -j.gpus, -demand[j.id][0] * j.gpus, -demand[j.id][1] * j.gpus))
    assert [j.id for j in pack_order(jobs, demand, last)] == [j.id for j in plain]


def test_value_objects_are_write_once_under_test() -> None:
    """The core's value objects are plain slots dataclasses at run time (model.VALUE_TYPES:
    a frozen one takes three times the instructions to build); the suite makes them write-once
    (conftest.py), so an assignment anywhere a test reaches fails as with `frozen=True`."""
    from dataclasses import FrozenInstanceError

    import pytest

    p = Placement("s0", 1, 2.0, 20.0)
    for obj, name, value in ((Resources(1, 2.0, 3.0), "cpus", 4.0), (p, "server_id", "s1"),
                             (Allocation(1, (p,)), "placements", ())):
        with pytest.raises(FrozenInstanceError):
            setattr(obj, name, value)
        with pytest.raises(FrozenInstanceError):
            delattr(obj, name)
    assert (p.server_id, hash(p)) == ("s0", hash(Placement("s0", 1, 2.0, 20.0)))


def _plain_total(alloc: Allocation) -> Resources:
    out = Resources()
    for p in alloc.placements:
        out = out + p.resources
    return out


_piece_amount = st.sampled_from([0, 1, 0.5, 2.0, 1 / 3, 62.5, 1e-7, 24])


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["s0", "s1", "s2"]), st.integers(0, 8), _piece_amount, _piece_amount),
                min_size=1, max_size=3))
def test_single_piece_total_and_per_gpu_are_the_summed_ones(pieces) -> None:
    """`Allocation.total` and `per_gpu` skip the sum for one piece: the same floats (types
    included: an int piece still gives float totals)."""
    alloc = Allocation(1, tuple(Placement(*p) for p in pieces))
    plain = _plain_total(alloc)
    fast = alloc.total
    assert [(v, type(v)) for v in (fast.gpus, fast.cpus, fast.mem_gb)] == \
        [(v, type(v)) for v in (plain.gpus, plain.cpus, plain.mem_gb)]
    expected = (plain.cpus / plain.gpus, plain.mem_gb / plain.gpus) if plain.gpus else (0.0, 0.0)
    assert alloc.per_gpu == expected


@SETTINGS
@given(plans())
def test_steadys_room_sums_as_held_resources_do(drawn) -> None:
    """`steady._room` adds pieces in plain floats: the free room (or None) that adding each
    allocation's `held` Resources gives, packed guests' GPUs left out."""
    from synergy.scheduler.placement import steady

    cluster, previous, plan = drawn
    caps = {s.id: s.capacity for s in cluster.servers}
    allocations = {j: a for j, a in {**previous, **plan}.items()
                   if all(p.server_id in caps for p in a.placements)}
    load: dict[str, Resources] = {}
    for alloc in allocations.values():
        for sid, res in alloc.held:
            load[sid] = load[sid] + res if sid in load else res
    plain = None if not all(r.fits_in(caps[sid]) for sid, r in load.items()) else \
        {sid: cap - load[sid] if sid in load else cap for sid, cap in caps.items()}
    assert steady._room(allocations, caps) == plain

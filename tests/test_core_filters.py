"""Filter plug-ins in the core: cordon, drain, silent servers (hypothesis + examples)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiles_for_tests import make_profile
from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import AdminState, Cluster, Job, Resources, RoundInput, Server
from synergy.scheduler.placement.filters import DEFAULT_FILTERS, Admit, Cordon, Heartbeat, run_filters
from synergy.scheduler.placement.scorers import SCORERS, first_fit
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.registry import UnknownNameError, build_scheduler
from test_core_properties import SETTINGS, scenarios

NOW, WINDOW = 100.0, 2.0
#: (admin state, seconds since the last heartbeat) a server may be in.
CONDITIONS = st.sampled_from(
    [(AdminState.READY, 0.0), (AdminState.READY, 0.0), (AdminState.CORDONED, 0.0),
     (AdminState.DRAINING, 0.0), (AdminState.READY, 5.0), (AdminState.CORDONED, 9.0)]
)


@given(scenarios(), st.data(), st.sampled_from([Tune(), Greedy()]))
@SETTINGS
def test_filters_keep_new_work_off_cordoned_draining_and_silent_servers(scenario, data, mechanism) -> None:
    cluster, jobs = scenario
    sched = Scheduler(Fifo(), mechanism)
    previous = sched.schedule(RoundInput(0.0, cluster, jobs)).allocations  # last round, all ready
    servers = []
    for s in cluster.servers:
        admin, silent = data.draw(CONDITIONS)
        servers.append(replace(s, admin=admin, last_heartbeat_s=NOW - silent))
    flagged = Cluster(tuple(servers))
    out = sched.schedule(RoundInput(NOW, flagged, jobs, previous, heartbeat_window_s=WINDOW))
    state = {s.id: (s.admin, NOW - s.last_heartbeat_s) for s in servers}

    def closed_to_new(sid: str) -> bool:
        admin, silent = state[sid]
        return admin != AdminState.READY or silent > WINDOW

    used: dict[str, Resources] = {}
    for jid, alloc in out.allocations.items():
        prev = previous.get(jid)
        for p in alloc.placements:
            used[p.server_id] = used.get(p.server_id, Resources()) + p.resources
            assert state[p.server_id][0] != AdminState.DRAINING, "a draining server runs nothing"
            if closed_to_new(p.server_id):  # only a job that was there may stay there, as it was
                assert prev is not None and p in prev.placements
        if prev is not None and any(closed_to_new(p.server_id) for p in prev.placements) and not any(
            state[p.server_id][0] == AdminState.DRAINING for p in prev.placements
        ):
            assert alloc == prev, "a running job on a cordoned or silent server keeps its placement"
    for prev_id, prev in previous.items():  # ... and is never dropped by the round
        if any(state[p.server_id][0] == AdminState.CORDONED for p in prev.placements) and not any(
            state[p.server_id][0] == AdminState.DRAINING for p in prev.placements
        ):
            assert out.allocations.get(prev_id) == prev
    capacity = {s.id: s.capacity for s in servers}
    for sid, r in used.items():
        assert r.fits_in(capacity[sid]), f"server {sid} over capacity"
    for j in jobs:
        assert (j.id in out.allocations) != (j.id in out.waiting)
    if all(closed_to_new(s.id) for s in servers):
        for jid, why in out.waiting.items():
            assert why.startswith("no schedulable node: node ")


def _job(i: int, gpus: int = 1) -> Job:
    return Job(id=i, model="p", gpus=gpus, arrival_s=0.0, iterations=100.0, profile=make_profile("p", 3.0, 50.0, 0.5, 0.8))


def test_waiting_reasons_come_from_the_filters() -> None:
    cluster = Cluster((
        Server("n1", Resources(4, 24, 256), admin=AdminState.CORDONED, last_heartbeat_s=99.0),
        Server("n2", Resources(4, 24, 256), last_heartbeat_s=96.0),
        Server("n3", Resources(2, 12, 128), admin=AdminState.DRAINING, last_heartbeat_s=100.0),
    ))
    out = build_scheduler("fifo", "tune").schedule(RoundInput(100.0, cluster, [_job(1)], heartbeat_window_s=2.0))
    assert out.waiting[1] == (
        "no schedulable node: node n1 is cordoned; node n2 missed heartbeats for 4.0 s; node n3 is draining"
    )
    ready = replace(cluster, servers=cluster.servers + (Server("n4", Resources(2, 12, 128)),))
    out = build_scheduler("fifo", "tune").schedule(RoundInput(100.0, ready, [_job(1, 4)], heartbeat_window_s=2.0))
    assert out.waiting[1].startswith("needs 4 GPUs; the schedulable nodes have 2 in total (node n1 is cordoned;")


def test_filter_verdicts() -> None:
    inp = RoundInput(10.0, Cluster(()), [], heartbeat_window_s=1.0)
    assert Cordon().check(Server("a", Resources(1), admin=AdminState.CORDONED), inp).admit == Admit.HELD
    assert Heartbeat().check(Server("a", Resources(1), last_heartbeat_s=9.5), inp).admit == Admit.ANY
    assert Heartbeat().check(Server("a", Resources(1)), inp).admit == Admit.ANY  # not tracked
    worst = run_filters(DEFAULT_FILTERS, Server("a", Resources(1), admin=AdminState.DRAINING, last_heartbeat_s=0), inp)
    assert (worst.admit, worst.reason) == (Admit.NONE, "node a is draining")


def test_scorers_are_chosen_by_name() -> None:
    assert build_scheduler("fifo", "tune", scorer="first_fit").mechanism.scorer is first_fit
    assert build_scheduler("fifo", "tune").mechanism == Tune()  # default unchanged
    assert build_scheduler("tetris", "greedy", scorer="best_fit").mechanism.scorer is SCORERS["best_fit"]
    with pytest.raises(UnknownNameError, match="choose one of best_fit, first_fit, alignment"):
        build_scheduler("fifo", "tune", scorer="worst_fit")


def test_the_cluster_is_untouched_without_flags() -> None:
    """No admin state, no liveness: the core hands the mechanism the very same cluster."""
    cluster = Cluster.homogeneous(2)
    seen = []

    class Spy(Tune):
        def allocate(self, ordered, inp):
            seen.append(inp.cluster)
            return super().allocate(ordered, inp)

    Scheduler(Fifo(), Spy()).schedule(RoundInput(0.0, cluster, [_job(1)]))
    assert seen[0] is cluster


def test_a_filtered_server_does_not_change_the_proportional_share() -> None:
    # The share is the cluster's shape (the smallest per-GPU share of any GPU server): with
    # the small-CPU server draining, a job must still get 3 CPUs per GPU under "proportional",
    # not the 6 of the server that is left.
    cluster = Cluster((
        Server("small", Resources(8, 24, 400), admin=AdminState.DRAINING),
        Server("big", Resources(8, 48, 400)),
    ))
    out = build_scheduler("fifo", "proportional").schedule(RoundInput(0.0, cluster, [_job(1, 2)]))
    assert out.allocations[1].total.cpus == pytest.approx(6.0)  # 2 GPUs x 3 CPUs

"""Where profiling leases go (placement/profiling.py, issue 14): only in free room, spread
over the nodes, a node's free CPUs split between the leases placed on it together."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from synergy.scheduler.model import EPS, Cluster, Resources, Server
from synergy.scheduler.placement.profiling import MAX_PROFILE_CPUS, ProfilingAsk, place_after_round, place_leases


def test_two_asks_on_a_two_cpu_node_profile_side_by_side():
    """Before: the first lease took the node's two CPUs and the second waited for it."""
    c = Cluster((Server("n0", Resources(4, 2, 8)),))
    leases = place_leases([ProfilingAsk(1, 1), ProfilingAsk(2, 1), ProfilingAsk(3, 1)], c, {})
    assert sorted(leases) == [1, 2]  # a third would get less than one CPU
    assert all(p.server_id == "n0" and p.cpus == 1.0 and p.mem_gb == 4.0 for p in leases.values())


def test_leases_take_only_what_work_does_not_hold():
    c = Cluster((Server("n0", Resources(4, 8, 64)), Server("n1", Resources(4, 8, 64))))
    held = {"n0": Resources(3, 7.5, 60), "n1": Resources(4, 0, 0)}
    assert place_leases([ProfilingAsk(1, 1)], c, held) == {}  # n0: half a CPU free; n1: no GPU
    held = {"n0": Resources(2, 5, 60)}
    (lease,) = place_leases([ProfilingAsk(1, 1)], c, held).values()
    assert lease.server_id == "n1" and lease.cpus == 8  # the most CPUs
    assert place_leases([ProfilingAsk(1, 1)], c, held, max_cpus=4)[1].cpus == 4


def test_asks_spread_over_nodes_before_sharing_one():
    c = Cluster(tuple(Server(f"n{i}", Resources(2, 4, 16)) for i in range(3)))
    leases = place_leases([ProfilingAsk(i, 1) for i in range(3)], c, {})
    assert sorted(p.server_id for p in leases.values()) == ["n0", "n1", "n2"]
    assert all(p.cpus == 4 for p in leases.values())


def test_gpu_types_are_respected():
    c = Cluster((Server("a", Resources(1, 8, 8), gpu_type="T4"), Server("b", Resources(1, 2, 8), gpu_type="V100")))
    assert place_leases([ProfilingAsk(1, 1, frozenset({"V100"}))], c, {})[1].server_id == "b"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 16), st.integers(0, 64)), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 16), st.integers(0, 64)), max_size=4),
    st.lists(st.integers(1, 4), max_size=8),
)
def test_leases_never_overcommit_a_node(caps, helds, asks):
    c = Cluster(tuple(Server(f"n{i}", Resources(*cap)) for i, cap in enumerate(caps)))
    held = {f"n{i}": Resources(*(min(h, cap) for h, cap in zip(hh, caps[i]))) for i, hh in enumerate(helds)
            if i < len(caps)}
    leases = place_leases([ProfilingAsk(i, g) for i, g in enumerate(asks)], c, held)
    for s in c.servers:
        total = held.get(s.id, Resources())
        for p in leases.values():
            if p.server_id == s.id:
                total = total + p.resources
                assert 1 <= p.cpus <= MAX_PROFILE_CPUS and p.cpus == int(p.cpus) and p.mem_gb > 0
        assert total.fits_in(s.capacity), (s, total)
    # Nothing left waiting that would have fitted alone on some node.
    for i, g in enumerate(asks):
        if i in leases:
            continue
        for s in c.servers:
            room = s.capacity - held.get(s.id, Resources())
            for p in leases.values():
                if p.server_id == s.id:
                    room = room - p.resources
            assert not (room.gpus + EPS >= g and room.cpus >= 1 - EPS and room.mem_gb > 1e-3), (i, s, room)


def test_leases_leave_room_for_jobs_already_queued():
    """A profiled job waiting for the next round keeps its proportional share: a later
    arrival's lease takes only what is left (before, leases took every free CPU and the
    queue waited for the profiling to end)."""
    c = Cluster((Server("n0", Resources(4, 2, 8)),))
    share = c.proportional_share(1)  # half a CPU, 2 GB
    leases = place_leases([ProfilingAsk(1, 1), ProfilingAsk(2, 1)], c, {}, queued=[share, share])
    assert sorted(leases) == [1]  # 2 CPUs - 2 x 0.5 queued = 1 CPU: one lease
    assert leases[1].cpus == 1 and leases[1].mem_gb == 4.0
    assert place_leases([ProfilingAsk(1, 1)], c, {}, queued=[share] * 4) == {}  # every GPU is spoken for


def test_four_arrivals_on_four_gpus_and_two_cores_profile_at_once_at_half_a_core():
    """Issue 14: whole-CPU leases profiled two and kept two waiting, slower than their share
    because of someone else's profiling. Where the share is below a CPU a lease holds half a
    core, even where a whole one fits: two asks that came first took a core each, and the
    arrivals a moment later waited for their profiling with GPUs free."""
    c = Cluster((Server("n0", Resources(4, 2, 8)),))
    asks = [ProfilingAsk(i, 1) for i in range(4)]
    leases = place_leases(asks, c, {}, sub_core=True)
    assert sorted(leases) == [0, 1, 2, 3] and all(p.cpus == 0.5 for p in leases.values())
    assert sorted(place_leases(asks, c, {}, sub_core=False)) == [0, 1]
    two = place_leases(asks[:2], c, {}, sub_core=True)
    assert [p.cpus for p in two.values()] == [0.5, 0.5]
    assert sorted(place_leases(asks[2:], c, {"n0": Resources(2, 1.0, 4)}, sub_core=True)) == [2, 3]  # room for the next
    assert place_leases(asks[:1], c, {"n0": Resources(3, 1.75, 0)}, sub_core=True) == {}  # a quarter is too little


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 16)), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0, 0.25, 0.5, 1, 1.5, 3]), st.integers(0, 8)), max_size=3),
    st.lists(st.integers(1, 2), max_size=8),
)
# Spread by the room per lease, the 1-GPU ask went to n1 (4 CPUs for 3 leases against n0's 4
# for 4) and split the GPUs the last 2-GPU ask needed; whole CPUs placed all seven.
@example(caps=[(7, 4, 1), (6, 4, 1)], helds=[], asks=[2, 2, 2, 2, 2, 1, 2])
def test_sub_core_leases_never_overcommit_and_hold_a_point_the_job_can_measure(caps, helds, asks):
    c = Cluster(tuple(Server(f"n{i}", Resources(*cap)) for i, cap in enumerate(caps)))
    held = {f"n{i}": Resources(*(min(h, cap) for h, cap in zip(hh, caps[i]))) for i, hh in enumerate(helds)
            if i < len(caps)}
    leases = place_leases([ProfilingAsk(i, g) for i, g in enumerate(asks)], c, held, sub_core=True)
    for s in c.servers:
        total = held.get(s.id, Resources())
        for p in leases.values():
            if p.server_id == s.id:
                total = total + p.resources
                assert p.cpus == 0.5 or (1 <= p.cpus <= MAX_PROFILE_CPUS and p.cpus == int(p.cpus))
        assert total.fits_in(s.capacity), (s, total)
    # A whole-CPU pass never places more, and every whole-CPU lease is still placed.
    whole = place_leases([ProfilingAsk(i, g) for i, g in enumerate(asks)], c, held)
    assert len(leases) >= len(whole)


def test_an_ask_the_round_placed_goes_ahead_of_the_queued_jobs_it_outranked():
    """A round that ranked an arrival's stand-in above a queued job left the arrival that room
    (`RoundInput.last`): its lease takes it, where the queued job's share kept it before.
    An ask the round did not place still leaves room for the queued jobs, and for a granted
    ask that found none yet."""
    c = Cluster((Server("n0", Resources(4, 2, 8)),))
    share = c.proportional_share(1)
    held = {"n0": Resources(3, 1.5, 6)}  # three running jobs at their share: one GPU free
    ask = ProfilingAsk(7, 1)
    assert place_after_round([ask], frozenset(), c, held, queued=[share], sub_core=True) == {}
    (lease,) = place_after_round([ask], frozenset({7}), c, held, queued=[share], sub_core=True).values()
    assert lease.server_id == "n0" and lease.cpus == 0.5
    # Two free GPUs: a granted 2-GPU ask placed, and a later 1-GPU one finds nothing left.
    held = {"n0": Resources(2, 1.0, 4)}
    two, one = ProfilingAsk(8, 2), ProfilingAsk(9, 1)
    assert sorted(place_after_round([two, one], frozenset({8}), c, held, sub_core=True)) == [8]
    # Without a grant the asks go in arrival order, as `place_leases` places them.
    assert place_after_round([one, two], frozenset(), c, held, queued=[share], sub_core=True) == \
        place_leases([one, two], c, held, queued=[share], sub_core=True)

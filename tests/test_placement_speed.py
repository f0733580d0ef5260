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
from synergy.scheduler.model import Allocation, Cluster, Placement, Resources, Server
from synergy.scheduler.placement.fit import consolidated
from synergy.scheduler.placement.scorers import StrandingBestFit, avoid_stranding, best_fit
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
        # The scorer's own scan finds the server the general search finds, on the whole
        # cluster and between any two servers (so every comparison of keys is exercised).
        assert consolidated(state, gpus, c, m, fast) == consolidated(state, gpus, c, m, plain)
        g, cpus, mem = gpus, c * gpus, m * gpus
        fitting = [i for i in range(len(state.ids)) if state.fits(i, g, cpus, mem)]
        for i in range(len(state.ids)):
            for j in range(i, len(state.ids)):
                keys = [(plain(state, k, g, cpus, mem), k) for k in (i, j) if k in fitting]
                assert fast.best(state, (i, j), g, cpus, mem) == (min(keys)[1] if keys else -1)


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

"""CodaSearch (CODA §V-B): start by task and history, halve while throughput holds, then
double while it improves; at most 4 probes on the zoo's curves (Synergy Fig. 2 shapes)."""
from __future__ import annotations

import pytest

from synergy.profiler.coda import START_BY_TASK, CodaSearch
from synergy.scheduler.profiles.zoo import default_profiles

ZOO = default_profiles()


def run(search: CodaSearch, curve) -> CodaSearch:
    while (c := search.next_cpus()) is not None:
        search.record(c, curve(c))
    return search


@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("with_history", [False, True])
def test_at_most_4_probes_and_within_5_percent_of_the_best(name, with_history):
    profile = ZOO[name]
    curve = lambda c: profile.speed(c, 500)  # full memory: the CPU axis only
    history = (int(profile.best_case()[0]),) if with_history else ()
    s = run(CodaSearch(24, profile.task, history), curve)
    assert s.probes <= 4, s.points
    best = max(curve(c) for c in range(1, 25))
    assert curve(s.best_cpus) >= 0.95 * best
    assert s.best_cpus >= profile.best_case()[0]  # never below the knee
    if with_history:
        assert s.best_cpus == profile.best_case()[0] and s.probes <= 3


def test_start_points():
    assert CodaSearch(24, "image").next_cpus() == START_BY_TASK["image"] == 6
    assert CodaSearch(24, "language").next_cpus() == 2
    assert CodaSearch(24, "speech").next_cpus() == 4
    assert CodaSearch(4, "image").next_cpus() == 4  # clamped to the maximum
    assert CodaSearch(24, "image", history=[2, 9, 10]).next_cpus() == 9  # the median


def test_steps_down_while_it_holds_then_up_while_it_improves():
    s = CodaSearch(24, "image")
    rates = {6: 100.0, 3: 97.0, 1: 50.0}
    assert s.next_cpus() == 6
    s.record(6, rates[6])
    assert s.next_cpus() == 3
    s.record(3, rates[3])  # holds (within 5%): go on down
    assert s.next_cpus() == 1
    s.record(1, rates[1])  # drops: try up from 3, but 6 is known: done
    assert s.next_cpus() is None and s.best_cpus == 3


def test_bad_arguments():
    with pytest.raises(ValueError, match="task"):
        CodaSearch(8, "video")
    with pytest.raises(ValueError, match="max_cpus"):
        CodaSearch(0, "image")
    with pytest.raises(ValueError, match="history"):
        CodaSearch(8, "image", history=[0])
    s = CodaSearch(8, "image")
    with pytest.raises(ValueError, match="cpus"):
        s.record(9, 1.0)
    assert s.points == [] and s.next_cpus() == 6

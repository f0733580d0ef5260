"""OptimisticSearch (§3.1): properties over synthetic CPU curves, and its protocol.

Curves: the MinIO model's shape, min(GPU, r * c**alpha) (a knee where the CPUs catch up with
the GPU; every zoo model), and a smooth saturating one, G * (1 - exp(-c / s))**beta (no knee,
diminishing returns all the way). Both are rising and concave, like Fig. 2 of the paper.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synergy.profiler.search import OptimisticSearch, interpolate, knee


def kinked(knee_cpus: float, alpha: float):
    return lambda c: 100.0 * min(1.0, (c / knee_cpus) ** alpha)


def smooth(scale: float, beta: float):
    return lambda c: 100.0 * (1.0 - math.exp(-c / scale)) ** beta


def run(search: OptimisticSearch, curve) -> OptimisticSearch:
    while (c := search.next_cpus()) is not None:
        search.record(c, curve(c))
    return search


def true_knee(curve, max_cpus: int) -> int:
    best = max(curve(c) for c in range(1, max_cpus + 1))
    return min(c for c in range(1, max_cpus + 1) if curve(c) >= 0.99 * best)


curves = st.one_of(
    st.builds(kinked, st.floats(0.5, 40), st.floats(0.3, 1.0)),
    st.builds(smooth, st.floats(0.3, 15), st.floats(0.3, 1.0)),
)


@settings(max_examples=300, deadline=None)
@given(max_cpus=st.integers(1, 24), curve=curves)
def test_at_most_8_points_and_the_curve_within_the_threshold_everywhere(max_cpus, curve):
    s = run(OptimisticSearch(max_cpus), curve)
    assert s.probes <= 8
    assert s.points[-1][0] == max_cpus  # it starts at the maximum
    for c in range(1, max_cpus + 1):
        assert abs(interpolate(s.points, c) - curve(c)) < 0.10 * curve(c), (c, s.points)


@settings(max_examples=300, deadline=None)
@given(max_cpus=st.integers(1, 24), curve=curves)
def test_the_knee_is_never_below_the_true_one_and_within_one_cpu_when_the_search_settles(max_cpus, curve):
    s = run(OptimisticSearch(max_cpus, max_points=24), curve)
    found, true = s.knee(), true_knee(curve, max_cpus)
    assert true <= found <= true + 1, (true, s.points)


@settings(max_examples=300, deadline=None)
@given(max_cpus=st.integers(1, 18), knee_cpus=st.floats(0.5, 40), alpha=st.floats(0.3, 1.0))
def test_the_knee_of_a_minio_shaped_curve_within_one_cpu_in_8_points(max_cpus, knee_cpus, alpha):
    curve = kinked(knee_cpus, alpha)
    s = run(OptimisticSearch(max_cpus), curve)
    found, true = s.knee(), true_knee(curve, max_cpus)
    assert s.probes <= 8 and true <= found <= true + 1, (true, s.points)


def test_the_paper_order_maximum_first_then_halves():
    """A flat curve (GNMT-like): every point improves by < 10%, so the search keeps to the
    lower half: 24, 12, 6, 3, 1."""
    s = OptimisticSearch(24)
    order = []
    while (c := s.next_cpus()) is not None:
        order.append(c)
        s.record(c, 50.0)
    assert order == [24, 12, 6, 3, 1]
    assert s.knee() == 1


def test_a_sensitive_upper_half_is_searched_first():
    """24 CPUs improve on 12 by 43% (> 10%): the upper half (12, 24) is profiled next."""
    s = OptimisticSearch(24)
    s.record(s.next_cpus(), 100.0)
    assert s.next_cpus() == 12
    s.record(12, 70.0)
    assert s.next_cpus() == 18


def test_deterministic():
    curve = kinked(9, 0.76)
    a, b = run(OptimisticSearch(24), curve), run(OptimisticSearch(24), curve)
    assert a.points == b.points


def test_next_cpus_repeats_until_recorded_and_ends_with_none():
    s = OptimisticSearch(4)
    assert s.next_cpus() == s.next_cpus() == 4
    run(s, kinked(2, 1.0))
    assert s.next_cpus() is None


def test_max_points_caps_the_search():
    s = run(OptimisticSearch(24, max_points=3), kinked(16, 0.5))
    assert s.probes == 3


@pytest.mark.parametrize("kwargs, message", [
    ({"max_cpus": 0}, "max_cpus"),
    ({"max_cpus": 8, "threshold": 0}, "threshold"),
    ({"max_cpus": 8, "threshold": float("nan")}, "threshold"),
    ({"max_cpus": 8, "max_points": 0}, "max_points"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OptimisticSearch(**kwargs)


@pytest.mark.parametrize("cpus, rate, message", [
    (0, 1.0, "cpus"), (9, 1.0, "cpus"), (2.5, 1.0, "cpus"), (4, -1.0, "samples_per_s"),
    (4, float("inf"), "samples_per_s"),
])
def test_bad_records_change_nothing(cpus, rate, message):
    s = OptimisticSearch(8)
    with pytest.raises(ValueError, match=message):
        s.record(cpus, rate)
    assert s.points == [] and s.next_cpus() == 8


def test_a_point_cannot_be_recorded_twice():
    s = OptimisticSearch(8)
    s.record(8, 1.0)
    with pytest.raises(ValueError, match="already measured"):
        s.record(8, 2.0)


def test_helpers():
    pts = [(2, 10.0), (4, 20.0), (8, 20.0)]
    assert interpolate(pts, 1) == 5.0 and interpolate(pts, 3) == 15.0 and interpolate(pts, 16) == 20.0
    assert knee(pts) == 4 and knee([]) is None

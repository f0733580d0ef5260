"""TUNE resumed from the last round's packing gives what packing from scratch gives
(mechanisms/pack_trace.py): over rounds of arrivals and departures, on clusters tight enough
that jobs are reverted to their share, split over servers or left waiting, the outputs of
`Tune()` and `Tune(resume=False)` are equal, down to the order of their dictionaries."""
from __future__ import annotations

import pickle
import random

import pytest

from profiles_for_tests import ZOO_LIKE
from synergy.scheduler.mechanisms.pack_trace import RELEASE, REVERT, TAKE, WAIT
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.placement import gpu_types
from synergy.scheduler.model import Cluster, Job, Resources, RoundInput, RoundOutput, Server

PROFILES = list(ZOO_LIKE.values())


def _clusters(seed: int) -> list[Cluster]:
    """A uniform cluster short of CPU (so TUNE reverts jobs), and one of mixed shapes where
    profiling leases hold most CPUs of some servers, so that jobs reverted to their share
    find no room on those and wait; and one with a server without CPUs (its share is zero)."""
    tight = Cluster(tuple(Server(f"s{i}", Resources(8, 24, 500)) for i in range(4)))
    shapes = [(4, 16, 250), (8, 48, 500), (4, 2, 120)]
    n = 5 + seed % 3
    mixed = Cluster(tuple(Server(f"m{i}", Resources(*shapes[i % 3])) for i in range(n)),
                    share_basis=tuple(Server(f"m{i}", Resources(*shapes[i % 2])) for i in range(n)))
    bare = Cluster((Server("b0", Resources(4, 0, 250)), Server("b1", Resources(8, 48, 500))))
    return [tight, mixed, bare]


def _rounds(seed: int, cluster: Cluster, n_rounds: int = 40) -> list[tuple[RoundOutput, RoundOutput, list[tuple]]]:
    """Both ways of packing over `n_rounds` rounds in which jobs arrive and finish (FIFO order:
    arrivals last), and, now and then, some jobs are marked `last`; with the operations each
    resumed round replayed."""
    rng = random.Random(seed)
    resumed, fresh = Tune(), Tune(resume=False)
    queue: list[Job] = []
    next_id = 0
    out = []
    for r in range(n_rounds):
        for _ in range(rng.choice([0, 1, 1, 2, 5])):
            gpus = rng.choice([1, 1, 1, 2, 4, 8])
            queue.append(Job(next_id, "j", gpus, float(r), 1e6, rng.choice(PROFILES)))
            next_id += 1
        for _ in range(rng.choice([0, 0, 1, 2])):
            if queue:
                queue.pop(rng.randrange(len(queue)))
        last = frozenset(j.id for j in queue if rng.random() < 0.1) if r % 7 == 3 else frozenset()
        inp = RoundInput(300.0 * r, cluster, queue, last=last)
        before = resumed.memo.last
        mine = resumed.allocate(list(queue), inp)
        now = resumed.memo.last
        k = before.common_prefix(now.setting, now.steps) if before is not None else 0
        out.append((mine, fresh.allocate(list(queue), inp), now.ops[:now.marks[k - 1]] if k else []))
    return out


def _same(a: RoundOutput, b: RoundOutput) -> None:
    assert list(a.allocations.items()) == list(b.allocations.items())
    assert list(a.waiting.items()) == list(b.waiting.items())
    assert a.reverted == b.reverted


@pytest.mark.parametrize("seed", range(12))
def test_a_resumed_packing_is_the_packing_from_scratch(seed: int) -> None:
    for cluster in _clusters(seed):
        for resumed, fresh, _ in _rounds(seed, cluster):
            _same(resumed, fresh)


def test_the_rounds_compared_replay_reverts_releases_waits_and_splits() -> None:
    """The comparison above is not vacuous: most rounds resume, and what they replay holds
    every kind of operation, and split jobs."""
    rounds = [r for seed in range(12) for cluster in _clusters(seed) for r in _rounds(seed, cluster)]
    replayed = [ops for _, _, ops in rounds if ops]
    assert len(replayed) > len(rounds) / 2
    kinds = {op[0] for ops in replayed for op in ops}
    assert {RELEASE, REVERT, WAIT} <= kinds
    assert any(len(op[2]) > 1 for ops in replayed for op in ops if op[0] == TAKE)


def test_a_changed_cluster_replays_nothing() -> None:
    """The same jobs on a cluster with one server less: packed afresh, as from scratch."""
    jobs = [Job(i, "j", 1 + i % 2, 0.0, 1e6, PROFILES[i % len(PROFILES)]) for i in range(12)]
    big = Cluster(tuple(Server(f"s{i}", Resources(8, 24, 500)) for i in range(3)))
    small = Cluster(big.servers[:2])
    tune = Tune()
    tune.allocate(jobs, RoundInput(0.0, big, jobs))
    packed = tune.memo.last
    _, scorer, share = packed.setting  # the same on both clusters: only the servers differ
    assert packed.common_prefix((big, scorer, share), packed.steps) == len(jobs)
    assert packed.common_prefix((small, scorer, share), packed.steps) == 0
    on_small = RoundInput(0.0, small, jobs)
    _same(tune.allocate(jobs, on_small), Tune(resume=False).allocate(jobs, on_small))


def test_a_pickled_tune_carries_no_packing() -> None:
    """synergyd pickles its scheduler for the decider worker every round: the memo stays behind."""
    jobs = [Job(i, "j", 1, 0.0, 1e6, PROFILES[i % len(PROFILES)]) for i in range(6)]
    tune = Tune()
    tune.allocate(jobs, RoundInput(0.0, _clusters(0)[0], jobs))
    assert tune.memo.last is not None and len(tune.memo.last.steps) == 6
    copy = pickle.loads(pickle.dumps(tune))
    assert copy == tune and copy.memo.last is None


def test_each_gpu_type_resumes_its_own_packing() -> None:
    """A typed cluster packs each type apart every round: each keeps its own trace, and the
    rounds (jobs arriving on both types) resume from them with the answers from scratch."""
    servers = tuple(Server(f"{t}{i}", Resources(8, 24 if t == "V" else 12, 500), gpu_type=t)
                    for t in ("V", "T") for i in range(3))
    cluster = Cluster(servers)
    resumed, fresh = Tune(), Tune(resume=False)
    rng = random.Random(5)
    queue: list[Job] = []
    resumed_steps = 0
    for r in range(30):
        queue += [Job(100 * r + k, "j", rng.choice([1, 1, 2, 4]), float(r), 1e6, rng.choice(PROFILES))
                  for k in range(rng.choice([1, 2, 3]))]
        if r % 3 == 2:
            queue.pop(rng.randrange(len(queue)))
        inp = RoundInput(300.0 * r, cluster, list(queue))
        before = {t.setting: t for t in resumed.memo.traces}
        _same(gpu_types.allocate(resumed, list(queue), inp), gpu_types.allocate(fresh, list(queue), inp))
        for t in resumed.memo.traces:
            if t.setting in before and before[t.setting] is not t:
                resumed_steps += before[t.setting].common_prefix(t.setting, t.steps)
    assert len(resumed.memo.traces) == 2  # one per type
    assert resumed_steps > 100

"""The §2.1 example: two 8-GPU servers (24 CPUs, 500 GB), four 4-GPU jobs (Tables 1-3)."""
from __future__ import annotations

import pytest

from synergy.scheduler.model import Cluster, Job, RoundInput
from synergy.scheduler.profiles.zoo import default_profiles
from synergy.scheduler.registry import build_scheduler
from synergy.scheduler.throughput import proportional_speed, speed

TABLE_1 = {1: "resnet18", 2: "m5", 3: "transformer_xl", 4: "gnmt"}


@pytest.fixture(scope="module")
def example() -> tuple[Cluster, list[Job]]:
    profiles = default_profiles()
    cluster = Cluster.homogeneous(2, gpus=8, cpus=24, mem_gb=500)
    jobs = [Job(jid, model, 4, 0.0, 1e5, profiles[model]) for jid, model in TABLE_1.items()]
    return cluster, jobs


def decide(mechanism: str, example):
    cluster, jobs = example
    return build_scheduler("fifo", mechanism).schedule(RoundInput(0.0, cluster, jobs))


def test_proportional_is_table_2(example) -> None:
    out = decide("proportional", example)
    for jid in TABLE_1:
        (p,) = out.allocations[jid].placements
        assert (p.gpus, p.cpus, p.mem_gb) == (4, 12, 250)
    # Two jobs per server, each server exactly full.
    servers = [out.allocations[j].placements[0].server_id for j in TABLE_1]
    assert sorted(servers.count(s) for s in set(servers)) == [2, 2]


def test_tune_reaches_table_3(example) -> None:
    """Table 3: each sensitive job (ResNet18, M5) shares a server with an insensitive one
    and takes the CPU and memory it gives up; nobody runs slower than Table 2."""
    cluster, jobs = example
    out = decide("tune", example)
    by_id = {j.id: j for j in jobs}
    server = {jid: out.allocations[jid].placements[0].server_id for jid in TABLE_1}
    assert all(len(out.allocations[jid].placements) == 1 for jid in TABLE_1), "no job needs splitting"
    assert server[1] != server[2], "the two sensitive jobs are spread over the two servers"
    for jid in TABLE_1:
        job, alloc = by_id[jid], out.allocations[jid]
        ratio = speed(job, alloc) / proportional_speed(job, cluster)
        assert ratio >= 1 - 1e-9
        if jid in (1, 2):
            assert ratio > 1.2, f"{job.model} should speed up, got {ratio:.2f}x"
            assert alloc.total.mem_gb > 250 + 100
        else:
            assert alloc.total.cpus < 12 and alloc.total.mem_gb < 250, "insensitive jobs give resources up"


def test_tune_improves_average_jct(example) -> None:
    """Same work for all four jobs: average JCT falls because two of them run faster."""
    cluster, jobs = example
    prop = decide("proportional", example)
    tune = decide("tune", example)
    by_id = {j.id: j for j in jobs}
    jct = lambda out: sum(1 / speed(by_id[j], out.allocations[j]) for j in TABLE_1) / 4  # noqa: E731
    assert jct(prop) / jct(tune) > 1.1

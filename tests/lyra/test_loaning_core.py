"""Loaned servers in the core: only loanable jobs run there, and training servers go first."""
from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from profiles_for_tests import ZOO_LIKE
from synergy.scheduler.core import Scheduler
from synergy.scheduler.loaning.eligibility import SHORT_JOB_S, is_loanable
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.model import Cluster, Job, JobKind, Resources, RoundInput, Server, ServerPool
from synergy.scheduler.policies.fifo import Fifo
from test_core_properties import SETTINGS, assert_not_overcommitted, scenarios

CAP = Resources(8, 24, 500)
PROFILE = ZOO_LIKE["insensitive"]  # iter_time 0.1 s at the reference share
LONG_ITERS = 10 * SHORT_JOB_S / PROFILE.iter_time_s


def job(jid: int, gpus: int = 8, iterations: float = LONG_ITERS, **kw) -> Job:
    return Job(jid, "insensitive", gpus, float(jid), iterations, PROFILE, **kw)


def mixed(n_own: int, n_loaned: int) -> Cluster:
    own = [Server(f"t{i}", CAP) for i in range(n_own)]
    loaned = [Server(f"l{i}", CAP, pool=ServerPool.LOANED) for i in range(n_loaned)]
    return Cluster(tuple(own + loaned))


def schedule(cluster: Cluster, jobs: list[Job]):
    return Scheduler(Fifo(), Tune()).schedule(RoundInput(0.0, cluster, jobs))


def servers_of(out, jid: int) -> set[str]:
    return {p.server_id for p in out.allocations[jid].placements}


def test_default_rule_elastic_and_short_jobs_are_loanable():
    cluster = mixed(1, 0)
    assert not is_loanable(job(1), cluster)
    assert is_loanable(job(2, iterations=SHORT_JOB_S / PROFILE.iter_time_s / 2), cluster)
    assert is_loanable(job(3, kind=JobKind.ELASTIC, min_gpus=8, max_gpus=16), cluster)
    assert not is_loanable(job(4, iterations=10.0, loanable=False), cluster), "the flag overrides"
    assert is_loanable(job(5, loanable=True), cluster)


def test_loaned_server_runs_loanable_jobs_only():
    """Two long jobs on one training server and one loaned server: the inelastic one that
    does not fit waits rather than going to the loaned server; a short one goes there."""
    cluster = mixed(1, 1)
    out = schedule(cluster, [job(1), job(2)])
    assert servers_of(out, 1) == {"t0"}
    assert 2 not in out.allocations
    out = schedule(cluster, [job(1), job(2, loanable=True)])
    assert servers_of(out, 2) == {"l0"}


def test_training_servers_first_and_no_job_spans_both_pools():
    cluster = mixed(1, 1)
    out = schedule(cluster, [job(1, loanable=True)])
    assert servers_of(out, 1) == {"t0"}, "a loanable job takes a free training server first"
    out = schedule(cluster, [job(1, gpus=16, loanable=True)])
    assert 1 not in out.allocations, "a job never spans the training and the loaned pool"


@given(scenarios(), st.data())
@SETTINGS
def test_non_loanable_jobs_never_land_on_loaned_servers(scenario, data):
    cluster, jobs = scenario
    pools = [data.draw(st.sampled_from([ServerPool.TRAINING, ServerPool.LOANED])) for _ in cluster.servers]
    cluster = Cluster(tuple(replace(s, pool=p) for s, p in zip(cluster.servers, pools)))
    jobs = [replace(j, loanable=data.draw(st.sampled_from([None, True, False]))) for j in jobs]
    out = schedule(cluster, jobs)
    assert_not_overcommitted(cluster, out)
    pool = {s.id: s.pool for s in cluster.servers}
    by_id = {j.id: j for j in jobs}
    for jid, alloc in out.allocations.items():
        pools_used = {pool[p.server_id] for p in alloc.placements}
        assert len(pools_used) == 1
        if ServerPool.LOANED in pools_used:
            assert is_loanable(by_id[jid], cluster)

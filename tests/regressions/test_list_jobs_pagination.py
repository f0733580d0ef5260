"""Defect 5: `synergy jobs` broke past 4 MiB of job list ("Received message larger than max")."""

from __future__ import annotations

import json

import grpc
import pytest

from synergy.v1 import admin_pb2

BIG_ENV = {f"BIG_{i}": "x" * 16000 for i in range(15)}  # 240 KB of spec per job


def submit_big(daemon, n: int = 20) -> None:
    admin = daemon.admin()
    for i in range(n):
        admin.submit(f"big-{i:02d}", env=BIG_ENV)
    admin.close()


def test_jobs_lists_twenty_jobs_with_240kb_specs(start_daemon, cli) -> None:
    daemon = start_daemon()
    submit_big(daemon)
    run = cli(daemon, "jobs")
    assert run.code == 0, run.err
    assert sum(1 for line in run.out.splitlines() if "big-" in line) == 20
    run = cli(daemon, "jobs", "--json")
    assert run.code == 0, run.err
    jobs = json.loads(run.out)["jobs"]
    assert [j["name"] for j in jobs] == [f"big-{i:02d}" for i in range(20)]
    assert all(j["spec"]["gpus"] == 1 and j["spec"]["env"] == {} for j in jobs)  # specs stay out of lists


def test_pages_are_stable_in_id_order_and_bounded(start_daemon) -> None:
    daemon = start_daemon()
    admin = daemon.admin()
    for i in range(17):
        admin.submit(f"p-{i:02d}")
    ids, token, pages = [], "", 0
    while True:
        reply = admin.ListJobs(admin_pb2.ListJobsRequest(page_size=5, page_token=token))
        assert len(reply.jobs) <= 5
        assert all(not j.spec.command and not j.history for j in reply.jobs)
        ids += [j.id for j in reply.jobs]
        pages += 1
        token = reply.next_page_token
        if not token:
            break
    assert ids == sorted(ids) and len(ids) == 17 and pages == 4
    # limit keeps the most recent, across pages too
    first = admin.ListJobs(admin_pb2.ListJobsRequest(limit=7, page_size=4))
    rest = admin.ListJobs(admin_pb2.ListJobsRequest(limit=7, page_size=4, page_token=first.next_page_token))
    assert [j.id for j in first.jobs] + [j.id for j in rest.jobs] == ids[-7:] and not rest.next_page_token
    # a huge page size is lowered to the maximum, not refused
    assert len(admin.ListJobs(admin_pb2.ListJobsRequest(page_size=10**9)).jobs) == 17
    # DescribeJob still has the whole spec
    assert list(admin.describe("p-00").spec.command) == ["python", "train.py"]
    admin.close()


def test_bad_page_token_is_invalid_argument(start_daemon) -> None:
    daemon = start_daemon()
    admin = daemon.admin()
    for token in ("garbage", "YWZ0ZXI6eA", "x" * 500, "\u00e9"):
        with pytest.raises(grpc.RpcError) as err:
            admin.ListJobs(admin_pb2.ListJobsRequest(page_token=token))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, token
        assert err.value.details().startswith("page_token: ")
    assert daemon.alive()
    admin.close()

"""Crash safety: `kill -9` the daemon mid-round, restart it on the same state dir."""

from __future__ import annotations

from synergyd_harness import free_port, history, wait_for


def test_kill9_and_restart_loses_nothing_and_schedules_nothing_twice(start_daemon, start_agent, tmp_path) -> None:
    port = str(free_port())
    state = tmp_path / "state"
    d1 = start_daemon("--port", port, state_dir=state)
    agent = start_agent(d1, "n1", gpus=4)
    admin = d1.admin()
    admin.submit("long", gpus=2, iterations=500, env={"FAKE_STEPS": "500", "FAKE_STEP_S": "0.01"})
    admin.submit("whole-node", gpus=4, iterations=30, env={"FAKE_STEPS": "30"})
    admin.submit("gone", gpus=1)
    admin.submit("huge", gpus=16)
    admin.CancelJob(__import__("synergy.v1.admin_pb2", fromlist=["x"]).CancelJobRequest(job="gone", reason="test"))
    wait_for(lambda: admin.describe("long").steps_done > 20, what="long to make progress")
    before = {j.name: (j.state, j.attempt) for j in admin.jobs()}
    admin.close()

    d1.kill()  # no graceful anything
    d2 = start_daemon("--port", port, state_dir=state)
    admin = d2.admin()
    after = {j.name: (j.state, j.attempt) for j in admin.jobs()}
    assert after == before  # every job, in the same state, at the same attempt
    assert "16 GPUs" in admin.describe("huge").waiting_reason or wait_for(
        lambda: "16 GPUs" in admin.describe("huge").waiting_reason, what="huge's waiting reason"
    )

    wait_for(lambda: admin.state("long") == "succeeded", timeout=30, what="long to finish after the restart")
    wait_for(lambda: admin.state("whole-node") == "succeeded", timeout=30, what="whole-node to run after long")
    long = admin.describe("long")
    assert long.attempt == 1 and "preempted" not in history(long)  # the running job kept running
    assert [k for k in agent.launches if k[0] == long.id] == [(long.id, 1, 0)]
    assert max(agent.max_concurrent.values()) == 1
    assert admin.state("gone") == "cancelled" and admin.state("huge") == "queued"
    admin.close()

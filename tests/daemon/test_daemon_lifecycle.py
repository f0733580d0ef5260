"""A job's whole life through a live synergyd: queued, running, preempted, succeeded."""

from __future__ import annotations

from synergyd_harness import history, wait_for


def test_job_runs_to_success_and_keeps_its_history(start_daemon, start_agent) -> None:
    d = start_daemon()
    start_agent(d, "n1", gpus=4)
    admin = d.admin()
    job = admin.submit("train-a", gpus=2, model="resnet18", iterations=40, env={"FAKE_STEPS": "40"})
    assert job.id == 1 and history(job) == ["submitted", "profiling", "queued"]
    wait_for(lambda: admin.state("train-a") == "succeeded", what="train-a to succeed")
    info = admin.describe(1)
    assert history(info) == ["submitted", "profiling", "queued", "running", "succeeded"]
    assert all(t.reason for t in info.history)
    assert info.steps_done >= 40 and info.attempt == 1
    # Attained service is 2 GPUs times the time it ran (counted from renewals, so a bit less).
    ran = info.history[-1].at_unix_s - info.history[-2].at_unix_s
    assert 0 < info.attained_gpu_s <= 2 * ran + 1e-6, (info.attained_gpu_s, ran)
    admin.close()


def test_round_preempts_and_requeues_then_both_finish(start_daemon, start_agent) -> None:
    d = start_daemon("--policy", "las")
    agent = start_agent(d, "n1", gpus=2)
    admin = d.admin()
    admin.submit("first", gpus=2, iterations=150, env={"FAKE_STEPS": "150", "FAKE_STEP_S": "0.01"})
    wait_for(lambda: admin.state("first") == "running", what="first to run")
    admin.submit("second", gpus=2, iterations=150, env={"FAKE_STEPS": "150", "FAKE_STEP_S": "0.01"})
    wait_for(
        lambda: all(admin.state(n) == "succeeded" for n in ("first", "second")), timeout=40, what="both jobs to succeed"
    )
    first = admin.describe("first")
    states = history(first)
    # LAS hands the GPUs to the job with less service: `first` must have been preempted.
    assert "preempted" in states, states
    i = states.index("preempted")
    assert states[i - 1 : i + 3] == ["running", "preempted", "queued", "running"]
    assert first.preemptions >= 1 and first.attempt >= 2
    assert first.last_checkpoint_step > 0
    preempt = first.history[i]
    assert "lease not renewed" in preempt.reason
    # Never two attempts of one job alive at once on the node.
    assert max(agent.max_concurrent.values()) == 1
    admin.close()

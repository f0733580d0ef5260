"""Faults on the job side, end to end: a real synergyd, real `synergy-agent` processes (fake
GPUs, one core each) and real PyTorch jobs (train_script.py) with real DataLoaders.

* a machine dies mid-run (kill -9 of its agent and of every process in its cgroups): the
  node is declared lost, the job requeued onto the other node, resumed from its checkpoint;
* bad input (an unwritable checkpoint dir, a corrupt checkpoint on resume, a dataset path
  that does not exist) fails that job with one clear line in `synergy describe`, while a
  healthy job beside it runs to the end untouched;
* a script that ends with sys.exit(2) is FAILED, not SUCCEEDED;
* a script that imports grpc before synergy.iterator still gets gRPC's fork support.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_harness import is_root_with_v1
from cli_runner import run_cli
from job_cluster import Cluster, Row, records, train_command
from synergyd_harness import Admin, wait_for
from synergy.v1 import admin_pb2, common_pb2

pytestmark = pytest.mark.skipif(not is_root_with_v1(), reason="needs root and cgroup v1 (CI runs as root)")

RUNNING = common_pb2.JOB_STATE_RUNNING


def current_rows(admin: Admin, job: int, rec: Path) -> list[Row]:
    """Rows the job's current attempt has trained, while it is RUNNING (else none)."""
    info = admin.describe(job)
    if info.state != RUNNING:
        return []
    return [r for r in records(rec) if r.attempt == info.attempt]


def assert_each_sample_once(rows: list[Row], samples: int, epochs: int) -> None:
    assert [r.step for r in rows] == list(range(1, len(rows) + 1)), "steps not monotonic from 1"
    for epoch in range(epochs):
        ids = sorted(i for r in rows if r.epoch == epoch for i in r.ids)
        assert ids == list(range(samples)), f"epoch {epoch}: a batch repeated or skipped"


def finished(admin: Admin, job: int, state: str = "succeeded", timeout: float = 180) -> admin_pb2.JobInfo:
    try:
        wait_for(lambda: admin.state(job) == state, timeout=timeout, what=f"job {job} to be {state}")
    except AssertionError as exc:
        info = admin.describe(job)
        raise AssertionError(f"{exc} (is {admin.state(job)}: {info.state_reason})") from None
    return admin.describe(job)


def test_a_lost_machine_requeues_its_job_which_resumes_on_the_other_node_from_its_checkpoint(
        make_cluster, tmp_path: Path) -> None:
    # The node is lost after 3 s of silence; the lease grace is longer, so it is the node's
    # loss (not the job's silent lease) that requeues the job.
    c: Cluster = make_cluster("--node-timeout-s", "3", "--lease-grace-s", "20")
    admin = c.daemon.admin()
    rec, samples, epochs = tmp_path / "batches.txt", 400, 2
    job = admin.submit("survivor", gpus=1, command=train_command(
        rec, "--samples", str(samples), "--epochs", str(epochs), "--step-s", "0.03"),
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt")).id
    wait_for(lambda: len(current_rows(admin, job, rec)) >= 5, timeout=120, what="training to start")
    first = admin.describe(job).placements[0].node_id

    # A checkpoint first: drain the node, the job stops at the agreed step and moves.
    admin.DrainNode(admin_pb2.DrainNodeRequest(node_id=first, reason="force a checkpoint"))
    wait_for(lambda: admin.describe(job).attempt >= 2 and len(current_rows(admin, job, rec)) >= 5, timeout=120,
             what="the job to resume on the other node and train past its checkpoint")
    before = admin.describe(job)
    ckpt_step, doomed = before.last_checkpoint_step, before.attempt
    victim = before.placements[0].node_id
    assert ckpt_step > 0 and victim != first
    admin.ResumeNode(admin_pb2.ResumeNodeRequest(node_id=first))

    c.agent(victim).lose_machine()
    wait_for(lambda: admin.describe(job).attempt > doomed and admin.describe(job).state == RUNNING, timeout=120,
             what="the job to be requeued and relaunched")
    info = admin.describe(job)
    assert [p.node_id for p in info.placements] == [first]
    assert any(f"node {victim} lost" in t.reason for t in info.history), [t.reason for t in info.history]
    info = finished(admin, job)
    assert info.last_checkpoint_step >= ckpt_step
    admin.close()

    rows = records(rec)
    lost = [r for r in rows if r.attempt == doomed]
    final = [r for r in rows if r.attempt > doomed]
    assert lost and lost[0].step == ckpt_step + 1  # the lost attempt trained past the checkpoint
    assert final and final[0].step == ckpt_step + 1  # ... and its work after it is redone
    # Everything up to the checkpoint, then the final attempt: every sample once per epoch.
    assert_each_sample_once([r for r in rows if r.attempt < doomed] + final, samples, epochs)


@pytest.mark.parametrize("case", ["unwritable checkpoint dir", "corrupt checkpoint", "missing dataset"])
def test_bad_input_fails_the_job_with_one_line_and_leaves_the_job_beside_it_alone(
        make_cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    c: Cluster = make_cluster()  # one fake GPU per node: the two jobs run on different nodes
    admin = c.daemon.admin()
    ok_rec, bad_rec, release = tmp_path / "healthy.txt", tmp_path / "bad.txt", tmp_path / "release"
    # The healthy job trains to step 5 and holds there (renewing its lease) until released
    # after the bad job has failed: it is running beside it the whole time, whatever the load.
    healthy = admin.submit("healthy", gpus=1, command=train_command(
        ok_rec, "--samples", "80", "--epochs", "1", "--step-s", "0.02", "--hold-at", "5",
        "--hold-file", str(release)), working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt-healthy")).id
    wait_for(lambda: len(current_rows(admin, healthy, ok_rec)) >= 2, timeout=120, what="the healthy job to train")

    args = ["--samples", "2000", "--epochs", "1", "--step-s", "0.03"]
    ckpt = tmp_path / "ckpt-bad"
    if case == "unwritable checkpoint dir":
        (tmp_path / "a-file").write_text("")  # root writes anywhere: a path through a file is not writable
        ckpt = tmp_path / "a-file" / "ckpt"
        expect = [f"checkpoint dir {ckpt} is not writable"]
    elif case == "missing dataset":
        args += ["--data-dir", str(tmp_path / "no-such-dataset"), "--workers", "1"]
        expect = ["FileNotFoundError", str(tmp_path / "no-such-dataset")]
    else:
        expect = ["cannot resume: checkpoint", "is corrupt"]
    bad = admin.submit("bad", gpus=1, command=train_command(bad_rec, *args), working_dir=str(tmp_path),
                       checkpoint_dir=str(ckpt)).id

    if case == "corrupt checkpoint":
        wait_for(lambda: len(current_rows(admin, bad, bad_rec)) >= 3, timeout=120, what="the job to train")
        node = admin.describe(bad).placements[0].node_id
        # Drain its node: it checkpoints and waits (the healthy job holds the other node's GPU).
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id=node, reason="test"))
        wait_for(lambda: admin.state(bad) == "queued" and admin.describe(bad).last_checkpoint_path, timeout=120,
                 what="the job to checkpoint and wait")
        saved = Path(admin.describe(bad).last_checkpoint_path) / "rank0.pt"
        blob = saved.read_bytes()
        saved.write_bytes(blob[: len(blob) // 2] + b"garbage")  # what the daemon hands back is corrupt
        admin.ResumeNode(admin_pb2.ResumeNodeRequest(node_id=node))

    info = finished(admin, bad, "failed")
    reason = info.state_reason
    assert "\n" not in reason and "Traceback" not in reason, reason
    for text in expect:
        assert text in reason, reason
    shown = run_cli(capsys, "--state-dir", str(c.daemon.state_dir), "describe", str(bad))
    assert shown.code == 0 and "failed" in shown.out and "Traceback" not in shown.out
    flat = "".join(shown.out.split())  # the reason column may fold across lines
    assert all("".join(text.split()) in flat for text in expect), shown.out

    assert admin.state(healthy) == "running"
    release.touch()
    ok = finished(admin, healthy)
    assert ok.attempt == 1 and ok.preemptions == 0  # never stopped or moved
    assert_each_sample_once(records(ok_rec), 80, 1)
    admin.close()


def test_a_script_that_exits_2_fails_the_job(cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.daemon.admin()
    rec = tmp_path / "batches.txt"
    job = admin.submit("exits2", gpus=1, command=train_command(
        rec, "--samples", "16", "--epochs", "1", "--exit-code", "2"),
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt")).id
    info = finished(admin, job, "failed")
    assert "exit code 2" in info.state_reason, info.state_reason
    assert len(records(rec)) == 4  # it trained to the end, then exited 2
    admin.close()


def test_grpc_imported_before_the_iterator_still_gets_fork_support(cluster: Cluster, tmp_path: Path) -> None:
    admin = cluster.daemon.admin()
    rec = tmp_path / "batches.txt"
    job = admin.submit("grpcfirst", gpus=1, command=train_command(
        rec, "--grpc-first", "--samples", "32", "--epochs", "3", "--step-s", "0", "--workers", "2"),
        working_dir=str(tmp_path), checkpoint_dir=str(tmp_path / "ckpt")).id
    # Workers fork at every epoch while the lease channel is live ("Forks and the lease
    # channel" in docs/iterator.md); before the fork hooks this hung in 2 runs of 4.
    finished(admin, job)
    logs = "".join(a.task_log(job) for a in cluster.agents)
    assert "grpc fork support: True" in logs, logs[-2000:]
    # ... and the workers are silent: gRPC's `poll` poller logged this in each (issue 15, defect 7)
    assert "FD from fork parent" not in logs, logs[-2000:]
    assert_each_sample_once(records(rec), 32, 3)
    admin.close()

"""Periodic background checkpoints, in-process: real DataLoaders, real files, a real tmpfs.

As in test_position.py no daemon listens at the contract's address; the tests set the step
the daemon would have agreed (`lease.checkpoint_at`) and the stop step. The issue-15 defect
(a full checkpoint disk: torch's RuntimeError escaped `atomic_save`, the job FAILED and the
`.tmp` file stayed, keeping the disk full) is `test_a_full_disk_*`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import torch
from torch.utils.data import DataLoader

from synergy.common.contract import JobEnv
from synergy.iterator import SynergyIterator, checkpoint
from synergy.iterator.checkpoint import CheckpointError
from train_script import Indexed

N, B = 40, 4  # 10 batches an epoch


def env(ckpt: Path, attempt: int = 1, resume: str = "") -> dict[str, str]:
    return JobEnv(job_id=1, attempt=attempt, rank=0, world_size=1, daemon_address="127.0.0.1:1",
                  job_token="t", checkpoint_dir=str(ckpt), resume_checkpoint=resume).to_env()


class Ballast(torch.nn.Module):
    """`mb` MB of state, for checkpoints that take a while or fill a small disk."""

    def __init__(self, mb: float) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(int(mb * 2**20) // 4))


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 24 MB tmpfs (needs root: mount)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs (a full checkpoint disk)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def wrap(environ: dict[str, str], state: dict, keep: int = 2) -> SynergyIterator:
    loader = DataLoader(Indexed(N), batch_size=B, shuffle=True)
    it = SynergyIterator(loader, state=state, environ=environ, keep_checkpoints=keep)
    assert it.lease is not None
    it.lease.report_patience_s = 0  # nobody listens: report once, do not wait
    it.reports = []  # type: ignore[attr-defined]

    def report(step: int, path: str, error: str = "") -> bool:  # what the daemon would be told
        it.reports.append((step, path, error))  # type: ignore[attr-defined]
        return not error

    it.lease.report_checkpoint = report  # type: ignore[method-assign]
    return it


def train(it: SynergyIterator, model: torch.nn.Module, epochs: int, every: int = 0, stop_at: int = 0,
          seen: list[int] | None = None) -> int:
    """Train; every `every` steps agree a periodic checkpoint one step ahead (as the daemon would)."""
    assert it.lease is not None
    it.lease.stop_at = stop_at
    code = 0
    try:
        for _ in range(epochs):
            for _x, _y, ids in it:
                if seen is not None:
                    seen.extend(ids.tolist())
                with torch.no_grad():
                    model.weight.add_(1.0)
                if every and it.lease.step % every == 0:
                    it.lease.checkpoint_at = it.lease.step + 1
                    if it.writer is not None:  # a step lasts longer than a write (kept apart)
                        it.writer.wait()
    except SystemExit as exc:
        code = int(exc.code or 0)
    if it.writer is not None:
        it.writer.wait()
    it.lease.close()
    return code


def test_a_full_disk_during_a_write_raises_checkpoint_dir_full_and_leaves_no_temp_file(tmpfs: Path) -> None:
    good = checkpoint.step_dir(tmpfs, 1)
    checkpoint.atomic_save({"position": {}, "state": torch.zeros(10 * 2**18)}, checkpoint.rank_file(good, 0))  # 10 MB
    with pytest.raises(CheckpointError, match="checkpoint dir full") as exc:  # 20 MB more do not fit
        checkpoint.atomic_save({"position": {}, "state": torch.zeros(20 * 2**18)},
                               checkpoint.rank_file(checkpoint.step_dir(tmpfs, 2), 0))
    assert exc.value.kind == checkpoint.FULL
    assert not [p for p in tmpfs.rglob("*") if p.name.endswith(".tmp")], "the temp file keeps the disk full"
    assert checkpoint.load(good, 0)["state"].numel() == 10 * 2**18


def test_a_full_disk_during_a_background_write_keeps_training(tmpfs: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(4, 1)
    it = wrap(env(tmpfs), {"model": model, "ballast": Ballast(10)})
    seen: list[int] = []
    assert train(it, model, epochs=2, every=4, seen=seen) == 0  # ran to the end
    assert sorted(seen) == sorted(list(range(N)) * 2)
    assert it.periodic_written >= 1 and it.periodic_failed >= 1
    assert "checkpoint dir full" in capfd.readouterr().err
    assert not [p for p in tmpfs.rglob("*") if p.name.endswith(".tmp")]
    newest = checkpoint.steps(tmpfs)
    assert checkpoint.load(checkpoint.step_dir(tmpfs, newest[-1]), 0)["position"]["step"] == newest[-1]


def test_a_full_disk_at_a_stop_exits_75_without_a_new_checkpoint(tmpfs: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(4, 1)
    it = wrap(env(tmpfs), {"model": model, "ballast": Ballast(10)})
    # 24 MB: 5 MB of filler and a periodic checkpoint at step 3 (10 MB) fit; the stop's at
    # step 6 (10 MB more) does not
    (tmpfs / "filler").write_bytes(b"\0" * (5 * 2**20))
    code = 0
    it.lease.stop_at = 6
    it.lease.checkpoint_at = 3
    try:
        for _ in it:
            pass
    except SystemExit as exc:
        code = int(exc.code or 0)
    it.lease.close()
    err = capfd.readouterr().err
    assert code == 75, err
    assert "checkpoint dir full" in err and "resumes from its last good one" in err
    assert checkpoint.steps(tmpfs) == [3]  # the last good one; the failed stop left no step dir
    assert not [p for p in tmpfs.rglob("*") if p.name.endswith(".tmp")]


def test_periodic_checkpoints_keep_the_last_two_and_resume_from_the_newest(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    model = torch.nn.Linear(4, 1)
    seen: list[int] = []
    it = wrap(env(ckpt), {"model": model})
    assert train(it, model, epochs=3, every=3, stop_at=0, seen=seen) == 0
    assert it.periodic_written == len(range(4, 31, 3)), it.periodic_written
    assert checkpoint.steps(ckpt) == [25, 28]  # agreed one step after every third
    # Resume from the newest (as after a lost node): the state and every sample of the epoch once.
    newest = checkpoint.step_dir(ckpt, 28)
    model2 = torch.nn.Linear(4, 1)
    it2 = wrap(env(ckpt, 2, str(newest)), {"model": model2})
    with torch.no_grad():  # the weights grow by 1 a step: 30 steps trained, 28 restored
        assert torch.allclose(model.weight - model2.weight, torch.full_like(model.weight, 2.0))
    again: list[int] = []
    train(it2, model2, epochs=3, seen=again)
    # epoch 3 is steps 21-30: 21-28 before the checkpoint, the rest after the resume, each sample once
    assert sorted(seen[80:28 * B] + again) == list(range(N))


def test_a_snapshot_due_while_the_previous_is_written_is_skipped_and_a_stop_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    release = threading.Event()
    real = checkpoint.atomic_save

    def slow(obj, path):  # the first periodic write takes until the test releases it
        if "step-000000002" in str(path):
            release.wait(30)
        return real(obj, path)

    monkeypatch.setattr(checkpoint, "atomic_save", slow)
    model = torch.nn.Linear(4, 1)
    it = wrap(env(tmp_path / "ckpt"), {"model": model})
    it.lease.checkpoint_at = 2
    threading.Timer(1.0, release.set).start()
    code = 0
    it.lease.stop_at = 9
    try:
        for _x, _y, _ids in it:
            if it.lease.step == 5:
                it.lease.checkpoint_at = 6  # due while step 2's write is still in flight
    except SystemExit as exc:
        code = int(exc.code or 0)
    it.lease.close()
    err = capfd.readouterr().err
    assert code == 75
    assert "periodic checkpoint at step 6 skipped: the one of step 2 is still being written" in err
    assert "stop: waiting for the background checkpoint of step 2" in err
    assert it.periodic_written == 1 and it.periodic_skipped == 1
    assert checkpoint.steps(tmp_path / "ckpt") == [2, 9]


def test_retention_counts_complete_reported_checkpoints_and_old_dirs_stay_loadable(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    for step in (5, 10):  # written by the old single-checkpoint-per-stop code: the same layout
        checkpoint.atomic_save({"position": {"step": step}, "state": {}}, checkpoint.rank_file(checkpoint.step_dir(root, step), 0))
    checkpoint.atomic_save({"position": {"step": 15}}, checkpoint.rank_file(checkpoint.step_dir(root, 15), 1))  # incomplete
    assert checkpoint.retain(root, 2, 1, newest_reported=10) == []
    assert checkpoint.load(checkpoint.step_dir(root, 5), 0)["position"]["step"] == 5
    # two ranks: step 15 lacks rank 0, so it does not count, and nothing older than it goes
    assert checkpoint.retain(root, 1, 2, newest_reported=15) == []
    checkpoint.atomic_save({"position": {"step": 20}}, checkpoint.rank_file(checkpoint.step_dir(root, 20), 0))
    assert checkpoint.retain(root, 1, 1, newest_reported=15) == [5]  # 20 is not reported yet
    assert checkpoint.retain(root, 1, 1, newest_reported=20) == [10, 15]
    assert checkpoint.steps(root) == [20]


BACKGROUND_WRITER = """
import sys, torch
from pathlib import Path
from torch.utils.data import DataLoader
sys.path.insert(0, sys.argv[2])
from train_script import Indexed
from synergy.common.contract import JobEnv
from synergy.iterator import SynergyIterator
env = JobEnv(job_id=1, attempt=1, rank=0, world_size=1, daemon_address="127.0.0.1:1", job_token="t",
             checkpoint_dir=sys.argv[1]).to_env()
class Ballast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.zeros(16_000_000))
it = SynergyIterator(DataLoader(Indexed(10**6), batch_size=4), state={"m": Ballast()}, environ=env, keep_checkpoints=1)
it.lease.report_patience_s = 0
for _ in it:
    if it.lease.step % 50 == 0:
        it.lease.checkpoint_at = it.lease.step + 1
        print(it.lease.step, it.periodic_written, flush=True)
"""


def test_kill_9_during_a_background_write_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    here = str(Path(__file__).parent)
    for delay in (0.07, 0.19, 0.41):
        proc = subprocess.Popen([sys.executable, "-c", BACKGROUND_WRITER, str(ckpt), here], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None
        for line in proc.stdout:  # one background checkpoint written and another under way
            if int(line.split()[1]) >= 1:
                break
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = [s for s in checkpoint.steps(ckpt) if checkpoint.complete(checkpoint.step_dir(ckpt, s), 1)]
        assert done, "no loadable checkpoint left"
        data = checkpoint.load(checkpoint.step_dir(ckpt, done[-1]), 0)
        assert data["position"]["step"] == done[-1] and data["state"]["m"]["b"].numel() == 16_000_000


def test_a_snapshot_is_a_copy_and_the_next_one_reuses_its_buffers() -> None:
    from synergy.iterator.background import snapshot_copy

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "pos": {"step": 3}}
    first = snapshot_copy(state)
    with torch.no_grad():
        model.weight.add_(1.0)  # training goes on after the snapshot
    assert not torch.equal(first["model"]["weight"], model.weight)
    assert hasattr(first["model"], "_metadata")  # a module state_dict's version info survives
    ptr = first["model"]["weight"].data_ptr()
    second = snapshot_copy({"model": model.state_dict(), "opt": opt.state_dict(), "pos": {"step": 4}}, first)
    assert second["model"]["weight"].data_ptr() == ptr and torch.equal(second["model"]["weight"], model.weight)
    assert second["pos"]["step"] == 4
    opt2 = torch.optim.Adam(torch.nn.Linear(4, 2).parameters())
    opt2.load_state_dict(second["opt"])


def test_a_read_only_disk_at_a_stop_exits_75_and_the_relaunch_fails_clearly_at_start(
        tmpfs: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = torch.nn.Linear(4, 1)
    it = wrap(env(tmpfs), {"model": model})
    it.lease.checkpoint_at, it.lease.stop_at = 2, 5
    code = 0
    try:
        for _ in it:
            if it.lease.step == 4:
                it.writer.wait()  # the periodic checkpoint of step 2 is on disk, then the fs turns read-only
                subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    except SystemExit as exc:
        code = int(exc.code or 0)
    it.lease.close()
    err = capfd.readouterr().err
    assert code == 75 and "checkpoint dir read-only" in err, err
    assert checkpoint.steps(tmpfs) == [2]
    with pytest.raises(SystemExit) as exc:  # the relaunch, resuming from step 2, cannot write there
        wrap(env(tmpfs, 2, str(checkpoint.step_dir(tmpfs, 2))), {"model": torch.nn.Linear(4, 1)})
    assert exc.value.code == 1 and "is not writable: Read-only file system" in capfd.readouterr().err

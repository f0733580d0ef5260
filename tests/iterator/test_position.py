"""Stop/resume of the position in-process: real DataLoaders, real checkpoint files.

No daemon listens at the contract's address here, so the lease thread keeps retrying in the
background while the loop trains (the "daemon is down" case); the tests set the stop step the
daemon would have sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from synergy.common.contract import JobEnv
from synergy.iterator import ElasticSampler, SynergyIterator, checkpoint
from synergy.iterator.checkpoint import CheckpointError
from train_script import Indexed

N, B = 22, 4  # 6 batches an epoch, the last one short


def env(tmp: Path, attempt: int, resume: str = "", rank: int = 0, world: int = 1) -> dict[str, str]:
    return JobEnv(job_id=1, attempt=attempt, rank=rank, world_size=world, daemon_address="127.0.0.1:1",
                  job_token="t", checkpoint_dir=str(tmp / "ckpt"), resume_checkpoint=resume).to_env()


def attempt(environ: dict[str, str], epochs: int, stop_at: int, workers: int = 0,
            sampler: object = None) -> tuple[list[tuple[int, list[int]]], str]:
    """One process's life: returns ((script epoch, ids) per batch, checkpoint dir or "" at the end)."""
    torch.manual_seed(123)  # the script seeds on every launch; a resume must override it
    # forkserver: this pytest process initialised gRPC before synergy.iterator could turn on gRPC's
    # fork support (a job script imports the iterator first; see iterator/__init__.py)
    loader = DataLoader(Indexed(N), batch_size=B, shuffle=sampler is None, sampler=sampler, num_workers=workers,
                        multiprocessing_context="forkserver" if workers else None)
    model = torch.nn.Linear(4, 1)
    it = SynergyIterator(loader, state={"model": model}, environ=environ)
    assert it.lease is not None
    it.lease.stop_at = stop_at
    it.lease.report_patience_s = 0  # nobody listens: report once, do not wait
    seen: list[tuple[int, list[int]]] = []
    try:
        for e in range(epochs):
            if isinstance(sampler, ElasticSampler):
                sampler.set_epoch(e)
            for _, _, ids in it:
                seen.append((e, ids.tolist()))
                with torch.no_grad():
                    model.weight.add_(1.0)  # state the resume must bring back
    except SystemExit as exc:
        assert exc.code == 75
        assert it.stopped_step == stop_at
        return seen, str(checkpoint.step_dir(environ["SYNERGY_CHECKPOINT_DIR"], stop_at))
    finally:
        it.lease.close()
    return seen, ""


def run_with_stops(tmp: Path, epochs: int, stops: list[int], workers: int = 0) -> list[tuple[int, list[int]]]:
    seen: list[tuple[int, list[int]]] = []
    resume = ""
    for n, stop in enumerate([*stops, 0]):
        got, resume = attempt(env(tmp, n + 1, resume), epochs, stop, workers)
        seen += got
        if not resume:
            break
    return seen


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 17), min_size=1, max_size=3, unique=True))
def test_random_stops_over_shuffled_epochs_consume_each_sample_once_in_order(tmp_path_factory, stops) -> None:
    tmp = tmp_path_factory.mktemp("stops")
    epochs = 3
    reference = run_with_stops(tmp_path_factory.mktemp("ref"), epochs, [])
    got = run_with_stops(tmp, epochs, sorted(stops))
    for e in range(epochs):
        ids = sorted(i for ep, batch in got if ep == e for i in batch)
        assert ids == list(range(N)), f"epoch {e}"
    assert got == reference  # same order as an uninterrupted run: no batch repeated or skipped


def test_resume_with_worker_processes(tmp_path: Path) -> None:
    reference = run_with_stops(tmp_path / "ref", 2, [], workers=2)
    assert run_with_stops(tmp_path / "run", 2, [4, 9], workers=2) == reference


def test_state_and_step_are_restored(tmp_path: Path) -> None:
    _, ck = attempt(env(tmp_path, 1), 2, 5)
    model = torch.nn.Linear(4, 1)
    it = SynergyIterator(DataLoader(Indexed(N), batch_size=B), state={"model": model},
                         environ=env(tmp_path, 2, ck))
    try:
        assert it.lease.step == 5 and it.position.batches == 5
        assert torch.allclose(model.weight, torch.nn.Linear(4, 1).weight * 0 + model.weight)
        assert float(model.weight.detach().min()) > 4.0  # five +1.0 updates came back from the checkpoint
    finally:
        it.lease.close()


def test_elastic_resume_with_a_different_world_size(tmp_path: Path) -> None:
    seen: list[int] = []
    ck = ""
    for rank in range(2):  # two ranks stop after 2 batches of the epoch
        s = ElasticSampler(N, rank, 2, seed=5)
        got, ck = attempt(env(tmp_path, 1, rank=rank, world=2), 1, 2, sampler=s)
        seen += [i for _, b in got for i in b]
    for rank in range(3):  # three ranks finish the epoch
        s = ElasticSampler(N, rank, 3, seed=5)
        got, _ = attempt(env(tmp_path, 2, ck, rank=rank, world=3), 1, 0, sampler=s)
        seen += [i for _, b in got for i in b]
    rest = N - 16  # 16 consumed by the old world, the rest re-split into equal shares
    assert len(seen) == len(set(seen)) == 16 + rest - rest % 3


def test_standalone_passes_batches_through(capfd: pytest.CaptureFixture[str]) -> None:
    loader = DataLoader(Indexed(N), batch_size=B)
    it = SynergyIterator(loader, state={}, environ={})
    assert [b[2].tolist() for b in it] == [b[2].tolist() for b in loader]
    assert it.lease is None
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "standalone" in err


def test_corrupt_checkpoint_fails_with_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _, ck = attempt(env(tmp_path, 1), 1, 3)
    data = checkpoint.rank_file(ck, 0)
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(SystemExit) as exc:
        SynergyIterator(DataLoader(Indexed(N), batch_size=B), state={}, environ=env(tmp_path, 2, ck))
    assert exc.value.code == 1
    assert "is corrupt" in capfd.readouterr().err


def test_unwritable_checkpoint_dir_fails_at_start(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    e = env(tmp_path, 1)
    e["SYNERGY_CHECKPOINT_DIR"] = str(tmp_path / "file" / "ckpt")
    with pytest.raises(SystemExit) as exc:
        SynergyIterator(DataLoader(Indexed(N), batch_size=B), state={}, environ=e)
    assert exc.value.code == 1
    assert "is not writable" in capfd.readouterr().err


WRITER = """
import sys, torch
from pathlib import Path
from synergy.iterator import checkpoint
blob = {"position": {"step": 0}, "state": torch.zeros(4_000_000)}
n = 0
while True:
    n += 1
    blob["position"]["step"] = n
    checkpoint.atomic_save(blob, Path(sys.argv[1]))
    print(n, flush=True)
"""


def test_kill_9_during_a_checkpoint_leaves_the_previous_one_loadable(tmp_path: Path) -> None:
    target = checkpoint.rank_file(tmp_path / "step-1", 0)
    for delay in (0.05, 0.11, 0.23):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        proc.stdout.readline()  # one complete checkpoint exists
        time.sleep(delay)       # then kill it wherever it is in the next write
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        data = checkpoint.load(target.parent, 0)
        assert data["position"]["step"] >= 1 and data["state"].numel() == 4_000_000


def test_load_names_the_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "nope", 0)


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")  # 3 workers on 2 cores, briefly
def test_loader_workers_follow_the_cpus_in_force_never_below_the_scripts(tmp_path: Path) -> None:
    """Managed and not profiling, the loader runs with `workers_for(CPUs in force)` workers,
    as each profiling point measured it (4 CPUs: 3 workers, not the script's 1), and never
    fewer than the script's own; a resize switches them at the current position, so every
    sample is still seen once per epoch."""
    loader = DataLoader(Indexed(N), batch_size=B, shuffle=True, num_workers=1, multiprocessing_context="forkserver")
    it = SynergyIterator(loader, state={"model": torch.nn.Linear(4, 1)}, environ=env(tmp_path, 1))
    lease = it.lease
    assert lease is not None
    lease.report_patience_s = 0
    lease.registered.set()  # as after a registration whose reply had no profiling lease
    # After the k-th batch: the next batch comes from the loader as sized for it.
    in_force = {2: (4.0, (0, 1, 2, 3), 4.0), 9: (0.5, (0,), 4.0), 14: (3.0, (0, 1, 2), 4.0)}
    workers, ids = [], []
    try:
        for _ in range(3):
            for _, _, batch in it:
                workers.append(loader.num_workers)
                ids += batch.tolist()
                lease.in_force = in_force.get(len(workers), lease.in_force)
    finally:
        lease.close()
    assert workers[:2] == [1, 1] and workers[2:9] == [3] * 7 and workers[9:14] == [1] * 5, workers
    assert workers[14:] == [2] * (len(workers) - 14), workers
    assert sorted(ids) == sorted(list(range(N)) * 3)  # every sample once per epoch across the switches

"""SynergyIterator around a real DALIGenericIterator (a CPU pipeline), stopped and resumed in-process.

As in test_position.py, no daemon listens at the contract's address: the tests set the stop
step the daemon would have sent. Every run is compared with an uninterrupted one: same batches
in the same order over several shuffled epochs, none repeated, none skipped. Both ways back are
covered: a pipeline built from the saved DALI checkpoint, and one that is not (read and drop).
"""

from __future__ import annotations

import atexit
import gc
import sys
from pathlib import Path
from typing import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synergy.common.contract import JobEnv
from synergy.iterator import SynergyIterator, checkpoint
from synergy.iterator.dali import KEY, DaliState, resume_checkpoint

dali = pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda130, the dali extra) does not import")
from nvidia.dali import fn, pipeline_def  # noqa: E402
from nvidia.dali.plugin.pytorch import DALIGenericIterator  # noqa: E402

N, B, EPOCHS = 12, 4, 3  # 3 batches an epoch


@pytest.fixture(scope="module", autouse=True)
def _release_iterators() -> Iterator[None]:
    """Each SynergyIterator hooks the process's exit (atexit, sys.excepthook, sys.exit), as a
    job's one iterator should; here a process makes dozens, and those hooks kept every DALI
    pipeline alive until interpreter exit, when `Pipeline.__del__` ran without DALI's module
    globals and printed "'NoneType' object is not callable" after pytest's summary (issue 15).
    The hooks are undone after the module's tests and the pipelines collected while DALI is whole."""
    with pytest.MonkeyPatch.context() as patch:  # module scope: `reference` makes iterators too
        patch.setattr(sys, "excepthook", sys.excepthook)
        patch.setattr(sys, "exit", sys.exit)
        patch.setattr(atexit, "register", lambda func, *a, **kw: func)
        yield
    gc.collect()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("bin")
    paths = []
    for i in range(N):
        p = d / f"{i:03d}.bin"
        p.write_bytes(bytes([i]) * 16)
        paths.append(str(p))
    return paths


@pipeline_def(batch_size=B, num_threads=1, device_id=None, seed=7)
def _pipe(files: list[str]):  # type: ignore[no-untyped-def]
    data, ids = fn.readers.file(files=files, labels=list(range(len(files))), random_shuffle=True,
                                initial_fill=len(files), name="r")
    flip = fn.random.coin_flip()  # a random operator: its state must come back too
    return data, ids, flip


def make_iterator(files: list[str], ckpt: str | None, checkpointing: bool) -> DALIGenericIterator:
    pipe = _pipe(files, enable_checkpointing=checkpointing, checkpoint=ckpt if checkpointing else None)
    return DALIGenericIterator([pipe], ["data", "ids", "flip"], reader_name="r")


def env(tmp: Path, attempt: int, resume: str = "") -> dict[str, str]:
    return JobEnv(job_id=1, attempt=attempt, rank=0, world_size=1, daemon_address="127.0.0.1:1",
                  job_token="t", checkpoint_dir=str(tmp / "ckpt"), resume_checkpoint=resume).to_env()


def attempt(files: list[str], environ: dict[str, str], stop_at: int, checkpointing: bool) -> tuple[list, str]:
    """One process's life: ((epoch, ids, flips) per batch, checkpoint dir or "" at the end)."""
    loader = make_iterator(files, resume_checkpoint(environ=environ), checkpointing)
    it = SynergyIterator(loader, state={}, environ=environ)
    assert it.lease is not None
    it.lease.stop_at = stop_at
    it.lease.report_patience_s = 0
    seen = []
    try:
        for e in range(EPOCHS):
            for batch in it:
                seen.append((e, batch[0]["ids"].flatten().tolist(), batch[0]["flip"].flatten().tolist()))
    except SystemExit as exc:
        assert exc.code == 75
        return seen, str(checkpoint.step_dir(environ["SYNERGY_CHECKPOINT_DIR"], stop_at))
    finally:
        it.lease.close()
    return seen, ""


def run_with_stops(files: list[str], tmp: Path, stops: list[int], checkpointing: bool) -> list:
    seen: list = []
    resume = ""
    for n, stop in enumerate([*stops, 0]):
        got, resume = attempt(files, env(tmp, n + 1, resume), stop, checkpointing)
        seen += got
        if not resume:
            break
    return seen


@pytest.fixture(scope="module")
def reference(files: list[str], tmp_path_factory: pytest.TempPathFactory) -> list:
    ref = run_with_stops(files, tmp_path_factory.mktemp("ref"), [], True)
    assert len(ref) == EPOCHS * N // B
    for e in range(EPOCHS):
        assert sorted(i for ep, ids, _ in ref if ep == e for i in ids) == list(range(N))
    assert len({tuple(ids) for ep, ids, _ in ref if ep < 2}) > 3, "DALI should shuffle differently per epoch"
    return ref


@pytest.mark.parametrize("checkpointing", [True, False], ids=["dali-checkpoint", "read-and-drop"])
@pytest.mark.parametrize("stops", [[3], [4], [2, 6], [1, 5, 8]], ids=str)
def test_dali_stops_resume_at_the_next_unconsumed_batch(files, reference, tmp_path, stops, checkpointing) -> None:
    """Stops mid-epoch and exactly at epoch ends (3, 6): same batches, same order, same random draws."""
    assert run_with_stops(files, tmp_path, stops, checkpointing) == reference


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 8), min_size=1, max_size=2, unique=True))
def test_random_dali_stops_match_an_uninterrupted_run(files, reference, tmp_path_factory, stops) -> None:
    assert run_with_stops(files, tmp_path_factory.mktemp("s"), sorted(stops), True) == reference


def test_the_checkpoint_holds_dalis_state_and_resume_checkpoint_returns_it(files, tmp_path) -> None:
    _, ckpt = attempt(files, env(tmp_path, 1), 2, True)
    saved = checkpoint.load(ckpt, 0)[KEY]
    assert isinstance(saved, list) and len(saved) == 1 and saved[0]
    assert resume_checkpoint(environ=env(tmp_path, 2, ckpt)) == saved[0]
    assert resume_checkpoint(environ=env(tmp_path, 1)) is None  # a first attempt
    assert resume_checkpoint(environ={}) is None  # standalone


def test_len_batch_size_and_standalone_epochs_with_reset(files) -> None:
    loader = make_iterator(files, None, False)
    assert DaliState.of(loader) is not None and DaliState.of([1, 2]) is None
    it = SynergyIterator(loader, state={}, environ={})
    assert it.lease is None and len(it) == N // B and it.batch_size == B
    epochs = [[i for b in it for i in b[0]["ids"].flatten().tolist()] for _ in range(2)]
    assert [sorted(e) for e in epochs] == [list(range(N))] * 2  # DALI reset between the epochs

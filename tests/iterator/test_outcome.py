"""The one line a job's ReportCompletion carries (iterator/outcome.py), from real exceptions."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from synergy.iterator.outcome import exception_line, exit_failure
from train_script import Indexed


def test_a_dataloader_worker_exception_becomes_its_last_line_and_where(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dataset"
    # forkserver: this pytest process has initialised gRPC (see test_position.py)
    loader = DataLoader(Indexed(8, str(missing)), batch_size=4, num_workers=1, multiprocessing_context="forkserver")
    with pytest.raises(FileNotFoundError) as exc:
        next(iter(loader))
    assert "\n" in str(exc.value)  # the worker's traceback is the message
    line = exception_line(exc.type, exc.value)
    assert "\n" not in line and "Traceback" not in line, line
    assert line.startswith("FileNotFoundError: [Errno 2] No such file or directory") and str(missing) in line
    assert line.endswith("(Caught FileNotFoundError in DataLoader worker process 0)")


def test_a_one_line_exception_keeps_its_type_and_message() -> None:
    assert exception_line(ValueError, ValueError("bad lr")) == "ValueError: bad lr"
    assert exception_line(KeyError, KeyError()) == "KeyError"


@pytest.mark.parametrize(("code", "failure"), [
    (None, ""), (0, ""), (2, "the script exited with exit code 2"),
    ("no data\nat all", "the script exited with exit code 1: no data at all"),
])
def test_exit_failure_follows_sys_exit(code: object, failure: str) -> None:
    assert exit_failure(code) == failure

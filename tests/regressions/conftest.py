"""Fixtures for regression tests (daemons and fake agents come from tests/conftest.py)."""

from __future__ import annotations

from typing import Callable

import pytest
from cli_runner import Run, run_cli
from synergyd_harness import DaemonProcess


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """`cli(daemon, ARGS...)`: `synergy ARGS...` in-process against `daemon` (via --state-dir)."""

    def run(daemon: DaemonProcess, *args: str) -> Run:
        return run_cli(capsys, "--state-dir", str(daemon.state_dir), *args)

    return run

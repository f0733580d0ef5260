"""A real synergyd for the CLI tests: 127.0.0.1, port 0, a temporary state dir.

One daemon per test module (start-up costs about a second); tests use distinct job names so
they do not depend on one another.
"""
from __future__ import annotations

from typing import Iterator

import pytest
from cli_runner import Run, run_cli
from synergyd_harness import DaemonProcess


@pytest.fixture(scope="module")
def synergyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(tmp_path_factory.mktemp("synergyd") / "state", "--log-level", "warning", round_s=1)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.terminate()


@pytest.fixture
def cli(synergyd: DaemonProcess, capsys: pytest.CaptureFixture[str]):
    """Run `synergy ARGS...` in-process against the module's daemon (found via --state-dir)."""

    def run(*args: str, state_dir: bool = True) -> Run:
        return run_cli(capsys, *(["--state-dir", str(synergyd.state_dir)] if state_dir else []), *args)

    return run

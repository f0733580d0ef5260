"""A real synergyd for the CLI tests: 127.0.0.1, port 0, a temporary state dir.

One daemon per test module (start-up costs about a second); tests use distinct job names so
they do not depend on one another.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from synergyd_harness import DaemonProcess

from synergy.scheduler.cli.main import main


@pytest.fixture(scope="module")
def synergyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(tmp_path_factory.mktemp("synergyd") / "state", "--log-level", "warning", round_s=1)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.terminate()


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The developer's own SYNERGY_* settings must not leak into the tests."""
    for name in list(os.environ):
        if name.startswith("SYNERGY_"):
            monkeypatch.delenv(name)
    # Keep the default state dir (~/.local/state/synergy) out of reach too.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("COLUMNS", "200")


@dataclass
class Run:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(synergyd: DaemonProcess, capsys: pytest.CaptureFixture[str]):
    """Run `synergy ARGS...` in-process against the module's daemon (found via --state-dir)."""

    def run(*args: str, state_dir: bool = True) -> Run:
        capsys.readouterr()
        argv = (["--state-dir", str(synergyd.state_dir)] if state_dir else []) + list(args)
        code = main(argv)
        captured = capsys.readouterr()
        return Run(int(code), captured.out, captured.err)

    return run

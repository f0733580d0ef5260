"""A real synergyd for the CLI tests: 127.0.0.1, port 0, a temporary state dir.

One daemon per test module (start-up costs about a second); tests use distinct job names so
they do not depend on one another.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from synergy.scheduler.cli.main import main
from synergy.scheduler.daemon.statedir import ADDRESS_FILE, ADMIN_TOKEN_FILE, CLUSTER_TOKEN_FILE

START_TIMEOUT_S = 30.0


@dataclass
class Daemon:
    process: subprocess.Popen
    state_dir: Path
    address: str

    @property
    def admin_token(self) -> str:
        return (self.state_dir / ADMIN_TOKEN_FILE).read_text().strip()

    @property
    def cluster_token(self) -> str:
        return (self.state_dir / CLUSTER_TOKEN_FILE).read_text().strip()


def start_synergyd(state_dir: Path, *extra: str) -> Daemon:
    """Start synergyd and wait until it has written its address (i.e. it is serving)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = open(state_dir.parent / f"{state_dir.name}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(state_dir),
         "--host", "127.0.0.1", "--port", "0", "--round-s", "1", "--log-level", "warning", *extra],
        stdout=log, stderr=subprocess.STDOUT,
    )
    log.close()
    address_file = state_dir / ADDRESS_FILE
    deadline = time.monotonic() + START_TIMEOUT_S
    while not address_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            output = (state_dir.parent / f"{state_dir.name}.log").read_text(errors="replace")
            raise RuntimeError(f"synergyd did not start (rc={proc.returncode}): {output[-2000:]}")
        time.sleep(0.05)
    return Daemon(proc, state_dir, address_file.read_text().strip())


def stop_synergyd(daemon: Daemon) -> None:
    if daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait()


@pytest.fixture(scope="module")
def synergyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = start_synergyd(tmp_path_factory.mktemp("synergyd") / "state")
    try:
        yield daemon
    finally:
        stop_synergyd(daemon)


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
def cli(synergyd: Daemon, capsys: pytest.CaptureFixture[str]):
    """Run `synergy ARGS...` in-process against the module's daemon (found via --state-dir)."""

    def run(*args: str, state_dir: bool = True) -> Run:
        capsys.readouterr()
        argv = (["--state-dir", str(synergyd.state_dir)] if state_dir else []) + list(args)
        code = main(argv)
        captured = capsys.readouterr()
        return Run(int(code), captured.out, captured.err)

    return run

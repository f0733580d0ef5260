"""Run the `synergy` CLI in-process and capture what it printed (for the CLI fixtures)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from synergy.scheduler.cli.main import main


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    """`synergy ARGS...`; output printed before the call is discarded."""
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return Run(int(code), captured.out, captured.err)

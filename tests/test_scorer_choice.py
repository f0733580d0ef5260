"""Scorers chosen by name: synergyd's --scorer (flag and TOML key) and synergy-sim's."""
from __future__ import annotations

from pathlib import Path

import pytest

from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.placement.scorers import first_fit
from synergy.scheduler.simulator.cli import _run_parser
from synergy.scheduler.simulator.cli import spec_from_args
from synergy.scheduler.simulator.experiment import build


def test_daemon_scorer_flag_and_toml(tmp_path: Path) -> None:
    assert load_config(["--state-dir", str(tmp_path)]).scorer == ""  # the mechanism's own
    assert load_config(["--state-dir", str(tmp_path), "--scorer", "first_fit"]).scorer == "first_fit"
    toml = tmp_path / "d.toml"
    toml.write_text('scorer = "alignment"\n')
    assert load_config(["--state-dir", str(tmp_path), "--config", str(toml)]).scorer == "alignment"
    with pytest.raises(ConfigError, match=r"^--scorer: unknown scorer 'worst'; choose one of best_fit, first_fit"):
        load_config(["--state-dir", str(tmp_path), "--scorer", "worst"])


def test_simulator_takes_the_same_names() -> None:
    args = _run_parser().parse_args(["--scorer", "first_fit"])
    assert build(spec_from_args(args)).mechanism.scorer is first_fit

"""Issue 6, defect 7 (part): `synergyd --max-message-mb 100000` crashed with an OverflowError traceback.

gRPC takes the limit as a signed 32-bit byte count. Now the flag is checked against
1..2047 MiB like every other flag: one line naming it, exit code 2, before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from statedir_helpers import assert_refused, run_synergyd

from synergy.scheduler.daemon.config import ConfigError, load_config


@pytest.mark.parametrize("value", ["100000", "2048", "0.5", "0", "-1", "nan", "inf"])
def test_out_of_range_is_one_line_naming_the_flag(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"^--max-message-mb must be between 1 and 2047"):
        load_config(["--state-dir", str(tmp_path), "--max-message-mb", value])


def test_the_daemon_refuses_with_exit_code_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert_refused(run_synergyd(state, "--max-message-mb", "100000"), 2, "--max-message-mb", "2047", "100000")
    assert not state.exists()  # refused before touching the state dir


def test_the_largest_value_starts(tmp_path: Path) -> None:
    outcome = run_synergyd(tmp_path / "state", "--max-message-mb", "2047")
    assert outcome.started and outcome.code == 0, outcome.stderr

"""Issue 15 (6): `make test` ended with DALI's `Pipeline.__del__` traceback ("'NoneType' object
is not callable") printed after pytest's summary: iterators' exit hooks kept the pipelines alive
until interpreter exit. The DALI tests, run on their own, must end quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda130, the dali extra) does not import")

TESTS = Path(__file__).resolve().parents[1]


def test_the_dali_tests_end_without_a_traceback_after_the_summary() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          str(TESTS / "iterator" / "test_dali.py")], capture_output=True, text=True, timeout=300,
                         cwd=TESTS.parent)
    assert out.returncode == 0, out.stdout[-2000:]
    text = out.stdout + out.stderr
    assert "Exception ignored" not in text and "Pipeline.__del__" not in text, text[-2000:]

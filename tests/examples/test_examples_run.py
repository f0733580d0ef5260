"""Each example runs standalone for a few steps (a real subprocess, real PyTorch, real files)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LINE = re.compile(r"^epoch (\d+) step (\d+) loss (\d+\.\d+) samples/s (\d+\.\d+)$", re.M)
SMALL_IMAGES = ["--images", "16", "--image-size", "32"]
CASES = {
    "image_classification": [*SMALL_IMAGES, "--workers", "1", "--cache-mb", "1"],
    "language_model": ["--sequences", "16", "--workers", "0"],
    "dali": [*SMALL_IMAGES, "--workers", "1"],
}


def run(name: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(ROOT / "examples" / name / "train.py"), "--data-dir", str(tmp / "data"),
            "--batch-size", "4", *CASES[name], *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs_standalone_and_prints_one_line_per_epoch(name: str, tmp_path: Path) -> None:
    if name == "dali":
        pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda130, the dali extra) does not import")
    proc = run(name, tmp_path, "--epochs", "2", "--max-steps", "6")
    assert proc.returncode == 0, proc.stderr
    lines = LINE.findall(proc.stdout)
    # 16 samples / 4 = 4 steps an epoch: epoch 0 ends at step 4, --max-steps 6 ends epoch 1 at step 6
    assert [(e, s) for e, s, _, _ in lines] == [("0", "4"), ("1", "6")], proc.stdout
    assert "running standalone" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_bad_flags_give_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = run("language_model", tmp_path, "--epochs", "0")
    assert proc.returncode == 2 and "--epochs must be >= 1" in proc.stderr and "Traceback" not in proc.stderr

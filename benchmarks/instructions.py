"""Instructions a command executes, counted under valgrind's cachegrind.

This host's speed moves by 1.5-2x within the hour for the same code, so wall and CPU times
cannot judge a 10% change to the core. An instruction count is steadier: about 0.3% between
runs over 100 recorded core calls, 2-4% over a few rounds (objects hashed by address, garbage
collections), so count enough units. It counts work, not cache misses or the host's clock, so it compares two versions of
the code (or one version with an earlier one's figures measured the same way), not a target.

`per_unit` runs the command twice, doing 0 and `units` units of work after the same warm-up
(CPython specialises a function's bytecode after it has run a few times, and the daemon and
simulator run warm code), and divides the difference: start-up and imports cancel out.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Callable, Sequence


def available() -> bool:
    return shutil.which("valgrind") is not None


def count(cmd: Sequence[str]) -> int:
    """Instructions `cmd` executed (cachegrind's "I refs"), with one hash seed for every
    counted run: set iteration orders, and so the work, follow it."""
    full = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd]
    done = subprocess.run(full, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"error: the counted run failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_unit(command: Callable[[int], Sequence[str]], units: int) -> float:
    """Instructions per unit of work: `command(n)` must do the same warm-up, then n units."""
    return (count(command(units)) - count(command(0))) / units

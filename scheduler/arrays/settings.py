"""The CPU array's settings as users type them: one definition of the flags, their help and
their check, shared by `synergyd` (config.py, TOML keys too) and `synergy-sim`.

`CpuArray` (cpu_array.py) is the core's value; this module is what the two shells put in
front of it, so both name the same flags, say the same thing in `--help` and refuse the
same values with the same sentence.
"""
from __future__ import annotations

import argparse
import math

from synergy.scheduler.arrays.cpu_array import CpuArray

BORROW_FRACTION_FLAG = "--borrow-fraction"
NO_TRIM_TRAINING_FLAG = "--no-trim-training"

BORROW_FRACTION_HELP = (
    "CODA's CPU array: the fraction of each GPU node's CPUs that CPU-only jobs may borrow, "
    "0 to 1 (default 1.0: any CPUs training leaves idle; 0: CPU-only jobs run on GPU-less nodes only)"
)
TRIM_TRAINING_HELP = (
    "CPU-only jobs borrow idle CPUs only, never CPUs a training job holds above its GPU-proportional "
    "share (by default they may take that surplus, never below proportional speed)"
)


def cpu_array(borrow_fraction: float = 1.0, trim_training: bool = True) -> CpuArray:
    """The core's setting from the flags' values; ValueError naming the flag when out of range
    (NaN and infinities included)."""
    if not (isinstance(borrow_fraction, (int, float)) and math.isfinite(borrow_fraction)
            and 0.0 <= borrow_fraction <= 1.0):
        raise ValueError(f"{BORROW_FRACTION_FLAG} must be within [0, 1], got {borrow_fraction}")
    return CpuArray(float(borrow_fraction), bool(trim_training))


def add_flags(group: argparse._ActionsContainer) -> None:
    """`--borrow-fraction F` (dest borrow_fraction) and `--no-trim-training` (dest trim_training)."""
    group.add_argument(BORROW_FRACTION_FLAG, dest="borrow_fraction", type=float, default=1.0, metavar="F",
                       help=BORROW_FRACTION_HELP)
    group.add_argument(NO_TRIM_TRAINING_FLAG, dest="trim_training", action="store_false", help=TRIM_TRAINING_HELP)


def describe(borrow_fraction: float, trim_training: bool) -> str:
    """One line for status views (`synergy status`): how much CPU-only jobs may borrow, and what."""
    if borrow_fraction <= 0:
        return "CPU-only jobs on GPU-less nodes only (borrow fraction 0)"
    source = "idle CPUs and training's CPUs above proportional" if trim_training else "idle CPUs only"
    return f"CPU-only jobs borrow up to {borrow_fraction:.0%} of each GPU node's CPUs ({source})"

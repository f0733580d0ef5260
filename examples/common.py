"""What every example shares: its command-line flags, their managed defaults, and the epoch line.

The flags are part of the examples' agreed interface (issue 8): ``--epochs``, ``--max-steps``,
``--batch-size``, ``--workers`` (default: the contract's SYNERGY_ALLOC_CPUS, else 1) and
``--data-dir`` (default ``$SYNERGY_CHECKPOINT_DIR/../data`` when managed, else
``~/.cache/synergy/examples/<name>``). Contract names come from `synergy.common.contract`, the
one place they live.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from synergy.common import contract


def parser(description: str, images: bool = False) -> argparse.ArgumentParser:
    """The shared flags; `images` adds ``--images`` / ``--image-size`` (the image examples)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=2, help="epochs to train (default 2)")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many job-wide steps (0 = no limit)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=None,
                   help="data loading workers (default: SYNERGY_ALLOC_CPUS when managed, else 1)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="where the generated data lives (default: beside the checkpoints when managed, "
                        "else ~/.cache/synergy/examples/<name>)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch compute threads: the model's fixed compute budget, a stand-in for the GPU")
    p.add_argument("--seed", type=int, default=0)
    if images:
        p.add_argument("--images", type=int, default=512, help="JPEGs to generate on first run")
        p.add_argument("--image-size", type=int, default=256, help="their side in pixels")
    return p


def default_workers(environ: Mapping[str, str]) -> int:
    """The job's CPU allocation (whole CPUs, at least 1) when managed, else 1."""
    raw = environ.get(contract.ALLOC_CPUS, "")
    try:
        cpus = float(raw)
    except ValueError:
        return 1
    return max(1, math.floor(cpus)) if math.isfinite(cpus) else 1


def default_data_dir(name: str, environ: Mapping[str, str]) -> Path:
    """Beside the job's checkpoints when managed (survives relaunches), else a per-user cache."""
    ckpt = environ.get(contract.CHECKPOINT_DIR, "")
    if ckpt:
        return Path(ckpt).parent / "data"
    return Path.home() / ".cache" / "synergy" / "examples" / name


def parse(p: argparse.ArgumentParser, name: str, argv: Sequence[str] | None = None,
          environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse `argv`, fill in the managed defaults, and reject values out of range (exit 2)."""
    env = os.environ if environ is None else environ
    args = p.parse_args(argv)
    for flag in ("epochs", "batch_size", "threads") + (("images", "image_size") if hasattr(args, "images") else ()):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.max_steps < 0:
        p.error(f"--max-steps must be >= 0, got {args.max_steps}")
    if args.workers is None:
        args.workers = default_workers(env)
    elif args.workers < 0:
        p.error(f"--workers must be >= 0, got {args.workers}")
    if args.data_dir is None:
        args.data_dir = default_data_dir(name, env)
    return args


def job_step(loader: Any, local_steps: int) -> int:
    """The job-wide step (it survives relaunches) when managed, else this process's step count."""
    lease = getattr(loader, "lease", None)
    return int(lease.step) if lease is not None else local_steps


@dataclass
class EpochMeter:
    """Samples and time of one epoch, for its line ``epoch E step S loss L samples/s X``."""

    samples: int = 0
    batches: int = 0
    loss: float = float("nan")
    started: float = field(default_factory=time.perf_counter)

    def add(self, samples: int, loss: float) -> None:
        self.samples += samples
        self.batches += 1
        self.loss = loss

    def line(self, epoch: int, step: int) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        return f"epoch {epoch} step {step} loss {self.loss:.4f} samples/s {self.samples / elapsed:.1f}"

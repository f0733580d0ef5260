"""A memory-bandwidth-heavy CPU job: a numpy copy loop (submit it with `kind: cpu`).

It streams two large arrays through memory as fast as one core can and prints its
bandwidth every second (`BW <unix time> <GB/s>`), until --seconds pass (0 = until killed). CODA's
contention eliminator should throttle it when it slows a training job on the same node.

    synergy submit --kind cpu --cpus 1 --memory-gb 1 --name stress -- python examples/cpu_stress/stress.py
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=64, help="size of each array, MiB (default 64: past the caches)")
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0 = run until killed)")
    args = p.parse_args()
    print("PID", os.getpid(), flush=True)
    src = np.ones(args.mb * 1024 * 1024 // 8)
    dst = np.empty_like(src)
    start = last = time.monotonic()
    moved = 0
    while not args.seconds or time.monotonic() - start < args.seconds:
        np.copyto(dst, src)
        moved += 2 * src.nbytes  # read + write
        now = time.monotonic()
        if now - last >= 1.0:
            print(f"BW {time.time():.3f} {moved / (now - last) / 1e9:.2f}", flush=True)
            moved, last = 0, now
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

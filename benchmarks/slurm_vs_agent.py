"""The same workload on our own agent and on a Slurm partition (synergyd --backend slurm), side by side.

One node (2 CPUs, 4 GB, 2 fake GPUs) either way. Job a, a real PyTorch job with the one-line
SynergyIterator wrap (tests/iterator/train_script.py: 64 samples x 2 epochs, 0.1 s per step),
runs alone; after its 5th batch job b arrives and TUNE halves a's CPUs. Under our agent that is a
resize in place (same process, new cpuset); under Slurm it is a checkpoint, exit 75 and a new
Slurm job. Printed per backend: submit -> a's first batch, the longest pause between two of a's
batches (the resize), submit -> a done, and a's attempts. Needs root, cgroup v1 and Slurm
installed (as tests/slurm do).

    .venv/bin/python benchmarks/slurm_vs_agent.py --runs 1
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent"), str(ROOT / "tests" / "iterator"),
                str(ROOT / "tests" / "slurm")]

from agent_harness import AgentProcess  # noqa: E402
from slurm_cluster import SlurmCluster, missing  # noqa: E402
from slurm_jobs import records, train_command  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.v1 import admin_pb2  # noqa: E402

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")


def workload(d: DaemonProcess, tmp: Path) -> dict[str, float]:
    admin = d.admin()
    rec = tmp / "batches.txt"
    try:
        t0 = time.monotonic()
        a = admin.submit("a", gpus=1, model="resnet18", working_dir=str(tmp), checkpoint_dir=str(tmp / "ckpt"),
                         command=train_command(rec, "--samples", "64", "--epochs", "2", "--step-s", "0.1")).id
        seen: list[float] = []  # when each batch appeared (polled every 20 ms)

        def poll(until: Callable[[], bool]) -> None:
            while not until():
                n = len(records(rec))
                seen.extend([time.monotonic()] * (n - len(seen)))
                time.sleep(0.02)

        poll(lambda: len(seen) >= 5)
        admin.submit("b", gpus=1, model="resnet18", command=SLEEPER, working_dir=str(tmp))
        poll(lambda: admin.state(a) in ("succeeded", "failed"))
        done = time.monotonic()
        seen.extend([done] * (len(records(rec)) - len(seen)))
        assert admin.state(a) == "succeeded", admin.describe(a).state_reason
        return {"first batch s": seen[0] - t0, "longest pause s": max(b - x for x, b in zip(seen, seen[1:])),
                "done s": done - t0, "attempts": float(admin.describe(a).attempt)}
    finally:
        admin.close()


def on_agent(tmp: Path) -> dict[str, float]:
    d = DaemonProcess(tmp / "state", "--mechanism", "tune", "--launch-timeout-s", "120", round_s=1.0).start()
    agent = AgentProcess(d, tmp / "work", "n0", "--cpus", "0-1", "--memory", "4G", fake_gpus=2)
    try:
        agent.start()
        return workload(d, tmp)
    finally:
        agent.stop()
        agent.remove_cgroups()
        d.kill()


def on_slurm(tmp: Path, slurm: SlurmCluster) -> dict[str, float]:
    import os

    os.environ["SLURM_CONF"] = str(slurm.conf)
    d = DaemonProcess(tmp / "state", "--mechanism", "tune", "--launch-timeout-s", "120", "--backend", "slurm",
                      "--slurm-partition", slurm.partition, round_s=1.0).start()
    try:
        wait_for(lambda: d.admin().ListNodes(admin_pb2.ListNodesRequest()).nodes, what="the Slurm node")
        return workload(d, tmp)
    finally:
        d.terminate()
        slurm.run("scancel", "--full", "--signal=KILL", "--partition", slurm.partition, check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args()
    why = missing()
    if why:
        print(f"slurm_vs_agent: {why}", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="synergy-slurm-bench-"))
    root.chmod(0o755)
    slurm = SlurmCluster(root, n_nodes=1).start()
    results: dict[str, list[dict[str, float]]] = {"agent": [], "slurm": []}
    try:
        for i in range(args.runs):
            results["agent"].append(on_agent(Path(tempfile.mkdtemp(prefix=f"agent-{i}-"))))
            results["slurm"].append(on_slurm(Path(tempfile.mkdtemp(prefix=f"slurm-{i}-")), slurm))
    finally:
        slurm.stop()
        shutil.rmtree(root, ignore_errors=True)
    keys = list(results["agent"][0])
    print(f"{'median of ' + str(args.runs) + ' runs':<22}" + "".join(f"{k:>18}" for k in keys))
    for backend, rows in results.items():
        print(f"{backend:<22}" + "".join(f"{statistics.median(r[k] for r in rows):>18.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())

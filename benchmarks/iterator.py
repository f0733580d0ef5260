"""SynergyIterator figures: per-batch cost of the wrap, lease renewal p99, STOP -> exit 75.

    .venv/bin/python benchmarks/iterator.py

Per-batch: a loader of pre-made tensors (a list), iterated bare and wrapped in managed mode
(the lease thread talking to a real synergyd on loopback, a simulated agent's job token). Renewal p99: RenewLease against
that synergyd vs a bare unary gRPC call (a ReportCompletion refused
at validation) in the same run. (Checkpoint write speed against dd, and periodic checkpoints:
benchmarks/checkpoints.py.) STOP → exit 75: a real job process (tests/iterator/train_script.py,
a DataLoader and a small model) trains against that synergyd under a simulated agent's task
(which holds the task, renewing as the same rank) until its node is drained; the wrap prints how long
after the STOP reply it had its checkpoint written, and the benchmark adds the time from that
line to the process's exit (lease close and interpreter teardown).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synergyd_harness import DaemonProcess, FakeAgent, wait_for  # noqa: E402

from synergy.common.contract import GRPC_FORK_ENV, JobEnv  # noqa: E402
from synergy.iterator import SynergyIterator  # noqa: E402
from synergy.iterator.lease import LeaseKeeper  # noqa: E402
from synergy.v1 import admin_pb2, job_pb2  # noqa: E402

SCRIPT = Path(__file__).resolve().parent.parent / "tests" / "iterator" / "train_script.py"


def per_batch(env: dict[str, str], n: int = 200_000) -> tuple[float, float]:
    data = [torch.zeros(1)] * n
    best_bare = best_wrap = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _b in data:
            pass
        best_bare = min(best_bare, (time.perf_counter() - t) / n)
        it = SynergyIterator(data, state={}, environ=env)
        t = time.perf_counter()
        for _b in it:
            pass
        best_wrap = min(best_wrap, (time.perf_counter() - t) / n)
        assert it.lease is not None
        it.lease.report_patience_s = 0
        it.lease.close()
    return best_bare * 1e6, best_wrap * 1e6


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] * 1e3


def renewal(env: JobEnv, n: int = 300) -> tuple[float, float]:
    lease = LeaseKeeper(env, 1)
    req = job_pb2.RenewLeaseRequest(job_id=env.job_id, attempt=env.attempt, rank=0, step=1, steps_per_s=1)
    bad = job_pb2.ReportCompletionRequest(job_id=env.job_id)  # refused at validation: a bare unary round trip
    renew, bare = [], []
    for _ in range(n):
        t = time.perf_counter()
        lease.stub.RenewLease(req, metadata=lease.md, timeout=5)
        renew.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            lease.stub.ReportCompletion(bad, metadata=lease.md, timeout=5)
        except Exception:  # noqa: BLE001 - INVALID_ARGUMENT expected
            pass
        bare.append(time.perf_counter() - t)
    lease.close()
    return p99(renew), p99(bare)


def stop_to_exit(tmp: Path) -> tuple[float, float, int]:
    """(STOP -> checkpoint written, STOP -> process exited, exit code) of a real job process, in s."""
    d = DaemonProcess(tmp / "state-stop").start()
    try:
        agent = FakeAgent(d.address, d.cluster_token, "n1").start()
        admin = d.admin()
        # The simulated task holds the placement (and renews and stops like a job does); the real
        # process below renews as the same rank and gets the same STOP.
        job = admin.submit("stopper", gpus=1, env={"FAKE_STEP_S": "0.05"}).id
        task = wait_for(lambda: next(iter(agent.tasks.values()), None), timeout=30, what="the job to launch")
        env = JobEnv(job_id=job, attempt=1, rank=0, world_size=1, daemon_address=d.address,
                     job_token=task.spec.job_token, checkpoint_dir=str(tmp / "ckpt-stop")).to_env()
        base = {k: v for k, v in os.environ.items() if not k.startswith("SYNERGY_")}
        rec = tmp / "stop-batches.txt"
        proc = subprocess.Popen([sys.executable, "-u", str(SCRIPT), "--record", str(rec), "--samples", "100000",
                                 "--epochs", "1", "--step-s", "0.01"], env={**base, **dict(GRPC_FORK_ENV), **env},
                                stderr=subprocess.PIPE, text=True)
        wait_for(lambda: rec.exists() and len(rec.read_text().splitlines()) >= 20, timeout=120,
                 what="the job process to train")
        admin.DrainNode(admin_pb2.DrainNodeRequest(node_id="n1", reason="benchmark"))
        assert proc.stderr is not None
        after = 0.0
        for line in proc.stderr:
            if "s after STOP: exit 75" in line:
                seen = time.monotonic()
                after = float(line.split(" s after STOP")[0].rsplit(" ", 1)[-1])
                break
        code = proc.wait(timeout=120)
        exited = time.monotonic()
        admin.close()
        agent.stop()
        return after, after + (exited - seen) if after else 0.0, code
    finally:
        d.kill()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = DaemonProcess(Path(tmp) / "state").start()
        try:
            agent = FakeAgent(d.address, d.cluster_token, "n1").start()
            admin = d.admin()
            job = admin.submit("bench", gpus=1, env={"FAKE_STEPS": "1000000"}).id
            admin.close()
            task = wait_for(lambda: next(iter(agent.tasks.values()), None), timeout=30, what="the job to launch")
            token = task.spec.job_token
            env = JobEnv(job_id=job, attempt=1, rank=0, world_size=1, daemon_address=d.address,
                         job_token=token, checkpoint_dir=str(Path(tmp) / "ckpt"))
            bare, wrapped = per_batch(env.to_env())
            print(f"per batch: bare {bare:.3f} us, wrapped {wrapped:.3f} us, added {wrapped - bare:.3f} us "
                  f"(target <= 1 us)")
            r, b = renewal(env)
            print(f"loopback p99: RenewLease {r:.2f} ms, bare unary call {b:.2f} ms")
            agent.stop()
        finally:
            d.kill()
        ckpt_s, exit_s, code = stop_to_exit(Path(tmp))
        print(f"STOP received -> checkpoint written {ckpt_s:.3f} s, -> process exited {exit_s:.3f} s "
              f"(exit code {code}; a real job process, train_script.py)")


if __name__ == "__main__":
    main()

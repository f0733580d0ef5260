"""`make demo`: a whole Synergy cluster on this machine, the same workload under
GPU-proportional allocation and under Synergy-TUNE, and the gain, measured.

For each mechanism of `--mechanisms` (default: proportional, then tune), on a fresh cluster:
starts synergyd (short rounds, that mechanism) and two synergy-agents with disjoint slices of
this machine's cores and fake GPUs (two each), under a temporary dir; submits the jobs of a
workload file through the admin API; shows each job's state, node, allocation, throughput
and profile source, refreshed every second; ends the run with each job's completion time and
the CPU and memory it got against its GPU-proportional share; then stops that cluster. With
two mechanisms or more it ends with the comparison: each job's completion time under each,
the makespan and average JCT, and the ratio to the first (compare.py).

Ctrl-C (SIGINT) or SIGTERM at any point stops everything: the agents stop their jobs and
remove their cgroups, synergyd stops, the temporary dir is removed (`--keep` keeps each run's,
with every log and the daemon's database, for `synergy --state-dir DIR ...`), and no further
run starts.

    .venv/bin/python examples/local_cluster/demo.py [--workload FILE] [--mechanisms M,M] [--keep]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

import psutil
from rich.console import Console
from rich.live import Live

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))  # the sibling modules, when run as a script from anywhere

from cluster import LocalCluster, core_slices  # noqa: E402
from compare import RunResult, comparison_table, label, verdict  # noqa: E402
from watch import JobWatch  # noqa: E402
from workload import Entry, load_workload  # noqa: E402

from synergy.scheduler.cli.connection import Client, resolve_target  # noqa: E402
from synergy.scheduler.cli.errors import CliError  # noqa: E402
from synergy.scheduler.cli.spec import JobSpec, SpecError  # noqa: E402
from synergy.scheduler.jobspec.proto import spec_to_msg  # noqa: E402
from synergy.scheduler.jobspec.spec import PROFILER_NONE  # noqa: E402
from synergy.scheduler.registry import MECHANISMS  # noqa: E402
from synergy.v1 import admin_pb2  # noqa: E402

AGENTS = 2
#: Exit codes: every job succeeded; a job failed or the deadline passed; the demo could not
#: run (bad workload, a child that did not start); stopped by a signal (128 + its number).
EXIT_OK, EXIT_JOBS, EXIT_ERROR = 0, 1, 2


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: unwind to the cleanup (BaseException, so no handler eats it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="demo.py", description="\n\n".join(__doc__.split("\n\n")[:3]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="The workload file lists job specs in `synergy submit`'s YAML format (docs/cli.md) under "
               "'jobs:', each with an optional submit_at_s; see examples/local_cluster/workload.yaml.",
    )
    p.add_argument("--workload", type=Path, default=HERE / "workload.yaml", metavar="FILE",
                   help="the jobs to submit (default: %(default)s)")
    p.add_argument("--mechanisms", default="proportional,tune", metavar="M[,M...]",
                   help="synergyd's allocation mechanisms to run the workload under, one fresh cluster each, in "
                        f"order; the first is the baseline of the comparison ({', '.join(MECHANISMS)}; default: "
                        "%(default)s; one name, e.g. 'tune', runs once and prints no comparison)")
    p.add_argument("--round-s", type=float, default=2.0, metavar="S", help="synergyd's round length (default: 2)")
    p.add_argument("--gpus", type=int, default=2, metavar="N", help="fake GPUs per agent (default: 2)")
    p.add_argument("--mem-gb", type=float, default=3.0, metavar="GB", help="memory each agent hands out (default: 3)")
    p.add_argument("--deadline-s", type=float, default=120.0, metavar="S",
                   help="cancel jobs still unfinished this long after a run's first submission (default: 120)")
    p.add_argument("--keep", action="store_true", help="keep the temporary dir (state dir, logs) and print where")
    p.add_argument("--plain", action="store_true",
                   help="print lines instead of a live table (the default when stdout is not a terminal)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(highlight=False)
    if not console.is_terminal:  # a log or a pipe: wide enough for the summary's columns
        console = Console(highlight=False, width=160)
    started = time.monotonic()
    try:
        mechanisms = parse_mechanisms(args.mechanisms)
        workload = load_workload(args.workload, REPO)
        slices = core_slices(sorted(os.sched_getaffinity(0)), AGENTS)
    except (SpecError, ValueError) as exc:
        console.print(f"demo: {exc}", markup=False)
        return EXIT_ERROR
    mem_gb = min(args.mem_gb, psutil.virtual_memory().total / 1024**3 / (AGENTS + 1))
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    results: list[RunResult] = []
    codes: list[int] = []
    code = EXIT_ERROR
    try:
        for n, mechanism in enumerate(mechanisms, 1):
            if len(mechanisms) > 1:
                console.print(f"\n=== run {n} of {len(mechanisms)}: {label(mechanism)} (synergyd --mechanism "
                              f"{mechanism}) ===", markup=False)
            result, run_code = run_cluster(LocalCluster(slices, mem_gb, args.gpus, args.round_s, mechanism),
                                           workload, args, console, started)
            results.append(result)
            codes.append(run_code)
        if len(results) > 1:
            console.print(comparison_table(results))
            for line in verdict(results):
                console.print(line, markup=False)
        code = max(codes, default=EXIT_OK)
    except Stopped as stop:
        console.print(f"\n{stop}: stopped", markup=False)
        code = 128 + stop.signum
    except (RuntimeError, CliError) as exc:
        console.print(f"demo: {exc}", markup=False)
        code = EXIT_ERROR
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    console.print(f"total time {time.monotonic() - started:.1f} s", markup=False)
    return code


def parse_mechanisms(text: str) -> list[str]:
    """`--mechanisms`: synergyd mechanisms, comma-separated, the first the baseline."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in MECHANISMS]
    if not names or unknown or len(set(names)) != len(names):
        raise ValueError(f"--mechanisms: expected distinct names among {', '.join(MECHANISMS)}, "
                         f"comma-separated, got {text!r}")
    return names


def run_cluster(cluster: LocalCluster, workload: list[Entry], args: argparse.Namespace, console: Console,
                started: float) -> tuple[RunResult, int]:
    """One mechanism's run on a fresh cluster, always stopped and cleaned up after (Stopped
    included: it goes on up once the cleanup is done)."""
    watch: JobWatch | None = None
    code = EXIT_ERROR
    try:
        console.print(f"state dir {cluster.root} (cgroups: {cluster.cgroup_prefix}-*); demo pid {os.getpid()}",
                      markup=False)
        watch, code = run(cluster, workload, args, console, started)
    except Stopped as stop:
        console.print(f"\n{stop}: stopping the cluster", markup=False)
        raise
    finally:
        # Nothing interrupts the cleanup: a second Ctrl-C would leave processes behind.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            shutdown(cluster, args.keep, console)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    return RunResult(cluster.mechanism, list(watch.jobs.values()) if watch else []), code


def for_run(spec: JobSpec, root: Path, mechanism: str) -> JobSpec:
    """A training job without a checkpoint dir gets one under the demo's temporary dir: it lets
    the daemon profile it live and preempt it (both stop it at a checkpoint and resume it).
    Under GPU-proportional a job that leaves `profiler` unset is not profiled (`none`): that
    mechanism gives every job its share whatever its profile, so profiling would only cost it
    time, and the comparison would charge TUNE's baseline for work it never uses."""
    if spec.cpu_only:
        return spec
    if not spec.checkpoint_dir:
        spec = replace(spec, checkpoint_dir=str(root / spec.name))
    if mechanism == "proportional" and not spec.profiler:
        spec = replace(spec, profiler=PROFILER_NONE)
    return spec


def run(cluster: LocalCluster, workload: list[Entry], args: argparse.Namespace, console: Console,
        started: float) -> tuple[JobWatch, int]:
    daemon = cluster.start_daemon()
    console.print(f"synergyd pid {daemon.proc.pid}, round {args.round_s:g} s, mechanism {cluster.mechanism}",
                  markup=False)
    cluster.wait_for_address(timeout_s=30)
    console.print(f"dashboard: {cluster.dashboard_url()}", markup=False, soft_wrap=True)
    for agent, cores in zip(cluster.start_agents(), cluster.slices):
        console.print(f"{agent.name} pid {agent.proc.pid}, cores {cores}, {cluster.mem_gb_per_agent:g} GB, "
                      f"{cluster.gpus_per_agent} fake GPUs", markup=False)
    with Client(resolve_target(None, str(cluster.state_dir), None)) as client:
        wait_for_nodes(cluster, client, timeout_s=60)
        console.print(cluster.dedicate_cores(), markup=False)
        console.print(f"[{time.monotonic() - started:6.1f}s] both nodes registered; submitting "
                      f"{len(workload)} jobs from {args.workload}", markup=False)
        watch = JobWatch(client, started)
        pending = list(workload)
        up_at = run_start = time.monotonic()
        live_view = console.is_terminal and not args.plain
        title = lambda: f"Synergy local cluster, {label(cluster.mechanism)}: {len(cluster.slices)} nodes, " \
                        f"round {args.round_s:g} s, {time.monotonic() - started:.0f} s"  # noqa: E731
        with Live(watch.table(title()), console=console, auto_refresh=False, transient=False) if live_view \
                else _NoLive() as live:
            while pending or not watch.all_done():
                while pending and time.monotonic() - up_at >= pending[0].submit_at_s:
                    spec = for_run(pending.pop(0).spec, cluster.root / "checkpoints", cluster.mechanism)
                    client.call("SubmitJob", admin_pb2.SubmitJobRequest(spec=spec_to_msg(spec)))
                for line in watch.poll():
                    console.print(line, markup=False)
                live.update(watch.table(title()), refresh=True)
                if time.monotonic() - run_start > args.deadline_s:
                    cancel_unfinished(client, watch, console, args.deadline_s)
                    watch.poll()
                    break
                cluster.check_alive()
                time.sleep(max(0.0, 1.0 - (time.monotonic() - started) % 1.0))
        console.print(watch.summary(label(cluster.mechanism)))
    ok = all(j.state == "succeeded" for j in watch.jobs.values())
    return watch, EXIT_OK if ok else EXIT_JOBS


class _NoLive:
    """Stands in for rich's Live when stdout is not a terminal: the event lines say it all."""

    def __enter__(self) -> _NoLive:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, renderable: object, refresh: bool = False) -> None:
        return None


def wait_for_nodes(cluster: LocalCluster, client: Client, timeout_s: float) -> None:
    want = set(cluster.node_ids())
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = {n.node_id for n in client.call("ListNodes", admin_pb2.ListNodesRequest()).nodes}
        if want <= nodes:
            return
        cluster.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"agents {sorted(want - nodes)} did not register within {timeout_s:g} s; "
                               f"see the logs in {cluster.root} (run with --keep)")
        time.sleep(0.2)


def cancel_unfinished(client: Client, watch: JobWatch, console: Console, deadline_s: float) -> None:
    for job in watch.jobs.values():
        if not job.done:
            console.print(f"{job.name}: not finished after {deadline_s:g} s, cancelled", markup=False)
            client.call("CancelJob", admin_pb2.CancelJobRequest(job=str(job.id), reason="demo deadline"))


def shutdown(cluster: LocalCluster, keep: bool, console: Console) -> None:
    console.print("stopping the agents (they stop their jobs and remove their cgroups), then synergyd", markup=False)
    for line in cluster.stop():
        console.print(f"  {line}", markup=False)
    if keep:
        console.print(f"kept {cluster.root}: logs *.log, state dir {cluster.state_dir} "
                      f"(the daemon is stopped; restart it with synergyd --state-dir {cluster.state_dir})",
                      markup=False)
    else:
        cluster.remove_root()
        console.print(f"removed {cluster.root}", markup=False)


if __name__ == "__main__":
    sys.exit(main())

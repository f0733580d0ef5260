"""Physical runs (issue 14): the same trace on a local cluster under each mechanism, real
synergyd + a real synergy-agent, Table 5's two rows, and the simulator's prediction beside it.

What is real: synergyd (its rounds, leases, live profiling), the agent (cgroup cpusets and
CFS quotas on this machine's cores), PyTorch jobs with DataLoaders (benchmarks/
physical_job.py) wrapped in SynergyIterator. What is emulated: the GPUs (`--fake-gpus`: a
step is `--step-s` of device time that uses no host CPU, a sleep), and the job mix: some
jobs are loading-heavy (each sample costs `--heavy-cpu-ms` of real CPU in the loader: about
one core keeps their GPU busy), the others light (`--light-cpu-ms`: a small fraction of a
core). By default half are heavy; `--split table5` takes Table 5's workload splits (§5.2:
image, language, speech (60,30,10) for the static trace and (30,60,10) for the dynamic one),
image and speech jobs emulated as heavy (the CPU-sensitive tasks of §2, Fig. 2a), language
jobs as light; speech's memory sensitivity is not emulated.
With four GPUs on two cores the GPU-proportional share is half a core per GPU: the heavy
jobs run at about half speed under `proportional`; TUNE can give the light jobs a quarter
core (profiled below one CPU on a `sub_core` lease) and the heavy ones the rest.

Two traces (Table 5's rows): `--trace static` (every job submitted at once, FIFO, makespan)
and `--trace dynamic` (one job every `--gap-s` seconds, SRTF with each job's iterations
given, average and p99 JCT).

Under `proportional` jobs are submitted with `profiler: none` (a proportional scheduler
needs no profile); under TUNE with `profiler: synergy` (live profiling, its cost included:
half-core leases, run on without a restart, the profile store, online refinement).
Printed per mechanism: makespan, average and p99 JCT, failed jobs with their reasons,
profiling's share of GPU-time, the JCT jobs lose to their own profiling, and how many jobs
were preempted "before it started" (what a profiling lease took from placed jobs; must be 0).
Then the ratios proportional / TUNE.

`--cpu-jobs N` adds N CPU-only jobs (CODA's CPU array; `kind: cpu`, examples/cpu_stress/
stress.py for `--cpu-job-s` seconds, each asking `--cpu-job-cpus` CPUs and
`--cpu-job-memory-gb` GB) to the mix, submitted first, so they run when the training jobs
arrive: issue 14's small-GPU-node case, where TUNE's leftovers (every CPU and GB of the
node handed to training) used to preempt them. Printed per CPU-only job: its end state,
JCT, and how often it was preempted (the core now hands leftovers out after the CPU array,
so the answer should be 0 under both mechanisms). The simulated replay covers the training
jobs alone.

`--simulate` then replays the same trace in the simulator (the same scheduling core):
the jobs' arrivals and lengths, the profiles the live TUNE run measured (read from its
daemon's database after the run), the node's allocatable resources and the round length;
TUNE's run replays the profiling phase with the daemon's own lease rule
(simulator/profiling.py) for the mean time the live leases measured (start-up included: the
lease is held from launch). Process start-up (launch to registration, the mean per run from
the daemon's log) is the engine's `start_cost_s`: each simulated start holds its allocation
that long without progress, so jobs queued behind it wait for it as they did live.
Printed: physical vs simulated per metric.

    .venv/bin/python benchmarks/physical.py --simulate           # 8 jobs, static, ~5 min
    .venv/bin/python benchmarks/physical.py --trace dynamic --simulate
    .venv/bin/python benchmarks/physical.py --jobs 4 --samples 480 --simulate   # the short form

`--what-if DIR` runs nothing live: it simulates the trace the other flags describe (`--trace`,
`--jobs`, `--gap-s`, `--samples`) under each mechanism with what the kept run in DIR (a work
dir an earlier run printed) measured: its TUNE run's profiles by kind (heavy, light), its
node, its mean lease and process start-up. Jobs are profiled live as the daemon would (a job
whose command an earlier job had profiled by the time it arrived takes the stored profile,
the others profile), and TUNE is printed a second time
with every profile known at arrival (no profiling phase): the gain the trace offers on this
node with these profiles, before profiling costs anything. The question it answers: does a
longer trace, a denser one or another length show the gain, before spending an hour on it.

    .venv/bin/python benchmarks/physical.py --trace dynamic --what-if /tmp/physical-XXXX --jobs 16 --gap-s 10
    .venv/bin/python benchmarks/physical.py --trace dynamic --what-if shaped --every-job-profiles --jobs 16

`--what-if shaped` needs no kept run (profiles shaped like the measured ones, the default node);
`--every-job-profiles` sends every job through a lease, as a site with many new commands would.

Needs root and cgroup v1 (the agent's cpusets). Run it on a quiet machine: other load on the
two cores is load on the "cluster", and it makes the CPU measurements of profiling noise.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "agent")]

from agent_harness import AgentProcess  # noqa: E402
from synergyd_harness import DaemonProcess, wait_for  # noqa: E402
from synergy.scheduler.daemon.store import open_store  # noqa: E402
from synergy.scheduler.model import Cluster, Job, Resources, Server  # noqa: E402
from synergy.scheduler.profiles.format import SensitivityProfile  # noqa: E402
from synergy.scheduler.registry import build_scheduler  # noqa: E402
from synergy.scheduler.simulator.engine import EngineConfig, Simulation  # noqa: E402
from synergy.scheduler.simulator.profiling import ProfilingReplay  # noqa: E402
from synergy.v1 import admin_pb2, common_pb2  # noqa: E402

JOB = ROOT / "benchmarks" / "physical_job.py"
STRESS = ROOT / "examples" / "cpu_stress" / "stress.py"
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class JobOutcome:
    name: str
    state: str
    reason: str
    jct_s: float
    profiling_s: float  # placed under its profiling lease
    before_started: int  # preemptions "before it started"
    submitted_s: float = 0.0
    profile_source: str = ""


@dataclass
class Run:
    """One mechanism's physical run."""

    outcomes: list[JobOutcome]
    makespan_s: float
    state_dir: Path
    #: Mean seconds from a task's launch to its process registering (Python and PyTorch start-up).
    startup_s: float = 0.0
    #: Job name -> steps it trains.
    steps: dict[str, int] = field(default_factory=dict)
    #: The CPU-only jobs of the mix (`--cpu-jobs`): (outcome, times preempted).
    cpu_jobs: list[tuple[JobOutcome, int]] = field(default_factory=list)


def state_name(value: int) -> str:
    return common_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def outcome(info: admin_pb2.JobInfo) -> JobOutcome:
    hist = list(info.history)
    profiling_s, lease_start = 0.0, None
    for t in hist:
        to = state_name(t.to_state)
        if to == "profiling" and t.reason.startswith("profiling lease"):
            lease_start = t.at_unix_s
        elif lease_start is not None and to != "profiling":
            profiling_s += t.at_unix_s - lease_start
            lease_start = None
    return JobOutcome(
        info.name, state_name(info.state), hist[-1].reason if hist else "",
        info.finished_at_unix_s - info.submitted_at_unix_s, profiling_s,
        sum("before it started" in t.reason for t in hist), info.submitted_at_unix_s, info.profile_source,
    )


def mean_gap_s(log: Path, first: str, then: str) -> float:
    """Mean seconds from a job's `first` event to its next `then` event, from a daemon's log
    (0 when none)."""
    began: dict[int, float] = {}
    took: list[float] = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        e = json.loads(line)
        if e.get("event") == first:
            began.setdefault(e["job"], e["ts"])
        elif e.get("event") == then and e["job"] in began:
            took.append(e["ts"] - began.pop(e["job"]))
    return statistics.mean(took) if took else 0.0


def startup_s(log: Path) -> float:
    """Mean seconds from a task's first launch to its process registering."""
    return mean_gap_s(log, "node.launch", "job.process_registered")


@dataclass(frozen=True)
class TraceJob:
    """One job of the trace: heavy ones spread evenly among light ones; the dynamic trace's
    lengths cycle 1x, 2x, 3x `--samples` (SRTF needs lengths that differ) and one arrives
    every `--gap-s`."""

    name: str
    kind: str  # "heavy" or "light"
    samples: int
    steps: int
    arrival_s: float


#: Table 5's workload splits (image, language, speech), §5.2: the static trace (60,30,10), the
#: dynamic one (30,60,10). Image and speech models are the CPU-sensitive ones (§2, Fig. 2a).
TABLE5_SPLIT = {"static": (60.0, 30.0, 10.0), "dynamic": (30.0, 60.0, 10.0)}


def heavy_share(args: argparse.Namespace) -> float:
    """The share of loading-heavy jobs: `--split`'s image + speech, or one half by default."""
    if not args.split:
        return 0.5
    image, language, speech = TABLE5_SPLIT[args.trace] if args.split == "table5" else args.split
    return (image + speech) / (image + language + speech)


def is_heavy(k: int, share: float) -> bool:
    """Whether job k of the trace is heavy: heavy jobs spread evenly, round(N * share) of the
    first N (for one half: heavy, light, heavy, ...)."""
    return math.floor((k + 1) * share + 0.5) > math.floor(k * share + 0.5)


def mix(args: argparse.Namespace) -> str:
    kinds = [t.kind for t in trace(args)]
    return f"{kinds.count('heavy')} heavy, {kinds.count('light')} light"


def trace(args: argparse.Namespace) -> list[TraceJob]:
    dynamic = args.trace == "dynamic"
    share = heavy_share(args)
    out = []
    for k in range(args.jobs):
        kind = "heavy" if is_heavy(k, share) else "light"
        samples = args.samples * (1 + k % 3) if dynamic else args.samples
        out.append(TraceJob(f"{kind}{k}", kind, samples, -(-samples // args.batch_size),
                            k * args.gap_s if dynamic else 0.0))
    return out


def run(mechanism: str, args: argparse.Namespace, tmp: Path) -> Run:
    policy = "srtf" if getattr(args, "trace", "static") == "dynamic" else "fifo"
    state_dir = tmp / f"state-{mechanism}"
    d = DaemonProcess(state_dir, "--mechanism", mechanism, "--policy", policy,
                      "--launch-timeout-s", "120", round_s=args.round_s).start()
    agent = AgentProcess(d, tmp / f"work-{mechanism}", "n0", "--cpus", args.cpus, "--memory", args.memory,
                         "--wind-down-cap-s", f"{args.wind_down_cap_s:g}", fake_gpus=args.gpus)
    admin = d.admin()
    try:
        agent.start()
        profiler = "none" if mechanism == "proportional" else "synergy"
        cpu_ids = [admin.submit(
            f"cpu{k}", gpus=0, kind="cpu", cpus_hint=args.cpu_job_cpus, mem_gb_hint=args.cpu_job_memory_gb,
            command=(sys.executable, "-u", str(STRESS), "--seconds", f"{args.cpu_job_s:g}", "--mb", "16"),
            working_dir=str(tmp)).id for k in range(args.cpu_jobs)]
        ids, steps = [], {}
        for k, job in enumerate(trace(args)):
            cpu_ms = args.heavy_cpu_ms if job.kind == "heavy" else args.light_cpu_ms
            steps[job.name] = job.steps
            ids.append(admin.submit(job.name, gpus=1, command=(
                sys.executable, "-u", str(JOB), "--samples", str(job.samples), "--cpu-ms", str(cpu_ms),
                "--step-s", str(args.step_s), "--batch-size", str(args.batch_size), "--workers", str(args.workers)),
                working_dir=str(tmp), checkpoint_dir=str(tmp / f"ckpt-{mechanism}-{k}"),
                profiler=profiler, iterations=job.steps).id)
            if policy == "srtf" and k + 1 < args.jobs:
                time.sleep(args.gap_s)
        wait_for(lambda: all(admin.state(j) in TERMINAL for j in ids + cpu_ids), timeout=args.timeout_s,
                 interval=1.0, what=f"every job to end under {mechanism}")
        outcomes = [outcome(admin.describe(j)) for j in ids]
        makespan = max(admin.describe(j).finished_at_unix_s for j in ids) - min(
            admin.describe(j).submitted_at_unix_s for j in ids)
        cpu_jobs = [(outcome(info), sum(state_name(t.to_state) == "preempted" for t in info.history))
                    for info in (admin.describe(j) for j in cpu_ids)]
        return Run(outcomes, makespan, state_dir, steps=steps, cpu_jobs=cpu_jobs)
    finally:
        admin.close()
        agent.stop()
        d.kill()


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def measured_profiles(tune: Run) -> dict[str, SensitivityProfile]:
    """Job name -> the profile the live TUNE run scheduled it with, from its daemon's database
    (read after the daemon stopped). A job answered by the profile store ("stored:N") takes
    job N's; one with none (it finished under its lease) takes its kind's (heavy or light)."""
    store = open_store(tune.state_dir)
    try:
        records = store.jobs()
    finally:
        store.close()
    by_id = {j.id: j for j in records}
    out: dict[str, SensitivityProfile] = {}
    for j in records:
        doc = j.reported_profile
        if doc is None and j.profile_source.startswith("stored:"):
            doc = by_id[int(j.profile_source.split(":")[1].split()[0])].reported_profile
        if doc is not None:
            out[j.name] = SensitivityProfile.from_dict(j.name, doc)
    for j in records:
        if j.name not in out:
            kin = next((p for n, p in out.items() if n.rstrip("0123456789") == j.name.rstrip("0123456789")), None)
            if kin is not None:
                out[j.name] = kin
    return out


def node_resources(run: Run) -> Resources:
    store = open_store(run.state_dir)
    try:
        (node,) = store.nodes()
        return node.allocatable
    finally:
        store.close()


def simulate(mechanism: str, physical: Run, profiles: dict[str, SensitivityProfile], profile_s: float,
             args: argparse.Namespace) -> tuple[float, list[float]]:
    """The simulator's makespan and JCTs for `physical`'s trace under `mechanism`, each start
    costing the run's measured start-up (module docstring)."""
    t0 = min(o.submitted_s for o in physical.outcomes)
    jobs = [Job(k, o.name, 1, o.submitted_s - t0, float(physical.steps[o.name]), profiles[o.name])
            for k, o in enumerate(physical.outcomes)]
    # Jobs profiled live in the physical run profile here too.
    profiled = frozenset(k for k, o in enumerate(physical.outcomes) if o.profiling_s > 0)
    return replay(mechanism, args, jobs, node_resources(physical), profiled, profile_s, physical.startup_s)


def replay(mechanism: str, args: argparse.Namespace, jobs: list[Job], node: Resources, profiled: frozenset[int],
           profile_s: float, start_s: float) -> tuple[float, list[float]]:
    """Makespan and JCTs of `jobs` on one node under `mechanism`: jobs in `profiled` go through
    the daemon's profiling phase (TUNE only) for `profile_s`, each start costs `start_s`."""
    policy = "srtf" if args.trace == "dynamic" else "fifo"
    leases = None
    if mechanism != "proportional" and profiled:
        leases = ProfilingReplay(profiled, max(0.0, profile_s))
    # The live proportional run used `profiler: none`: its daemon never knew a job's speed (SRTF
    # ordered by remaining iterations), though the jobs ran at the speeds measured under TUNE.
    unprofiled = frozenset(j.id for j in jobs) if mechanism == "proportional" else frozenset()
    sim = Simulation(build_scheduler(policy, mechanism), Cluster((Server("n0", node),)), jobs,
                     EngineConfig(round_s=args.round_s, profiling=leases, start_cost_s=start_s,
                                  unprofiled=unprofiled))
    result = sim.run()
    jcts = [r.jct_s for r in result.records.values() if r.jct_s is not None]
    makespan = max(r.completion_s for r in result.records.values() if r.completion_s is not None)
    return makespan, jcts


def what_if(args: argparse.Namespace) -> int:
    """`--what-if DIR`: the trace the flags describe, simulated with what DIR's TUNE run measured."""
    if args.what_if == SHAPED:
        by_kind, node, start_s, profile_s = shaped_profiles(args), Resources(args.gpus, 2.0, 4.0), 5.0, 6.0
        return what_if_with(args, "profiles shaped like the measured ones", by_kind, node, start_s, profile_s)
    kept = Path(args.what_if)
    state, log = kept / "state-tune", kept / "state-tune.log"
    if not (state / "synergyd.sqlite").exists() or not log.exists():
        print(f"physical.py: error: --what-if {kept}: no TUNE run kept there (state-tune/ and state-tune.log: "
              "give the work dir a run printed)", file=sys.stderr)
        return 2
    measured = Run([], 0.0, state)
    by_kind: dict[str, SensitivityProfile] = {}
    for name, profile in sorted(measured_profiles(measured).items()):
        by_kind.setdefault(name.rstrip("0123456789"), profile)
    missing = {"heavy", "light"} - set(by_kind)
    if missing:
        print(f"physical.py: error: --what-if {kept}: no measured profile of a {' or '.join(sorted(missing))} job",
              file=sys.stderr)
        return 2
    node, start_s = node_resources(measured), startup_s(log)
    profile_s = mean_gap_s(log, "job.profiling", "job.profiled")  # placed under its lease to profiled
    return what_if_with(args, f"{kept}'s profiles", by_kind, node, start_s, profile_s)


def what_if_with(args: argparse.Namespace, source: str, by_kind: dict[str, SensitivityProfile], node: Resources,
                 start_s: float, profile_s: float) -> int:
    """The what-if simulation itself, for profiles by kind, a node, a start-up and a lease time."""
    # The daemon's profile store: a job whose command another job profiled before it arrived
    # takes that profile at submission; the others profile live (all of a static trace's).
    stored_at: dict[tuple[str, int], float] = {}
    profiled = set()
    for k, t in enumerate(trace(args)):
        ready = stored_at.get((t.kind, t.samples))
        if ready is None or t.arrival_s < ready or args.every_job_profiles:
            profiled.add(k)
            stored_at.setdefault((t.kind, t.samples), t.arrival_s + start_s + profile_s)
    print(f"what if: {args.trace} trace, {args.jobs} jobs ({mix(args)})" + (f", one every {args.gap_s:g} s"
          if args.trace == "dynamic" else "") + f", {args.samples} samples; {source}, node {node.gpus:g} GPUs / "
          f"{node.cpus:g} CPUs / {node.mem_gb:g} GB, leases of {profile_s:.1f} s, start-up {start_s:.1f} s; "
          f"{len(profiled)} of {args.jobs} jobs profile live")

    def jobs() -> list[Job]:  # fresh ones per run: a simulation records progress in its jobs
        return [Job(k, t.name, 1, t.arrival_s, float(t.steps), by_kind[t.kind]) for k, t in enumerate(trace(args))]

    rows = {
        "proportional": replay("proportional", args, jobs(), node, frozenset(profiled), profile_s, start_s),
        "tune": replay("tune", args, jobs(), node, frozenset(profiled), profile_s, start_s),
        "tune, profiles known": replay("tune", args, jobs(), node, frozenset(), profile_s, start_s),
    }
    base = summary(*rows["proportional"])
    print(f"  {'':<21} {'makespan':>9} {'avg JCT':>9} {'p99 JCT':>9}   proportional / this")
    for name, (makespan, jcts) in rows.items():
        row = summary(makespan, jcts)
        ratios = "" if name == "proportional" else ", ".join(
            f"{b / a:.2f}x" for a, b in zip(row, base))
        print(f"  {name:<21} {row[0]:8.1f}s {row[1]:8.1f}s {row[2]:8.1f}s   {ratios}".rstrip())
    return 0


#: `--what-if shaped`: no kept run; profiles shaped like the ones the live runs measured.
SHAPED = "shaped"


def shaped_profiles(args: argparse.Namespace) -> dict[str, SensitivityProfile]:
    """Heavy and light profiles shaped like those the live runs measured (docs/reproducing.md):
    at the defaults a heavy job 23 / 46 / 90 samples/s at a quarter, a half and one CPU, a
    light one 90 at every point: 92% of what a CPU's worth of loading allows (1000 /
    `--heavy-cpu-ms` samples a second per CPU), at most 90% of what the device step allows;
    memory does not matter to either."""
    rows = (0.25, 0.5, 1.0, 2.0)
    top = 0.9 * args.batch_size / args.step_s

    def shaped(name: str, cpu_ms: float) -> SensitivityProfile:
        rates = tuple(min(top, 0.92 * cpus * 1000.0 / cpu_ms) for cpus in rows)
        return SensitivityProfile(name, "image", rows, (1.0, 2.0), tuple((r / top,) * 2 for r in rates),
                                  (1.0, 1.0), args.batch_size / top)

    return {"heavy": shaped("heavy", args.heavy_cpu_ms), "light": shaped("light", args.light_cpu_ms)}


def split_arg(text: str) -> str | tuple[float, float, float]:
    if text == "table5":
        return text
    try:
        parts = tuple(float(x) for x in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 0 or sum(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give 'table5' or three shares IMAGE,LANGUAGE,SPEECH "
                                         "(non-negative, not all 0), e.g. 30,60,10")
    return parts  # type: ignore[return-value]


def summary(makespan: float, jcts: list[float]) -> tuple[float, float, float]:
    return makespan, statistics.mean(jcts) if jcts else float("nan"), p99(jcts) if jcts else float("nan")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mechanisms", default="proportional,tune")
    p.add_argument("--trace", choices=("static", "dynamic"), default="static",
                   help="static: all at once, FIFO, makespan; dynamic: one every --gap-s, SRTF, JCT")
    p.add_argument("--gap-s", type=float, default=5.0, help="seconds between arrivals of the dynamic trace")
    p.add_argument("--simulate", action="store_true", help="replay the trace in the simulator and compare")
    p.add_argument("--jobs", type=int, default=8, help="jobs in the trace (half heavy, half light; see --split)")
    p.add_argument("--split", type=split_arg, default=None, metavar="IMAGE,LANGUAGE,SPEECH",
                   help="the trace's workload split as Table 5 gives it: image and speech jobs are heavy, "
                        "language ones light ('table5': the paper's split for --trace, (60,30,10) static, "
                        "(30,60,10) dynamic; default: half heavy, half light)")
    p.add_argument("--gpus", type=int, default=4, help="fake GPUs on the agent")
    p.add_argument("--cpus", default="0-1", help="the agent's --cpus slice")
    p.add_argument("--memory", default="4G")
    p.add_argument("--round-s", type=float, default=2.0)
    p.add_argument("--samples", type=int, default=1200,
                   help="samples per job (one epoch); the dynamic trace's jobs take 1, 2 or 3 times it")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--step-s", type=float, default=0.04, help="device time per step")
    p.add_argument("--workers", type=int, default=2,
                   help="DataLoader workers per job: they load while the device step runs (0: in turn)")
    p.add_argument("--heavy-cpu-ms", type=float, default=10.0, help="loader CPU per sample, heavy jobs")
    p.add_argument("--light-cpu-ms", type=float, default=0.5, help="loader CPU per sample, light jobs")
    p.add_argument("--cpu-jobs", type=int, default=0,
                   help="CPU-only jobs added to the mix (kind cpu, submitted first; default none)")
    p.add_argument("--cpu-job-cpus", type=float, default=0.5, help="CPUs each CPU-only job asks for")
    p.add_argument("--cpu-job-memory-gb", type=float, default=0.5, help="GB each CPU-only job asks for")
    p.add_argument("--cpu-job-s", type=float, default=30.0, help="seconds each CPU-only job runs")
    p.add_argument("--wind-down-cap-s", type=float, default=30.0,
                   help="the agent's --wind-down-cap-s (0: a finished job's process tears down under its quota)")
    p.add_argument("--timeout-s", type=float, default=900.0)
    p.add_argument("--what-if", default="", metavar="DIR",
                   help="run nothing live: simulate the trace these flags describe with the profiles, node, lease "
                        "and start-up a kept run measured (DIR: the work dir it printed), or, with 'shaped', "
                        "profiles shaped like the measured ones on the default node (6 s leases, 5 s start-ups)")
    p.add_argument("--every-job-profiles", action="store_true",
                   help="with --what-if: every job profiles live, as if each ran a new command (default: a job "
                        "whose command was profiled before it arrived takes the stored profile)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.what_if:
        return what_if(args)
    tmp = Path(tempfile.mkdtemp(prefix="physical-"))
    print(f"{args.trace} trace, {args.jobs} jobs: {mix(args)}: " + " ".join(t.name for t in trace(args)))
    gpu_s = args.gpus
    results: dict[str, Run] = {}
    for mech in args.mechanisms.split(","):
        r = results[mech] = run(mech, args, tmp)
        r.startup_s = startup_s(tmp / f"state-{mech}.log")
        outcomes, makespan = r.outcomes, r.makespan_s
        jcts = [o.jct_s for o in outcomes if o.state == "succeeded"]
        failed = [o for o in outcomes if o.state != "succeeded"]
        prof = sum(o.profiling_s for o in outcomes)
        print(f"{mech}: makespan {makespan:.1f} s, avg JCT {statistics.mean(jcts) if jcts else float('nan'):.1f} s, "
              f"p99 JCT {p99(jcts) if jcts else float('nan'):.1f} s, {len(failed)} failed, "
              f"profiling {100 * prof / (makespan * gpu_s):.1f}% of GPU-time "
              f"({prof / max(1, len(outcomes)):.1f} s per job, process start-up included), "
              f"preempted before they started: {sum(o.before_started for o in outcomes)}, "
              f"process start-up {r.startup_s:.1f} s a launch")
        for o in failed:
            print(f"  FAILED {o.name}: {o.state}: {o.reason}")
        for o in outcomes:
            print(f"  {o.name:<8} {o.state:<10} JCT {o.jct_s:7.1f} s  profiling {o.profiling_s:5.1f} s  "
                  f"profile {o.profile_source}")
        for o, preempted in r.cpu_jobs:
            print(f"  {o.name:<8} {o.state:<10} JCT {o.jct_s:7.1f} s  CPU-only, preempted {preempted} times"
                  + (f" ({o.reason})" if o.state != "succeeded" else ""))
    if "proportional" in results and "tune" in results:
        po, to = results["proportional"], results["tune"]
        (pm, pj, pp), (tm, tj, tp) = (summary(x.makespan_s, [o.jct_s for o in x.outcomes]) for x in (po, to))
        print(f"proportional / tune: makespan {pm / tm:.2f}x, avg JCT {pj / tj:.2f}x, p99 JCT {pp / tp:.2f}x "
              f"(Table 5, physical: makespan 1.4x on the static trace; avg JCT 1.5x, p99 2x on the dynamic one)")
    if args.simulate and "tune" in results:
        tune = results["tune"]
        profiles = measured_profiles(tune)
        leased = [o.profiling_s for o in tune.outcomes if o.profiling_s > 0]
        profile_s = statistics.mean(leased) if leased else 0.0
        missing = sorted({o.name for r in results.values() for o in r.outcomes} - set(profiles))
        if missing:
            print(f"simulated replay: not possible, no measured profile for {', '.join(missing)} "
                  "(it finished under its lease: give the jobs more --samples)")
            print(f"(work dir: {tmp})")
            return 0
        print(f"simulated replay: the live TUNE run's profiles, leases of {profile_s:.1f} s (measured, start-up "
              f"included), each start costing the run's start-up")
        print(f"  {'':<13} {'metric':<9} {'physical':>9} {'simulated':>10} {'sim/phys':>9}")
        for mech, physical in results.items():
            sim = summary(*simulate(mech, physical, profiles, profile_s, args))
            phys = summary(physical.makespan_s, [o.jct_s for o in physical.outcomes])
            for name, a, b in zip(("makespan", "avg JCT", "p99 JCT"), phys, sim):
                print(f"  {mech:<13} {name:<9} {a:8.1f}s {b:9.1f}s {b / a:8.2f}x")
    print(f"(work dir: {tmp})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

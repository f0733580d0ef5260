"""`synergy-sim`: trace-driven simulation of the Synergy scheduler.

    synergy-sim [run flags]                                  one run
    synergy-sim compare --mechanisms proportional,tune ...   mechanisms on the same workload
    synergy-sim sweep --loads 4,6,8 --mechanisms ... --out DIR   loads x mechanisms x seeds

The subcommand is the first argument; anything else is a single run. Bad input prints one
line, `synergy-sim: error: ...`, and exits 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from synergy.scheduler.arrays import settings as array_settings
from synergy.scheduler.placement.scorers import SCORERS
from synergy.scheduler.registry import MECHANISMS, POLICIES
from synergy.scheduler.simulator.cpu_jobs import CpuJobParams
from synergy.scheduler.simulator.engine import DEFAULT_ROUND_S
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.inference import DEFAULT_CHECKPOINT_S
from synergy.scheduler.simulator.experiment import (
    DEFAULT_JOBS,
    DEFAULT_MAX_TIME_H,
    DEFAULT_OPT_PLACEMENT_LIMIT,
    DEFAULT_STATIC_JOBS,
    RunSpec,
    check_names,
    prepare,
    simulate,
)
from synergy.scheduler.simulator.metrics import write_utilisation_csv
from synergy.scheduler.simulator.pool import default_workers
from synergy.scheduler.simulator.report import describe, print_run, warn_unfinished
from synergy.scheduler.simulator.trace import COLUMNS, write_trace
from synergy.scheduler.simulator.workload import (
    DEFAULT_SPLIT,
    GPU_DEMAND_WEIGHTS,
    parse_gpu_mix,
    parse_measure,
    parse_split,
)

PROG = "synergy-sim"
EXIT_USAGE = 2

_EPILOG = f"""\
workload: without --trace a Philly-derived trace is generated (Synergy §5.1): Poisson
arrivals at --load jobs/hour; each job's duration at its GPU-proportional allocation is
10^x minutes, x~U(1.5,3) w.p. 0.8 else U(3,4); its iterations are that duration times its
speed at the profile's reference allocation (the zoo's: 3 CPUs and 62.5 GB per GPU, the
paper's servers), so on servers with more CPUs per GPU the same work runs faster.
--multi-gpu draws GPU demands with weights
{', '.join(f'{g}:{w:g}' for g, w in GPU_DEMAND_WEIGHTS)} (sizes above the cluster are dropped).
trace files (--trace/--record-trace) are CSV with the header {','.join(COLUMNS)}.
metrics cover the measured jobs: JCT = completion - arrival; makespan = last measured
completion - first measured arrival; over that same span, gpu/cpu/mem_util = time-averaged
fraction of each resource allocated to jobs, cpu/mem_used = fraction they can consume (each
job's allocation capped at its saturating demand: profile best case per GPU x its GPUs).
Times are in hours.
exit status: 0 ok, 2 bad input (one line on stderr: "{PROG}: error: ...").
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2 (raised, printed by main)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SimInputError(message)


def _new_parser(prog: str, description: str) -> _Parser:
    return _Parser(prog=prog, description=description, epilog=_EPILOG,
                   formatter_class=argparse.RawDescriptionHelpFormatter)


#: The homogeneous cluster flags, (flag, RunSpec field): `--cluster` replaces them all.
HOMOGENEOUS_FLAGS = (("--servers", "servers"), ("--gpus-per-server", "gpus_per_server"),
                     ("--cpus-per-server", "cpus_per_server"), ("--mem-per-server", "mem_per_server"))


def _add_cluster_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (homogeneous servers; the paper's simulated cluster by default)")
    g.add_argument("--servers", type=int, default=None, help="number of servers (default 16)")
    g.add_argument("--gpus-per-server", type=int, default=None, help="GPUs per server (default 8)")
    g.add_argument("--cpus-per-server", type=float, default=None, help="CPU cores per server (default 24)")
    g.add_argument("--mem-per-server", type=float, default=None, help="memory per server in GB (default 500)")
    g.add_argument("--cluster", default=None, metavar="FILE", dest="cluster_file",
                   help="JSON or YAML list of server groups {count, gpus, cpus, mem_gb, gpu_type} mixing GPU "
                        "types (docs/simulator.md); replaces the four flags above")
    g.add_argument("--typed-share", type=float, default=0.0, metavar="F",
                   help="fraction of generated jobs restricted to one GPU type of the --cluster file, drawn "
                        "in proportion to each type's GPUs (default 0: every job accepts any type)")


def _add_scheduling_flags(p: argparse.ArgumentParser, single_mechanism: bool) -> None:
    g = p.add_argument_group("scheduling")
    g.add_argument("--policy", choices=list(POLICIES), default="fifo",
                   help="job ordering policy (default fifo)")
    if single_mechanism:
        g.add_argument("--mechanism", choices=list(MECHANISMS), default="tune",
                       help="resource allocation mechanism (default tune)")
    else:
        g.add_argument("--mechanisms", default="proportional,greedy,tune",
                       help=f"comma-separated mechanisms among {', '.join(MECHANISMS)} "
                            "(default proportional,greedy,tune)")
    g.add_argument("--scorer", choices=list(SCORERS), default=None,
                   help="placement scorer (default: the mechanism's own, best_fit for tune; "
                        "the same names as synergyd --scorer)")
    g.add_argument("--no-migration-matching", dest="migration_matching", action="store_false",
                   help="place as the mechanism does, without Tesserae's relabelling of interchangeable "
                        "servers to migrate the fewest jobs (on by default)")
    g.add_argument("--migration-cost-s", type=float, default=0.0, metavar="SECONDS",
                   help="work a job redoes each time it migrates (its GPUs change between rounds); "
                        "below --round-s (default 0: migration is free)")
    g.add_argument("--start-cost-s", type=float, default=0.0, metavar="SECONDS",
                   help="seconds a job makes no progress each time its process starts (first start, after a "
                        "preemption or a migration) while holding its allocation: start-up and checkpoint load "
                        "(default 0: jobs run at once)")
    g.add_argument("--packing", action="store_true",
                   help="Tesserae's packing: jobs left pending share the GPUs of placed ones (same GPU count, "
                        "at most two per GPU) when their pair's combined normalised throughput is above 1; "
                        "a max-weight matching each round (off by default)")
    g.add_argument("--pairs", default=None, metavar="FILE",
                   help="with --packing: the pair table of this profile file (its \"pairs\" list, "
                        "docs/profiles.md); default: generated from the models' task classes")
    g.add_argument("--round-s", type=float, default=DEFAULT_ROUND_S,
                   help=f"scheduling round length in seconds (default {DEFAULT_ROUND_S:g})")
    g.add_argument("--opt-placement-limit", type=float, default=DEFAULT_OPT_PLACEMENT_LIMIT, metavar="SECONDS",
                   help="opt only: CP-SAT time (deterministic solver seconds) for its placement program "
                        f"each round (default {DEFAULT_OPT_PLACEMENT_LIMIT:g}: keep the best of the greedy/repair "
                        "placements and TUNE's allocation; the ideal and its upper bound do not depend on it)")
    g.add_argument("--max-time-h", type=float, default=DEFAULT_MAX_TIME_H,
                   help="safety stop: end the run at this simulated time and report unfinished "
                        f"jobs (default {DEFAULT_MAX_TIME_H:g} h)")


def _add_loaning_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Lyra: capacity loaning and elastic jobs")
    g.add_argument("--inference-servers", type=int, default=0, metavar="N",
                   help="an inference pool of N servers shaped like the training ones; each round the ones "
                        "its demand leaves idle are loaned to loanable jobs (elastic or short) and reclaimed "
                        "when demand rises, preempting the fewest jobs (default 0: no loaning)")
    g.add_argument("--inference-trace", default="diurnal", metavar="FILE|diurnal",
                   help="servers the inference load needs over time: 'diurnal' (a cosine day, 20%%-100%% of "
                        "the pool, 5-minute steps) or a CSV with the header time_s,servers (default diurnal)")
    g.add_argument("--checkpoint-s", type=float, default=DEFAULT_CHECKPOINT_S, metavar="SECONDS",
                   help="running time between a job's checkpoints; a reclaimed job loses the work since its "
                        f"last one (default {DEFAULT_CHECKPOINT_S:g})")
    g.add_argument("--elastic-share", type=float, default=0.0, metavar="F",
                   help="fraction of jobs made elastic: half to twice their size, sized by Lyra's two phases "
                        "(default 0)")


def _add_workload_flags(p: argparse.ArgumentParser, sweep: bool) -> None:
    g = p.add_argument_group("workload")
    if not sweep:
        g.add_argument("--load", type=float, default=None,
                       help="arrival rate in jobs/hour of the generated trace (default 9)")
    g.add_argument("--jobs", type=int, default=None,
                   help=f"jobs in the generated trace (default {DEFAULT_JOBS}; {DEFAULT_STATIC_JOBS} with --static)")
    g.add_argument("--multi-gpu", action="store_true", default=None,
                   help="multi-GPU trace (1-16 GPUs per job) instead of single-GPU jobs")
    g.add_argument("--static", action="store_true", default=None,
                   help="all jobs arrive at t=0; the run is judged by makespan over every job")
    g.add_argument("--gpu-mix", default=None, metavar="G:W,...",
                   help="multi-GPU demand mix as GPUS:WEIGHT pairs, e.g. Tesserae's 1:0.6,2:0.3,4:0.09,8:0.01 "
                        "(implies --multi-gpu)")
    g.add_argument("--split", default=None,
                   help="workload split image,language,speech in percent (default "
                        f"{','.join(map(str, DEFAULT_SPLIT))}); models are assigned so the split is exact")
    if not sweep:
        g.add_argument("--seed", type=int, default=None, help="random seed of the generated trace (default 0)")
    g.add_argument("--measure", default=None, metavar="START:END",
                   help="measure jobs with ids in [START, END) (default: the middle-late window "
                        "[2/3, 5/6) of the trace, 4000:5000 of 6000 as in the paper; all jobs if static)")
    g.add_argument("--profiles", default=None, metavar="FILE",
                   help="sensitivity-profile JSON merged over the built-in model zoo")
    if not sweep:
        g.add_argument("--trace", default=None, metavar="FILE",
                       help="replay this CSV trace instead of generating one")
        g.add_argument("--record-trace", default=None, metavar="FILE",
                       help="write the workload (generated or replayed) to this CSV trace")


def _add_cpu_array_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("CPU-only jobs (CODA's CPU array; docs/simulator.md)")
    g.add_argument("--cpu-jobs-per-h", type=float, default=None, metavar="RATE",
                   help="generate CPU-only jobs arriving at RATE per hour while GPU jobs arrive")
    g.add_argument("--cpu-job-cpus", type=float, default=4.0, help="CPUs each generated CPU-only job asks for (default 4)")
    g.add_argument("--cpu-job-mem-gb", type=float, default=16.0, help="GB each asks for (default 16)")
    g.add_argument("--cpu-job-duration-h", type=float, default=0.5,
                   help="mean running time in hours, exponential (default 0.5)")
    g.add_argument("--cpu-trace", default=None, metavar="FILE",
                   help="CPU-only jobs from a CSV: job_id,user,arrival_s,cpus,mem_gb,duration_s (ids >= 1000000)")
    g.add_argument("--cpu-servers", type=int, default=0,
                   help="servers without GPUs (the GPU servers' CPUs and memory) in the CPU array (default 0)")
    array_settings.add_flags(g)  # --borrow-fraction, --no-trim-training: the same as synergyd's


def _run_parser() -> _Parser:
    p = _new_parser(PROG, "Simulate one scheduling policy and mechanism over a workload. "
                          f"Subcommands: '{PROG} compare --help', '{PROG} sweep --help'.")
    _add_cluster_flags(p)
    _add_scheduling_flags(p, single_mechanism=True)
    _add_workload_flags(p, sweep=False)
    _add_loaning_flags(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true",
                   help="print one JSON object: avg/median/p95/p99_jct_h, makespan_h, avg_queue_delay_h, "
                        "gpu/cpu/mem_util, cpu/mem_used, jobs_measured, jobs_unfinished, rounds, decisions, "
                        "wall_s, ...")
    o.add_argument("--utilisation-csv", default=None, metavar="FILE",
                   help="write allocated GPU/CPU/memory and used CPU/memory fractions over time to this CSV")
    _add_html_flag(o)
    _add_cpu_array_flags(p)
    return p


def _compare_parser() -> _Parser:
    p = _new_parser(f"{PROG} compare", "Run several mechanisms on the same workload and compare "
                                       "their JCTs with proportional's.")
    _add_cluster_flags(p)
    _add_scheduling_flags(p, single_mechanism=False)
    _add_workload_flags(p, sweep=False)
    _add_loaning_flags(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print one JSON object: metrics per mechanism")
    o.add_argument("-j", "--jobs-parallel", type=int, default=default_workers(),
                   help="worker processes, one simulation each (default: number of cores, here %(default)s)")
    _add_html_flag(o)
    return p


def _add_html_flag(o: argparse._ArgumentGroup) -> None:
    o.add_argument("--html", default=None, metavar="FILE",
                   help="also write a self-contained HTML report (metrics compared, JCT CDFs, utilisation and "
                        "jobs over time; the dashboard's charts, no network needed to open it)")


def _check_html(path: str | None) -> None:
    if path and not Path(path).resolve().parent.is_dir():
        raise SimInputError(f"--html {path}: its directory does not exist")


def write_html(path: str, title: str, runs: list[dict[str, Any]]) -> None:
    from synergy.scheduler.dashboard.report import write_report

    try:
        write_report(path, title, runs)
    except OSError as exc:
        raise SimInputError(f"--html {path}: cannot write ({exc.strerror})") from None
    print(f"{PROG}: wrote {path}", file=sys.stderr)


def _sweep_parser() -> _Parser:
    p = _new_parser(f"{PROG} sweep", "Average JCT over loads x mechanisms x seeds, with a CSV and "
                                     "plots (Fig. 9-style JCT vs load, Fig. 7b-style JCT CDF).")
    _add_cluster_flags(p)
    _add_scheduling_flags(p, single_mechanism=False)
    _add_workload_flags(p, sweep=True)
    _add_loaning_flags(p)
    s = p.add_argument_group("sweep")
    s.add_argument("--loads", required=True, help="comma-separated loads in jobs/hour, e.g. 4,6,8,9")
    s.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    s.add_argument("--out", required=True, metavar="DIR", help="directory for sweep.csv, jcts.csv and the PNG plots")
    s.add_argument("--cdf-load", type=float, default=None,
                   help="load whose JCT CDF is plotted (default: the highest)")
    s.add_argument("-j", "--jobs-parallel", type=int, default=default_workers(),
                   help="worker processes, one simulation each; the results do not depend on it "
                        "(default: number of cores, here %(default)s)")
    return p


# -- flags -> RunSpec --------------------------------------------------------------------------
def spec_from_args(args: argparse.Namespace, mechanism: str = "tune") -> RunSpec:
    trace = getattr(args, "trace", None)
    if trace is not None:
        given = [flag for flag, value in (("--load", getattr(args, "load", None)), ("--jobs", args.jobs),
                                          ("--multi-gpu", args.multi_gpu), ("--static", args.static),
                                          ("--split", args.split), ("--seed", getattr(args, "seed", None)),
                                          ("--gpu-mix", args.gpu_mix))
                 if value is not None]
        if given:
            raise SimInputError(f"--trace replays a recorded workload; drop {', '.join(given)} "
                                "(they shape generated traces only)")
    homogeneous = {field: getattr(args, field) for _, field in HOMOGENEOUS_FLAGS if getattr(args, field) is not None}
    if args.cluster_file is not None and homogeneous:
        given = [flag for flag, field in HOMOGENEOUS_FLAGS if field in homogeneous]
        raise SimInputError(f"--cluster describes every server; drop {', '.join(given)}")
    return RunSpec(
        **homogeneous,
        cluster_file=args.cluster_file,
        typed_share=args.typed_share,
        policy=args.policy,
        mechanism=getattr(args, "mechanism", mechanism),
        scorer=args.scorer,
        load=9.0 if getattr(args, "load", None) is None else args.load,
        jobs=args.jobs,
        multi_gpu=bool(args.multi_gpu),
        static=bool(args.static),
        split=DEFAULT_SPLIT if args.split is None else parse_split(args.split),
        seed=0 if getattr(args, "seed", None) is None else args.seed,
        round_s=args.round_s,
        measure=None if args.measure is None else parse_measure(args.measure),
        profiles=args.profiles,
        trace=trace,
        max_time_h=args.max_time_h,
        opt_placement_limit=args.opt_placement_limit,
        migration_matching=args.migration_matching,
        migration_cost_s=args.migration_cost_s,
        start_cost_s=args.start_cost_s,
        gpu_mix=None if args.gpu_mix is None else parse_gpu_mix(args.gpu_mix),
        **_cpu_array_spec(args),
        inference_servers=args.inference_servers,
        inference_trace=args.inference_trace,
        checkpoint_s=args.checkpoint_s,
        elastic_share=args.elastic_share,
        packing=args.packing,
        pairs=args.pairs,
    )


def _cpu_array_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The CPU-array fields of a RunSpec (only `synergy-sim run` has the flags)."""
    if not hasattr(args, "cpu_servers"):
        return {}
    rate = args.cpu_jobs_per_h
    jobs = None if rate is None else CpuJobParams(rate, args.cpu_job_cpus, args.cpu_job_mem_gb, args.cpu_job_duration_h)
    return {"cpu_jobs": jobs, "cpu_trace": args.cpu_trace, "cpu_servers": args.cpu_servers,
            "borrow_fraction": args.borrow_fraction, "trim_training": args.trim_training}


def parse_list(text: str, flag: str, kind: type) -> list[Any]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise SimInputError(f"{flag} needs at least one value")
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise SimInputError(f"{flag} takes comma-separated {kind.__name__} values, got {text!r}") from None


def parse_mechanisms(text: str) -> list[str]:
    mechs = parse_list(text, "--mechanisms", str)
    if len(set(mechs)) != len(mechs):
        raise SimInputError(f"--mechanisms lists a mechanism twice: {text!r}")
    check_names("fifo", mechs)
    return mechs


def _check_workers(n: int) -> int:
    if n < 1:
        raise SimInputError(f"--jobs-parallel must be at least 1, got {n}")
    return n


# -- commands ------------------------------------------------------------------------------------
def run_main(argv: Sequence[str]) -> int:
    args = _run_parser().parse_args(argv)
    spec = spec_from_args(args)
    if args.utilisation_csv and not Path(args.utilisation_csv).resolve().parent.is_dir():
        raise SimInputError(f"--utilisation-csv {args.utilisation_csv}: its directory does not exist")
    _check_html(args.html)
    prep = prepare(spec)
    if args.record_trace:
        write_trace(args.record_trace, prep.workload)
    report = simulate(prep)
    if args.utilisation_csv:
        write_utilisation_csv(args.utilisation_csv, report.result)
    if args.html:
        from synergy.scheduler.dashboard.report import run_data

        write_html(args.html, f"{PROG}: {describe(prep)}", [run_data(spec.mechanism, report.metrics, report.result,
                                                                      report.measured)])
    warn_unfinished(report.metrics)
    if args.json:
        print(json.dumps(report.metrics))
    else:
        print_run(prep, report)
        m = report.metrics
        if prep.cpu_trace:
            jct = "-" if m["cpu_avg_jct_h"] is None else f"{m['cpu_avg_jct_h']:.3f} h"
            slow = "-" if m["gpu_jct_slowdown"] is None else f"{m['gpu_jct_slowdown']:.3f}"
            print(f"CPU-only jobs: {m['cpu_jobs_completed']}/{m['cpu_jobs']} completed, avg JCT {jct}; "
                  f"GPU jobs' avg JCT vs a run without them: x{slow}")
    return 0


def compare_main(argv: Sequence[str]) -> int:
    from synergy.scheduler.simulator.compare import run_compare

    args = _compare_parser().parse_args(argv)
    mechanisms = parse_mechanisms(args.mechanisms)
    spec = spec_from_args(args, mechanisms[0])
    _check_html(args.html)
    return run_compare(spec, mechanisms, _check_workers(args.jobs_parallel), args.json, args.record_trace,
                       args.html)


def sweep_main(argv: Sequence[str]) -> int:
    from synergy.scheduler.simulator.sweep import run_sweep

    args = _sweep_parser().parse_args(argv)
    mechanisms = parse_mechanisms(args.mechanisms)
    loads = parse_list(args.loads, "--loads", float)
    if any(not (x > 0) for x in loads):
        raise SimInputError(f"--loads must be positive jobs/hour, got {args.loads!r}")
    seeds = parse_list(args.seeds, "--seeds", int)
    if args.static:
        raise SimInputError("sweep varies the arrival load; --static traces have none")
    spec = spec_from_args(args, mechanisms[0])
    return run_sweep(spec, loads, mechanisms, seeds, args.out, _check_workers(args.jobs_parallel), args.cdf_load)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "compare":
            return compare_main(argv[1:])
        if argv and argv[0] == "sweep":
            return sweep_main(argv[1:])
        return run_main(argv)
    except SimInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""`synergy-sim sweep`: loads x mechanisms x seeds, a CSV and the paper-style plots.

Each point is an independent simulation, run in worker processes. For one (load, seed)
every mechanism sees the same generated workload. Outputs in --out:
  sweep.csv             one row per (load, mechanism, seed) with the run's metrics
  jcts.csv              the JCT of every measured job of every run (for other CDFs)
  avg_jct_vs_load.png   average JCT vs load per mechanism, mean over seeds (Fig. 9 style)
  jct_cdf.png           CDF of measured JCTs at one load, seeds pooled (Fig. 7b style)
"""
from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.experiment import ProfileSet, RunSpec, prepare, simulate, zoo_profiles
from synergy.scheduler.simulator.metrics import measured_jcts_s
from synergy.scheduler.simulator.pool import run_parallel
from synergy.scheduler.simulator.report import fmt_h, warn_unfinished

CSV_COLUMNS = (
    "load", "mechanism", "seed", "policy", "avg_jct_h", "median_jct_h", "p95_jct_h", "p99_jct_h",
    "makespan_h", "avg_queue_delay_h", "gpu_util", "cpu_util", "mem_util", "cpu_used", "mem_used",
    "jobs_measured", "jobs_unfinished", "stopped", "rounds", "decisions", "migrations", "migrations_per_job",
    "wall_s",
)

Task = tuple[RunSpec, ProfileSet, float, str, int]


def sweep_point(task: Task) -> tuple[dict[str, Any], list[float]]:
    """One simulation: its metrics and the JCTs (hours) of its measured jobs."""
    spec, profile_set, load, mechanism, seed = task
    prep = prepare(replace(spec, load=load, seed=seed, mechanism=mechanism), profile_set)
    report = simulate(prep)
    report.metrics["load"] = load
    return report.metrics, [x / 3600.0 for x in measured_jcts_s(report.result, report.measured)]


def run_sweep(spec: RunSpec, loads: Sequence[float], mechanisms: Sequence[str], seeds: Sequence[int],
              out: str, workers: int, cdf_load: float | None = None) -> int:
    pyplot = _pyplot()
    if cdf_load is None:
        cdf_load = max(loads)
    elif cdf_load not in loads:
        raise SimInputError(f"--cdf-load {cdf_load:g} is not one of --loads")
    out_dir = Path(out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SimInputError(f"--out {out}: cannot create directory ({exc.strerror})") from None
    profile_set = zoo_profiles(spec.profiles)
    prepare(replace(spec, load=loads[0], seed=seeds[0]), profile_set)  # bad input fails here, once
    tasks: list[Task] = [(spec, profile_set, load, m, seed) for load in loads for m in mechanisms for seed in seeds]

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        bar = progress.add_task(f"sweep ({workers} workers)", total=len(tasks))
        results = run_parallel(sweep_point, tasks, workers, lambda i, r: progress.advance(bar))

    rows = [m for m, _ in results]
    for m in rows:
        warn_unfinished(m)
    _write_csv(out_dir / "sweep.csv", rows)
    _write_jcts(out_dir / "jcts.csv", tasks, results)
    _plot_avg_jct(pyplot, out_dir / "avg_jct_vs_load.png", rows, loads, mechanisms, spec)
    _plot_cdf(pyplot, out_dir / "jct_cdf.png", tasks, results, cdf_load, mechanisms, spec)
    Console().print(_summary(rows, loads, mechanisms, len(seeds)))
    Console().print(f"wrote {out_dir / 'sweep.csv'}, {out_dir / 'jcts.csv'}, "
                    f"{out_dir / 'avg_jct_vs_load.png'}, {out_dir / 'jct_cdf.png'}")
    return 0


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SimInputError("sweep plots need matplotlib: pip install 'synergy[plot]'") from None
    return plt


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for m in rows:
            w.writerow(["" if m.get(c) is None else m.get(c) for c in CSV_COLUMNS])


def _write_jcts(path: Path, tasks: list[Task], results: list[tuple[dict[str, Any], list[float]]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(("load", "mechanism", "seed", "jct_h"))
        for (_, _, load, mech, seed), (_, jcts) in zip(tasks, results):
            for x in jcts:
                w.writerow((load, mech, seed, repr(x)))


def _mean_by(rows: list[dict[str, Any]], load: float, mech: str, key: str) -> list[float]:
    return [m[key] for m in rows if m["load"] == load and m["mechanism"] == mech and m[key] is not None]


def _kind(spec: RunSpec) -> str:
    return (f"{spec.policy.upper()}, {'multi' if spec.multi_gpu else 'single'}-GPU, "
            f"split {','.join(map(str, spec.split))}, "
            + (spec.cluster_file if spec.cluster_file else f"{spec.servers * spec.gpus_per_server} GPUs"))


def _plot_avg_jct(plt: Any, path: Path, rows: list[dict[str, Any]], loads: Sequence[float],
                  mechanisms: Sequence[str], spec: RunSpec) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = sorted(loads)
    for mech in mechanisms:
        pts = [(x, _mean_by(rows, x, mech, "avg_jct_h")) for x in xs]
        pts = [(x, v) for x, v in pts if v]
        if not pts:
            continue
        mean = [sum(v) / len(v) for _, v in pts]
        lo = [m - min(v) for m, (_, v) in zip(mean, pts)]
        hi = [max(v) - m for m, (_, v) in zip(mean, pts)]
        ax.errorbar([x for x, _ in pts], mean, yerr=[lo, hi], marker="o", capsize=3, label=mech)
    ax.set_xlabel("Load (jobs/hour)")
    ax.set_ylabel("Average JCT (hours)")
    ax.set_title(_kind(spec))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_cdf(plt: Any, path: Path, tasks: list[Task], results: list[tuple[dict[str, Any], list[float]]],
              load: float, mechanisms: Sequence[str], spec: RunSpec) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    lo, hi = float("inf"), 0.0
    for mech in mechanisms:
        jcts = sorted(x for (_, _, ld, m, _), (_, js) in zip(tasks, results) if ld == load and m == mech for x in js)
        if not jcts:
            continue
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step(jcts, ys, where="post", label=mech)
        lo, hi = min(lo, jcts[0]), max(hi, jcts[-1])
    ax.set_xscale("log")
    nice = [b * 10.0 ** e for e in range(-2, 5) for b in (1, 2, 5)]
    ticks = [x for x in nice if lo / 1.5 <= x <= hi * 1.5]
    if len(ticks) >= 2:
        ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("JCT (hours, log scale)")
    ax.set_ylabel("Fraction of measured jobs")
    ax.set_title(f"JCT CDF at load {load:g} ({_kind(spec)})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _summary(rows: list[dict[str, Any]], loads: Sequence[float], mechanisms: Sequence[str], n_seeds: int) -> Table:
    t = Table(title=f"average JCT (h), mean over {n_seeds} seed(s)", header_style="bold")
    t.add_column("load")
    for mech in mechanisms:
        t.add_column(mech, justify="right")
    for load in sorted(loads):
        cells = [f"{load:g}"]
        for mech in mechanisms:
            v = _mean_by(rows, load, mech, "avg_jct_h")
            cells.append(fmt_h(sum(v) / len(v)) if v else "-")
        t.add_row(*cells)
    return t

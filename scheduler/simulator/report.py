"""Human-readable output (rich tables); machine-readable output is --json and the CSVs."""
from __future__ import annotations

import sys
from typing import Any, Mapping, Sequence

from rich.console import Console
from rich.table import Table

from synergy.scheduler.simulator.experiment import Prepared, RunReport

#: (metric key, column title) of the JCT statistics compared across mechanisms.
JCT_STATS = (("avg_jct_h", "avg JCT"), ("median_jct_h", "median JCT"), ("p95_jct_h", "p95 JCT"),
             ("p99_jct_h", "p99 JCT"))
#: (metric key, row title) of the time-averaged utilisation: allocated, then used (Fig. 10b).
UTILISATION = (("gpu_util", "GPU allocated"), ("cpu_util", "CPU allocated"), ("mem_util", "MEM allocated"),
               ("cpu_used", "CPU used"), ("mem_used", "MEM used"))


def describe(prep: Prepared) -> str:
    s, w = prep.spec, prep.workload
    if s.trace:
        origin = f"trace {s.trace}"
    elif w.static:
        origin = f"static, split {','.join(map(str, s.split))}, seed {s.seed}"
    else:
        origin = f"load {s.load:g}/h, split {','.join(map(str, s.split))}, seed {s.seed}"
    kind = "multi-GPU" if any(j.gpus > 1 for j in w.jobs) else "single-GPU"
    ids = sorted(prep.measured)
    total = prep.cluster.total
    loaning = (f"; {s.inference_servers} inference servers ({s.inference_trace}) loaning"
               if s.inference_servers else "") + (f"; {s.elastic_share:g} of jobs elastic" if s.elastic_share else "")
    if s.cluster_file:
        shape = f"{int(total.gpus)} GPUs on {len(prep.cluster.servers)} servers ({s.cluster_file})"
        shape += f"; {s.typed_share:g} of jobs restricted to one type" if s.typed_share else ""
    else:
        shape = (f"{int(total.gpus)} GPUs on {s.servers} servers "
                 f"({s.cpus_per_server:g} CPUs, {s.mem_per_server:g} GB each)")
    return (f"{len(w.jobs)} {kind} jobs ({origin}); {shape}{loaning}; policy {s.policy}; "
            f"measuring {len(ids)} jobs (ids {ids[0]}..{ids[-1]})")


def fmt_h(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fmt_frac(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def print_run(prep: Prepared, report: RunReport, console: Console | None = None) -> None:
    console = console or Console()
    m = report.metrics
    console.print(f"[bold]{m['policy']} + {m['mechanism']}[/bold]: {describe(prep)}")
    t = Table(show_header=True, header_style="bold")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for key, title in JCT_STATS:
        t.add_row(f"{title} (h)", fmt_h(m[key]))
    t.add_row("makespan (h)", fmt_h(m["makespan_h"]))
    t.add_row("avg queueing delay (h)", fmt_h(m["avg_queue_delay_h"]))
    t.add_row("p95 queueing delay (h)", fmt_h(m["p95_queue_delay_h"]))
    for key, title in UTILISATION:
        t.add_row(title, fmt_frac(m[key]))
    if "loans" in m:
        t.add_row("servers loaned / reclaimed", f"{m['loans']} / {m['reclaims']}")
        t.add_row("jobs preempted / scaled in by reclaims", f"{m['preemptions']} / {m['shrinks']}")
        t.add_row("loaned GPUs busy", fmt_frac(m["loaned_gpu_util"]))
    for gpu_type, util in m.get("gpu_util_by_type", {}).items():
        t.add_row(f"GPU allocated, {gpu_type or 'untyped'}", fmt_frac(util))
    t.add_row("jobs measured", str(m["jobs_measured"]))
    if m["jobs_unfinished"]:
        t.add_row("measured jobs unfinished", str(m["jobs_unfinished"]))
    t.add_row("migrations (per round, per job)", fmt_migrations(m))
    if m.get("packing"):
        t.add_row("packed jobs per round (jobs ever packed)", f"{m['packed_per_round']:.2f} ({m['packed_jobs']})")
    t.add_row("rounds (core calls)", f"{m['rounds']} ({m['decisions']})")
    t.add_row("wall time (s)", f"{m['wall_s']:.1f}")
    console.print(t)


def fmt_migrations(m: Mapping[str, Any]) -> str:
    per_job = "-" if m["migrations_per_job"] is None else f"{m['migrations_per_job']:.2f}"
    return f"{m['migrations']} ({m['migrations_per_round']:.3f}, {per_job})"


def comparison_table(rows: Sequence[Mapping[str, Any]], baseline: Mapping[str, Any]) -> Table:
    """Mechanisms side by side; each JCT cell also shows its ratio to the baseline's."""
    t = Table(show_header=True, header_style="bold",
              caption=f"(in parentheses: ratio to {baseline['mechanism']}; below 1 is better)")
    t.add_column("metric")
    for m in rows:
        t.add_column(m["mechanism"], justify="right")
    for key, name in JCT_STATS:
        cells = []
        for m in rows:
            v, b = m[key], baseline[key]
            cells.append(fmt_h(v) + (f" ({v / b:.2f}x)" if v is not None and b else ""))
        t.add_row(f"{name} (h)", *cells)
    t.add_row("makespan (h)", *(fmt_h(m["makespan_h"]) for m in rows))
    t.add_row("avg queueing delay (h)", *(fmt_h(m["avg_queue_delay_h"]) for m in rows))
    for key, title in UTILISATION:
        t.add_row(title, *(fmt_frac(m[key]) for m in rows))
    for gpu_type in rows[0].get("gpu_util_by_type", {}) if rows else ():
        t.add_row(f"GPU allocated, {gpu_type or 'untyped'}",
                  *(fmt_frac(m.get("gpu_util_by_type", {}).get(gpu_type)) for m in rows))
    t.add_row("jobs measured", *(str(m["jobs_measured"]) for m in rows))
    t.add_row("migrations (per round, per job)", *(fmt_migrations(m) for m in rows))
    t.add_row("wall time (s)", *(f"{m['wall_s']:.1f}" for m in rows))
    return t


def warn_unfinished(m: Mapping[str, Any]) -> None:
    """One stderr line when a run ended before all its measured jobs completed."""
    if m["stopped"] == "completed" and not m["jobs_unfinished"]:
        return
    why = {"time_limit": "reached --max-time-h", "stalled": "no waiting job can ever be placed"}.get(
        m["stopped"], m["stopped"])
    print(f"synergy-sim: warning: {m['mechanism']} run stopped early ({why}) with {m['jobs_unfinished']} "
          f"measured job(s) unfinished; metrics cover the {m['jobs_measured']} that completed", file=sys.stderr)

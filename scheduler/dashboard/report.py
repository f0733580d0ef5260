"""`synergy-sim ... --html report.html`: one self-contained page with the dashboard's charts.

The page inlines plotly.js (from the `plotly` package), static/charts.js (the very chart code
synergyd's dashboard draws with) and the runs' data as JSON, so it opens from a file with no
network. `run_data` condenses one simulated run (it may run in a worker process: its result is
small and picklable); `write_report` writes the page for one run or several side by side.
"""

from __future__ import annotations

import bisect
import html
import json
from pathlib import Path
from typing import Any, Sequence

from synergy.scheduler.dashboard.assets import plotly_js, static_text
from synergy.scheduler.simulator.engine import SimResult

#: Points kept per time series: enough for a smooth chart, small enough for a light page.
MAX_POINTS = 1500


def run_data(label: str, metrics: dict[str, Any], result: SimResult, measured: frozenset[int]) -> dict[str, Any]:
    """One run's figures for the page: its metrics, JCTs of measured jobs, and samples in the
    dashboard's shape (allocated vs capacity, running and queued jobs over simulated time)."""
    timeline = result.timeline
    step = max(1, len(timeline) // MAX_POINTS)
    rows = timeline[::step] + ([timeline[-1]] if timeline and (len(timeline) - 1) % step else [])
    gpus, cpus, mem = result.capacity
    records = list(result.records.values())
    arrivals = sorted(r.arrival_s for r in records)
    starts = sorted(r.first_start_s for r in records if r.first_start_s is not None)
    ends = sorted(r.completion_s for r in records if r.completion_s is not None)

    def count(sorted_times: list[float], t: float) -> int:
        return bisect.bisect_right(sorted_times, t)

    samples = [
        {"t": t, "gpus": gpus, "cpus": cpus, "mem_gb": mem, "gpus_allocated": g, "cpus_allocated": c,
         "mem_gb_allocated": m, "running": count(starts, t) - count(ends, t),
         "queued": count(arrivals, t) - count(starts, t)}
        for t, g, c, m, *_ in rows
    ]
    jcts = sorted(r.jct_s for r in records if r.id in measured and r.jct_s is not None)
    clean = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) or v is None}
    return {"label": label, "metrics": clean, "samples": samples, "jcts": jcts}


def write_report(path: str | Path, title: str, runs: Sequence[dict[str, Any]]) -> None:
    """Write the page; raises OSError when it cannot be written (callers say which flag)."""
    data = json.dumps({"title": title, "runs": list(runs)}).replace("</", "<\\/")
    page = static_text("report.html")
    for key, value in (("{{title}}", html.escape(title)), ("{{plotly}}", plotly_js().replace("</script", "<\\/script")),
                       ("{{charts}}", static_text("charts.js")), ("{{data}}", data)):
        page = page.replace(key, value)
    Path(path).write_text(page)

"""`synergy-sim compare`: several mechanisms on one workload, side by side (Table 5, Fig. 9).

The workload is generated (or read) once and every mechanism replays it with fresh jobs,
so differences come from the mechanism alone. Ratios are against proportional, the
GPU-proportional baseline of today's schedulers, or the first mechanism if it is absent.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from synergy.scheduler.simulator.experiment import Prepared, RunSpec, prepare, simulate
from synergy.scheduler.simulator.pool import run_parallel
from synergy.scheduler.simulator.report import comparison_table, describe, warn_unfinished
from synergy.scheduler.simulator.trace import write_trace

BASELINE = "proportional"


def _one(task: tuple[Prepared, str]) -> dict[str, Any]:
    prep, mechanism = task
    return simulate(prep, mechanism).metrics


def _one_with_report(task: tuple[Prepared, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Metrics and the HTML report's condensed data of one mechanism (in a worker process)."""
    from synergy.scheduler.dashboard.report import run_data

    prep, mechanism = task
    report = simulate(prep, mechanism)
    return report.metrics, run_data(mechanism, report.metrics, report.result, report.measured)


def compare(prep: Prepared, mechanisms: Sequence[str], workers: int = 1,
            on_done: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Metrics of each mechanism over the prepared workload, in the order given."""
    return run_parallel(_one, [(prep, m) for m in mechanisms], workers, on_done)


def run_compare(spec: RunSpec, mechanisms: Sequence[str], workers: int, as_json: bool,
                record_trace: str | None = None, html: str | None = None) -> int:
    prep = prepare(spec)
    if record_trace:
        write_trace(record_trace, prep.workload)
    # A bar on stderr, as `sweep` has: a compare of the paper's point runs for tens of seconds.
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as progress:
        bar = progress.add_task(f"compare {', '.join(mechanisms)} ({workers} workers)", total=len(mechanisms))

        def tick(_i: int, _row: object) -> None:
            progress.advance(bar)

        if html:
            from synergy.scheduler.simulator.cli import PROG, write_html

            pairs = run_parallel(_one_with_report, [(prep, m) for m in mechanisms], workers, tick)
            rows = [m for m, _ in pairs]
            write_html(html, f"{PROG} compare: {describe(prep)}", [d for _, d in pairs])
        else:
            rows = compare(prep, mechanisms, workers, tick)
    for m in rows:
        warn_unfinished(m)
    if as_json:
        print(json.dumps({m["mechanism"]: m for m in rows}))
        return 0
    baseline = next((m for m in rows if m["mechanism"] == BASELINE), rows[0])
    console = Console()
    console.print(f"[bold]compare[/bold]: {describe(prep)}", markup=True, highlight=False)
    console.print(comparison_table(rows, baseline))
    return 0

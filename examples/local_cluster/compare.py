"""The demo's last word: the same workload's runs under each mechanism, side by side.

Every figure is measured by synergyd on the live run (a job's completion time is its
`finished_at - submitted_at`, Unix seconds from the daemon): per job, its completion time
under each mechanism; per run, the makespan (first submission to last finish) and the
average completion time (JCT); and the ratio of the first mechanism's (the baseline, GPU-
proportional by default) to each other one's, above 1 where the other finished sooner.
Only jobs that succeeded count: a failed or cancelled job is shown with its state and
leaves the averages, so a ratio is never computed over different sets of jobs unnoticed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from watch import JobSeen

#: How each mechanism is named in the output (synergyd's `--mechanism` word otherwise).
LABELS = {"proportional": "GPU-proportional", "tune": "Synergy-TUNE", "greedy": "Synergy-GREEDY",
          "opt": "Synergy-OPT"}


def label(mechanism: str) -> str:
    return LABELS.get(mechanism, mechanism)


@dataclass(frozen=True)
class RunResult:
    """One mechanism's live run of the workload: every job as the demo watched it."""

    mechanism: str
    jobs: list[JobSeen]

    def jct(self, name: str) -> float | None:
        """The job's completion time, if it succeeded in this run."""
        job = next((j for j in self.jobs if j.name == name), None)
        if job is None or job.state != "succeeded" or not job.finished_at:
            return None
        return job.finished_at - job.submitted_at

    def state(self, name: str) -> str:
        return next((j.state for j in self.jobs if j.name == name), "not seen")

    def succeeded(self, names: list[str]) -> bool:
        return all(self.jct(n) is not None for n in names)

    def makespan(self, names: list[str]) -> float | None:
        """First submission to last finish over `names` (None unless every one succeeded)."""
        jobs = [j for j in self.jobs if j.name in names]
        if not jobs or not self.succeeded(names):
            return None
        return max(j.finished_at for j in jobs) - min(j.submitted_at for j in jobs)

    def mean_jct(self, names: list[str]) -> float | None:
        jcts = [self.jct(n) for n in names]
        return statistics.mean(j for j in jcts if j is not None) if jcts and None not in jcts else None


def compared_jobs(results: list[RunResult]) -> list[str]:
    """The training and CPU-only jobs every run submitted, in submission order of the first."""
    first = sorted(results[0].jobs, key=lambda j: j.id)
    return [j.name for j in first if all(any(k.name == j.name for k in r.jobs) for r in results[1:])]


def comparison_table(results: list[RunResult]) -> Table:
    """Per job and per run, the completion time under each mechanism and the baseline's ratio."""
    names = compared_jobs(results)
    base = results[0]
    t = Table(title="Comparison: the same workload, live under each mechanism", title_justify="left",
              caption=f"RATIO = {label(base.mechanism)}'s time / the mechanism's (above 1: it finished sooner)",
              caption_justify="left")
    t.add_column("")
    for r in results:
        t.add_column(label(r.mechanism), justify="right")
    for r in results[1:]:
        t.add_column(f"RATIO {r.mechanism}", justify="right")
    for name in names:
        t.add_row(f"{name} completion", *(_cell(r.jct(name), r.state(name)) for r in results),
                  *(_ratio(base.jct(name), r.jct(name)) for r in results[1:]))
    t.add_section()
    for what, metric in (("makespan", RunResult.makespan), ("average JCT", RunResult.mean_jct)):
        t.add_row(what, *(_cell(metric(r, names), "") for r in results),
                  *(_ratio(metric(base, names), metric(r, names)) for r in results[1:]), style="bold")
    return t


def verdict(results: list[RunResult]) -> list[str]:
    """One line per non-baseline mechanism: its gain over the baseline, or why there is none."""
    names = compared_jobs(results)
    base = results[0]
    lines = []
    for r in results[1:]:
        failed = [n for n in names if base.jct(n) is None or r.jct(n) is None]
        if failed:
            lines.append(f"{label(r.mechanism)} vs {label(base.mechanism)}: no comparison, "
                         f"{', '.join(failed)} did not succeed in both runs")
            continue
        (bm, rm), (bj, rj) = ((f(base, names), f(r, names)) for f in (RunResult.makespan, RunResult.mean_jct))
        assert bm and rm and bj and rj  # every job succeeded in both
        lines.append(f"{label(r.mechanism)} vs {label(base.mechanism)}, measured on this run: makespan "
                     f"{bm:.1f} s -> {rm:.1f} s ({bm / rm:.2f}x), average JCT {bj:.1f} s -> {rj:.1f} s "
                     f"({bj / rj:.2f}x)")
    return lines


def _cell(seconds: float | None, state: str) -> str:
    return f"{seconds:.1f} s" if seconds is not None else (state or "-")


def _ratio(base: float | None, other: float | None) -> Text:
    if base is None or other is None or other <= 0:
        return Text("-")
    ratio = base / other
    return Text(f"{ratio:.2f}x", style="green" if ratio > 1.02 else "red" if ratio < 0.98 else "")

"""The demo's workload file: job specs in `synergy submit`'s YAML format, plus when to submit.

    jobs:
      - name: lm
        command: [python, examples/language_model/train.py, --epochs, "1"]
        gpus: 1
        task: language
        submit_at_s: 5          # optional: seconds after the cluster is up (default 0)

Each entry is read by the CLI's own spec reader (`synergy.scheduler.cli.spec.parse_spec`,
the rules the daemon applies), so a bad entry is refused with the sentence `synergy submit`
would print, before anything starts. Two conveniences for a demo run from the repository:
a relative `working_dir` (default: the repository root) is taken from the repository root,
and a command whose first word is `python` runs with the demo's own interpreter (the
project's `.venv`), so the jobs import `synergy` whatever `python` is on PATH.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from synergy.scheduler.cli.spec import JobSpec, SpecError, parse_spec, read_spec_document

SUBMIT_AT = "submit_at_s"


@dataclass(frozen=True)
class Entry:
    """One job of the workload and when to submit it (seconds after the cluster is up)."""

    spec: JobSpec
    submit_at_s: float


def load_workload(path: Path, repo: Path) -> list[Entry]:
    """Every job of the file, checked; SpecError names the file, the entry and the field."""
    doc = read_spec_document(path)
    jobs = doc.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise SpecError("", f"{path}: expected 'jobs:' with a list of job specs")
    entries: list[Entry] = []
    for i, item in enumerate(jobs):
        where = f"{path}: jobs[{i}]"
        if not isinstance(item, dict):
            raise SpecError("", f"{where}: a job spec must be a mapping (name: ..., gpus: ...)")
        item = dict(item)
        at = item.pop(SUBMIT_AT, 0)
        if isinstance(at, bool) or not isinstance(at, (int, float)) or at < 0:
            raise SpecError("", f"{where}: {SUBMIT_AT} must be a number of seconds >= 0, got {at!r}")
        spec = parse_spec(item, origin=where, base_dir=repo, file_dir=path.parent)
        if spec.command and spec.command[0] == "python":
            spec = replace(spec, command=(sys.executable, *spec.command[1:]))
        entries.append(Entry(spec, float(at)))
    names = [e.spec.name for e in entries]
    twins = sorted({n for n in names if names.count(n) > 1})
    if twins:
        raise SpecError("", f"{path}: job names must be unique, {', '.join(twins)} appears more than once")
    return sorted(entries, key=lambda e: e.submit_at_s)

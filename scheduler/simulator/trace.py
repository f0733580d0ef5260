"""Trace files: the CSV a workload is recorded to (`--record-trace`) and replayed from (`--trace`).

Format (docs in `synergy-sim --help`)::

    job_id,model,arrival_s,iterations,gpus
    0,resnet18,0.0,123456.7,1

Floats are written with Python's shortest round-trip repr, so recording a generated
workload and replaying it reproduces the run bit for bit.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Mapping

from synergy.scheduler.profiles.format import SensitivityProfile
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.workload import TraceJob, Workload

COLUMNS = ("job_id", "model", "arrival_s", "iterations", "gpus")


def write_trace(path: str | Path, workload: Workload) -> None:
    try:
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(COLUMNS)
            for s in workload.jobs:
                w.writerow((s.job_id, s.model, repr(float(s.arrival_s)), repr(float(s.iterations)), s.gpus))
    except OSError as exc:
        raise SimInputError(f"--record-trace {path}: cannot write ({exc.strerror})") from None


def read_trace(
    path: str | Path, profiles: Mapping[str, SensitivityProfile], cluster_gpus: int
) -> Workload:
    """Parse and validate a trace; every problem names the file, the row and the field.

    Rows are counted from 1 at the first job after the header; the line number in the
    file is given too because that is what editors show.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SimInputError(f"--trace {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SimInputError(f"--trace {path}: not a text (UTF-8) CSV file") from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise SimInputError(f"--trace {path}: empty file (expected header {','.join(COLUMNS)})")
    header = [h.strip() for h in header]
    if sorted(header) != sorted(COLUMNS):
        raise SimInputError(
            f"--trace {path}: header must name the columns {','.join(COLUMNS)}, got {','.join(header)}"
        )
    col = {name: header.index(name) for name in COLUMNS}
    specs: list[TraceJob] = []
    seen: dict[int, int] = {}
    row = 0
    for line_no, fields in enumerate(reader, start=2):
        if not fields or all(not f.strip() for f in fields):
            continue
        row += 1
        where = f"{path} row {row} (line {line_no})"
        if len(fields) != len(COLUMNS):
            raise SimInputError(f"{where}: expected {len(COLUMNS)} fields, got {len(fields)}")
        get = {name: fields[i].strip() for name, i in col.items()}
        job_id = _int(get["job_id"], where, "job_id", minimum=0)
        if job_id in seen:
            raise SimInputError(f"{where}: field 'job_id' {job_id} repeats row {seen[job_id]}")
        seen[job_id] = row
        model = get["model"]
        if model not in profiles:
            known = ", ".join(sorted(profiles))
            raise SimInputError(f"{where}: field 'model' {model!r} is unknown (known: {known}; add it with --profiles)")
        arrival = _float(get["arrival_s"], where, "arrival_s")
        if arrival < 0:
            raise SimInputError(f"{where}: field 'arrival_s' must be >= 0, got {get['arrival_s']}")
        iterations = _float(get["iterations"], where, "iterations")
        if iterations <= 0:
            raise SimInputError(f"{where}: field 'iterations' must be > 0, got {get['iterations']}")
        gpus = _int(get["gpus"], where, "gpus", minimum=1)
        if gpus > cluster_gpus:
            raise SimInputError(
                f"{where}: field 'gpus' asks for {gpus} GPUs but the cluster has {cluster_gpus}"
            )
        specs.append(TraceJob(job_id, model, arrival, iterations, gpus))
    if not specs:
        raise SimInputError(f"--trace {path}: no jobs after the header")
    specs.sort(key=lambda s: (s.arrival_s, s.job_id))
    return Workload(tuple(specs), static=all(s.arrival_s == 0.0 for s in specs))


def _int(text: str, where: str, field: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SimInputError(f"{where}: field {field!r} must be a whole number, got {text!r}") from None
    if value < minimum:
        raise SimInputError(f"{where}: field {field!r} must be >= {minimum}, got {value}")
    return value


def _float(text: str, where: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SimInputError(f"{where}: field {field!r} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise SimInputError(f"{where}: field {field!r} must be finite, got {text!r}")
    return value

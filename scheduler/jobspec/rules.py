"""Every rule a job spec and a job reference must satisfy, in one place.

The CLI runs these before it dials synergyd (a typo costs one line, not a round trip) and
the daemon runs them again at SubmitJob (the CLI is a courtesy; the daemon is the
boundary). Both therefore refuse the same specs with the same sentence. The limits keep one
request from holding the daemon's memory hostage and keep every value representable on
the wire and in the store's JSON.
"""
from __future__ import annotations

import math
import re
from typing import Iterable

from synergy.scheduler.gpu_type_names import gpu_type_problem
from synergy.scheduler.jobspec.spec import (
    KIND_CPU,
    KIND_TRAINING,
    KINDS,
    PROFILER_CODA,
    PROFILER_SYNERGY,
    PROFILERS,
    JobSpec,
    SpecError,
)
from synergy.scheduler.profiles.format import TASKS, ProfileError, SensitivityProfile

#: Names appear in tables, logs and metric labels: short and shell-safe. They start with a
#: letter so that a job reference of ASCII digits ("17") is always an id, never a name.
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}")
NAME_HINT = "must start with a letter and hold at most 63 letters, digits, '.', '_' or '-'"
#: User names as POSIX portable names go (`useradd`'s rule, a leading '_' allowed), bounded
#: like job names: they appear in tables, logs and DRF's queues.
USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9._-]{0,62}")
USER_HINT = "must start with a letter or '_' and hold at most 63 letters, digits, '.', '_' or '-'"
MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
#: The agent injects SYNERGY_* (job token, daemon address, allocation) into the job's
#: environment; a user value would shadow them.
RESERVED_ENV_PREFIX = "SYNERGY_"
#: Only ASCII digits make an id: str.isdigit() also accepts '²', '٣' and '１２'.
JOB_ID_RE = re.compile(r"[0-9]{1,19}")
#: Ids are SQLite integers.
MAX_JOB_ID = 2**63 - 1
MAX_JOB_REF_CHARS = 128

#: The encoded spec (proto bytes). A spec is a few hundred bytes; a profile a few KiB.
MAX_SPEC_BYTES = 256 * 1024
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_ENV = 256
MAX_ENV_VALUE_CHARS = 16384
MAX_PATH_CHARS = 4096
INT32_MAX = 2**31 - 1
#: Larger values would not fit the wire's int32 (and no machine has them).
MAX_HINT = float(INT32_MAX)
PRIORITY_RANGE = (-1000, 1000)
#: Total training steps: 10^12 is ten thousand steps a second for three years; anything
#: larger is a unit mistake, and it keeps remaining-time estimates finite and exact.
ITERATIONS_RANGE = (0, 10**12)
#: Periodic checkpoints: at most one a second (each is a full write of the state), at least
#: one a week.
CHECKPOINT_EVERY_S_RANGE = (1.0, 7 * 86400.0)
#: A job lists the types it accepts, not a catalogue.
MAX_GPU_TYPES = 16


def validate(spec: JobSpec, max_job_gpus: int | None = None, encoded_bytes: int = 0,
             prefix: str = "spec") -> JobSpec:
    """Raise SpecError for the first bad field of `spec`; return it unchanged otherwise.

    `max_job_gpus` is the cluster's limit where known (the daemon); `encoded_bytes` the
    size of the spec's wire form (0: not checked).
    """
    p = prefix + "."
    encoded_size(encoded_bytes, prefix)
    job_name(spec.name, p + "name")
    user_name(spec.user, p + "user")
    _command(spec.command, p + "command")
    top = INT32_MAX if max_job_gpus is None else max_job_gpus
    if spec.kind not in KINDS:
        raise SpecError(p + "kind", f"must be {KIND_TRAINING!r} or {KIND_CPU!r}, got {_show(spec.kind)}")
    if spec.profiler not in PROFILERS:
        names = ", ".join(x for x in PROFILERS if x)
        raise SpecError(p + "profiler", f"must be one of {names}, got {_show(spec.profiler)}")
    if spec.profiler in (PROFILER_SYNERGY, PROFILER_CODA) and not spec.checkpoint_dir:
        # Profiling ends with a stop (checkpoint, exit 75) so that the job queues with its
        # best-case demand: a job that cannot checkpoint would only fail there.
        raise SpecError(p + "checkpoint_dir", f"required with profiler {spec.profiler!r}: a profiled job stops "
                        "after profiling and resumes from its checkpoint")
    if spec.cpu_only and spec.no_share:
        raise SpecError(p + "no_share", "a CPU-only job takes no GPU, so there is none to share: "
                                        "no_share applies to GPU jobs")
    if spec.cpu_only:
        _cpu_request(spec, p)
    elif spec.gpus < 1:
        raise SpecError(p + "gpus", f"must be at least 1, got {spec.gpus}")
    if spec.gpus > top:
        where = "this cluster's maximum job size" if max_job_gpus is not None else "the largest allowed"
        raise SpecError(p + "gpus", f"must be at most {top} ({where}), got {spec.gpus}")
    for name in ("cpus_hint", "mem_gb_hint"):
        value = getattr(spec, name)
        if not math.isfinite(value) or value < 0 or value > MAX_HINT:
            raise SpecError(p + name, f"must be a finite number from 0 to {INT32_MAX}, got {value}")
    _in_range(spec.iterations, ITERATIONS_RANGE, p + "iterations")
    _in_range(spec.priority, PRIORITY_RANGE, p + "priority")
    _elastic(spec, p, top)
    path(spec.working_dir, p + "working_dir")
    path(spec.checkpoint_dir, p + "checkpoint_dir")
    checkpoint_every_s(spec.checkpoint_every_s, p + "checkpoint_every_s", cpu_only=spec.cpu_only)
    if spec.checkpoint_every_s and not spec.checkpoint_dir:
        raise SpecError(p + "checkpoint_every_s", "needs checkpoint_dir: periodic checkpoints are written there")
    if spec.model and not MODEL_RE.fullmatch(spec.model):
        raise SpecError(p + "model", f"{_show(spec.model)} must be a model name such as resnet18 "
                                     "(at most 128 letters, digits, '.', '_', '+' or '-')")
    if spec.task and spec.task not in TASKS:
        raise SpecError(p + "task", f"must be one of {', '.join(TASKS)}, got {_show(spec.task)}")
    env(spec.env, p + "env")
    gpu_types(spec, p + "gpu_types")
    if spec.profile is not None:
        try:
            SensitivityProfile.from_dict(spec.model or spec.name, spec.profile)  # type: ignore[arg-type]
        except ProfileError as exc:
            raise SpecError(p + "profile", str(exc)) from None
    return spec


def checkpoint_every_s(value: float, field: str = "spec.checkpoint_every_s", cpu_only: bool = False) -> float:
    """0 (the cluster's default) or seconds in CHECKPOINT_EVERY_S_RANGE; the daemon's own
    default (--checkpoint-every-s) goes through the same rule."""
    low, high = CHECKPOINT_EVERY_S_RANGE
    if value != 0 and not (math.isfinite(value) and low <= value <= high):
        raise SpecError(field, f"must be 0 or from {low:g} to {high:g} seconds, got {value}")
    if value and cpu_only:
        raise SpecError(field, "a CPU-only job is a plain command without the iterator: it takes no checkpoints")
    return value


def encoded_size(encoded_bytes: int, field: str = "spec") -> None:
    """The spec's wire form must fit MAX_SPEC_BYTES (the CLI checks before sending)."""
    if encoded_bytes > MAX_SPEC_BYTES:
        raise SpecError(field, f"is {encoded_bytes} bytes, at most {MAX_SPEC_BYTES} allowed")


def job_name(value: str, field: str = "spec.name") -> str:
    if not value:
        raise SpecError(field, "must not be empty")
    if not NAME_RE.fullmatch(value):
        raise SpecError(field, f"{_show(value)} {NAME_HINT}")
    return value


def user_name(value: str, field: str = "spec.user") -> str:
    """A job's user ("" = none: the job is its own user in DRF)."""
    if value and not USER_RE.fullmatch(value):
        raise SpecError(field, f"{_show(value)} {USER_HINT}")
    return value


def parse_job_ref(value: str, field: str = "job") -> int | str:
    """A job reference as typed by a user: an id (ASCII digits only) or a job name."""
    if not value:
        raise SpecError(field, "must name a job (its id or its name)")
    if len(value) > MAX_JOB_REF_CHARS:
        raise SpecError(field, f"is {len(value)} characters long, at most {MAX_JOB_REF_CHARS} allowed")
    if JOB_ID_RE.fullmatch(value):
        job_id = int(value)
        if job_id > MAX_JOB_ID:
            raise SpecError(field, f"job id {value} is out of range (at most {MAX_JOB_ID})")
        return job_id
    if not NAME_RE.fullmatch(value):
        raise SpecError(field, f"{_show(value)} is neither a job id (ASCII digits) nor a job name "
                               "(a letter, then letters, digits, '.', '_' or '-')")
    return value


def path(value: str, field: str) -> str:
    """A path the agent hands to the OS: bounded, and no NUL (the OS would cut it there)."""
    if len(value) > MAX_PATH_CHARS:
        raise SpecError(field, f"is {len(value)} characters long, at most {MAX_PATH_CHARS} allowed")
    no_nul(value, field)
    return value


def env(pairs: Iterable[tuple[str, str]], field: str = "spec.env") -> None:
    items = list(pairs)
    if len(items) > MAX_ENV:
        raise SpecError(field, f"has {len(items)} variables, at most {MAX_ENV} allowed")
    for key, value in items:
        if not ENV_NAME_RE.fullmatch(key):
            raise SpecError(field, f"{_show(key)} is not a valid variable name (letters, digits and '_', "
                                   "not starting with a digit, at most 256)")
        if key.startswith(RESERVED_ENV_PREFIX):
            raise SpecError(f"{field}[{key}]", f"is reserved: {RESERVED_ENV_PREFIX}* variables are set by synergy")
        if len(value) > MAX_ENV_VALUE_CHARS:
            raise SpecError(f"{field}[{key}]", f"is {len(value)} characters long, "
                                               f"at most {MAX_ENV_VALUE_CHARS} allowed")
        no_nul(value, f"{field}[{key}]")


def gpu_types(spec: JobSpec, field: str = "spec.gpu_types") -> None:
    """At most MAX_GPU_TYPES type names, each once; a CPU-only job has no GPU to choose."""
    types = spec.gpu_types
    if not types:
        return
    if spec.cpu_only:
        raise SpecError(field, f"must be empty for a job of kind {KIND_CPU!r} (it takes no GPU)")
    if len(types) > MAX_GPU_TYPES:
        raise SpecError(field, f"has {len(types)} types, at most {MAX_GPU_TYPES} allowed")
    for i, name in enumerate(types):
        problem = gpu_type_problem(name)
        if problem:
            raise SpecError(f"{field}[{i}]", problem)
        if name in types[:i]:
            raise SpecError(f"{field}[{i}]", f"{name!r} is listed twice")


def no_nul(value: str, field: str) -> None:
    if "\x00" in value:
        raise SpecError(field, "must not contain NUL characters")


def _command(argv: tuple[str, ...], field: str) -> None:
    if not argv:
        raise SpecError(field, "must not be empty (give the program and its arguments)")
    if len(argv) > MAX_ARGS:
        raise SpecError(field, f"has {len(argv)} arguments, at most {MAX_ARGS} allowed")
    for i, arg in enumerate(argv):
        where = f"{field}[{i}]"
        if not arg.strip():
            raise SpecError(where, "the program must not be blank" if i == 0 else
                            "must not be empty (every argument is passed to the program as is)")
        if len(arg) > MAX_ARG_CHARS:
            raise SpecError(where, f"is {len(arg)} characters long, at most {MAX_ARG_CHARS} allowed")
        no_nul(arg, where)


def _cpu_request(spec: JobSpec, p: str) -> None:
    """A CPU-only job takes no GPU and must say what CPUs and memory it needs."""
    if spec.gpus != 0:
        raise SpecError(p + "gpus", f"must be 0 for a job of kind {KIND_CPU!r}, got {spec.gpus}")
    for name in ("cpus_hint", "mem_gb_hint"):
        value = getattr(spec, name)
        if not (math.isfinite(value) and value > 0):
            raise SpecError(p + name, f"must be given (> 0) for a job of kind {KIND_CPU!r}: it is the job's request")
    if spec.elastic:
        raise SpecError(p + "min_gpus", f"must be unset for a job of kind {KIND_CPU!r}")


def _elastic(spec: JobSpec, p: str, top: int) -> None:
    """An elastic job runs at any whole number of GPUs from min_gpus to max_gpus; `gpus` is
    the size its profile and hints describe (scheduler/elastic/scaling.py)."""
    if not spec.elastic:
        return
    lo, hi = spec.min_gpus, spec.max_gpus
    if lo < 1:
        raise SpecError(p + "min_gpus", f"must be at least 1 when an elastic range is given, got {lo}")
    if hi < lo:
        raise SpecError(p + "max_gpus", f"must be at least min_gpus ({lo}), got {hi}")
    if hi > top:
        raise SpecError(p + "max_gpus", f"must be at most {top} (the largest job allowed), got {hi}")
    if not lo <= spec.gpus <= hi:
        raise SpecError(p + "gpus", f"must lie in the elastic range {lo}..{hi}, got {spec.gpus}")


def _in_range(value: int, bounds: tuple[int, int], field: str) -> None:
    lo, hi = bounds
    if value < lo:
        raise SpecError(field, f"must be at least {lo}, got {value}")
    if value > hi:
        raise SpecError(field, f"must be at most {hi}, got {value}")


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:37] + "...")

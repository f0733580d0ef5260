"""Request validation: every field checked, every error one line naming the field.

Field names are the proto paths (`spec.gpus`, `capacity.cpus`) so a CLI user or an agent
author can find the culprit in the .proto file directly. Size limits keep one request from
holding the daemon's memory hostage (the gRPC message limit catches the rest).
"""

from __future__ import annotations

import math
import re
from typing import Iterable

from synergy.scheduler.daemon.errors import InvalidArgument
from synergy.scheduler.daemon.records import JobSpec
from synergy.scheduler.model import Placement, Resources
from synergy.scheduler.profiles.format import TASKS, ProfileError, SensitivityProfile

NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}")
NODE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
MAX_ARGS = 256
MAX_ARG_CHARS = 4096
MAX_ENV = 256
MAX_ENV_VALUE_CHARS = 16384
MAX_PATH_CHARS = 4096
MAX_TEXT_CHARS = 1024
MAX_SPEC_BYTES = 256 * 1024
MAX_TASKS_PER_NODE = 1024
MAX_GPUS_PER_NODE = 1024
#: Steps, attempts and ranks above this are not plausible (and would not survive JSON).
MAX_COUNTER = 2**53


def job_name(value: str, field: str = "spec.name") -> str:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if not NAME_RE.fullmatch(value):
        raise InvalidArgument(
            field, f"{_show(value)} must start with a letter and hold at most 63 letters, digits, '.', '_' or '-'"
        )
    return value


def node_id(value: str, field: str = "node_id") -> str:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if not NODE_ID_RE.fullmatch(value):
        raise InvalidArgument(field, f"{_show(value)} must be at most 128 letters, digits, '.', '_', ':' or '-'")
    return value


def text(value: str, field: str, limit: int = MAX_TEXT_CHARS) -> str:
    if len(value) > limit:
        raise InvalidArgument(field, f"is {len(value)} characters long, at most {limit} allowed")
    return value


def job_ref(value: str, field: str = "job") -> str:
    if not value:
        raise InvalidArgument(field, "must name a job (its id or its name)")
    return text(value, field, 128)


def job_spec(spec: JobSpec, max_job_gpus: int, encoded_bytes: int = 0) -> JobSpec:
    """Raise InvalidArgument for the first bad field of `spec`; return it unchanged otherwise."""
    if encoded_bytes > MAX_SPEC_BYTES:
        raise InvalidArgument("spec", f"is {encoded_bytes} bytes, at most {MAX_SPEC_BYTES} allowed")
    job_name(spec.name)
    if not spec.command:
        raise InvalidArgument("spec.command", "must not be empty (give the program and its arguments)")
    if len(spec.command) > MAX_ARGS:
        raise InvalidArgument("spec.command", f"has {len(spec.command)} arguments, at most {MAX_ARGS} allowed")
    if not spec.command[0].strip():
        raise InvalidArgument("spec.command[0]", "the program must not be blank")
    for i, arg in enumerate(spec.command):
        text(arg, f"spec.command[{i}]", MAX_ARG_CHARS)
        _no_nul(arg, f"spec.command[{i}]")
    if spec.gpus <= 0:
        raise InvalidArgument("spec.gpus", f"must be at least 1, got {spec.gpus}")
    if spec.gpus > max_job_gpus:
        raise InvalidArgument("spec.gpus", f"{spec.gpus} is above this cluster's maximum job size ({max_job_gpus})")
    for field, value in (("spec.cpus_hint", spec.cpus_hint), ("spec.mem_gb_hint", spec.mem_gb_hint)):
        _non_negative(value, field)
    if spec.iterations < 0:
        raise InvalidArgument("spec.iterations", f"must not be negative, got {spec.iterations}")
    if spec.min_gpus != 0 or spec.max_gpus != 0:
        field = "spec.min_gpus" if spec.min_gpus != 0 else "spec.max_gpus"
        raise InvalidArgument(field, "elastic jobs are reserved for a later release; leave it unset")
    text(spec.working_dir, "spec.working_dir", MAX_PATH_CHARS)
    _no_nul(spec.working_dir, "spec.working_dir")
    text(spec.checkpoint_dir, "spec.checkpoint_dir", MAX_PATH_CHARS)
    _no_nul(spec.checkpoint_dir, "spec.checkpoint_dir")
    text(spec.model, "spec.model", 128)
    if spec.task and spec.task not in TASKS:
        raise InvalidArgument("spec.task", f"{_show(spec.task)} is not one of {', '.join(TASKS)}")
    if len(spec.env) > MAX_ENV:
        raise InvalidArgument("spec.env", f"has {len(spec.env)} variables, at most {MAX_ENV} allowed")
    for key, value in spec.env:
        if not ENV_NAME_RE.fullmatch(key):
            raise InvalidArgument("spec.env", f"{_show(key)} is not a valid variable name")
        if key.startswith("SYNERGY_"):
            raise InvalidArgument(f"spec.env[{key}]", "SYNERGY_* variables are set by the agent")
        text(value, f"spec.env[{key}]", MAX_ENV_VALUE_CHARS)
        _no_nul(value, f"spec.env[{key}]")
    if spec.profile is not None:
        profile(spec.profile, spec.model or spec.name, "spec.profile")
    return spec


def profile(doc: object, model: str, field: str) -> SensitivityProfile:
    try:
        return SensitivityProfile.from_dict(model, doc)  # type: ignore[arg-type]
    except ProfileError as exc:
        raise InvalidArgument(field, str(exc)) from None


def resources(r: Resources, field: str) -> Resources:
    for name in ("gpus", "cpus", "mem_gb"):
        _non_negative(getattr(r, name), f"{field}.{name}")
    if r.gpus != int(r.gpus) or r.gpus > MAX_GPUS_PER_NODE:
        raise InvalidArgument(f"{field}.gpus", f"must be a whole number up to {MAX_GPUS_PER_NODE}, got {r.gpus}")
    return r


def counter(value: int, field: str) -> int:
    if value > MAX_COUNTER:
        raise InvalidArgument(field, f"{value} is implausibly large (at most 2^53)")
    return value


def task_placement(p: Placement, field: str) -> Placement:
    for name in ("cpus", "mem_gb"):
        _non_negative(getattr(p, name), f"{field}.{name}")
    if p.gpus > MAX_GPUS_PER_NODE:
        raise InvalidArgument(f"{field}.gpus", f"{p.gpus} is more than a node can hold")
    return p


def node_resources(capacity: Resources, reserved: Resources) -> None:
    resources(capacity, "capacity")
    resources(reserved, "reserved")
    for name in ("gpus", "cpus", "mem_gb"):
        if getattr(reserved, name) > getattr(capacity, name):
            raise InvalidArgument(f"reserved.{name}", "is larger than the node's capacity")


def count(items: Iterable[object], field: str, limit: int) -> None:
    n = sum(1 for _ in items)
    if n > limit:
        raise InvalidArgument(field, f"has {n} entries, at most {limit} allowed")


def _non_negative(value: float, field: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(field, f"must be a finite number >= 0, got {value}")


def _no_nul(value: str, field: str) -> None:
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL characters")


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:37] + "...")

"""Request validation: every field checked, every error one line naming the field.

Field names are the proto paths (`spec.gpus`, `capacity.cpus`) so a CLI user or an agent
author can find the culprit in the .proto file directly. Size limits keep one request from
holding the daemon's memory hostage (the gRPC message limit catches the rest).
"""

from __future__ import annotations

import enum
import functools
import math
import re
import sys
from typing import Any, Iterable, Sequence

from google.protobuf.message import Message

from synergy.scheduler.daemon.errors import InvalidArgument
from synergy.scheduler.daemon.tasklogs import LOG_CHUNK_BYTES, MAX_LOG_CHUNKS
from synergy.scheduler.gpu_type_names import gpu_type_problem
from synergy.scheduler.jobspec import JobSpec, SpecError, parse_job_ref, rules
from synergy.scheduler.model import Placement, Resources
from synergy.scheduler.profiles.format import ProfileError, SensitivityProfile

NODE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Job-spec limits live with the spec's rules (shared with the CLI); re-exported for the
#: other requests that carry a path or a profile.
MAX_PATH_CHARS = rules.MAX_PATH_CHARS
MAX_SPEC_BYTES = rules.MAX_SPEC_BYTES
MAX_TEXT_CHARS = 1024
MAX_TASKS_PER_NODE = 1024
MAX_GPUS_PER_NODE = 1024
MAX_CORES_PER_NODE = 65536
#: Steps, attempts and ranks above this are not plausible (and would not survive JSON).
MAX_COUNTER = 2**53


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


def job_ref(value: str, field: str = "job") -> int | str:
    """A job id (ASCII digits only: '²' or '１２' are not ids) or a job name (rules.parse_job_ref)."""
    try:
        return parse_job_ref(value, field)
    except SpecError as exc:
        raise InvalidArgument(exc.field, exc.problem) from None


def job_spec(spec: JobSpec, max_job_gpus: int, encoded_bytes: int = 0) -> JobSpec:
    """Raise InvalidArgument for the first bad field of `spec` (the rules the CLI runs too);
    return it unchanged otherwise."""
    try:
        return rules.validate(spec, max_job_gpus, encoded_bytes)
    except SpecError as exc:
        raise InvalidArgument(exc.field, exc.problem) from None


def os_path(value: str, field: str) -> str:
    """A path that reaches the OS on a node (a checkpoint path): bounded, no NUL."""
    try:
        return rules.path(value, field)
    except SpecError as exc:
        raise InvalidArgument(exc.field, exc.problem) from None


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


#: The largest RenewLeaseRequest.answer_every: a stream answered at least once per this many messages.
MAX_ANSWER_EVERY = 100


def answer_every(value: int, field: str = "answer_every") -> int:
    if value > MAX_ANSWER_EVERY:
        raise InvalidArgument(field, f"must be at most {MAX_ANSWER_EVERY}, got {value}")
    return value


def cache_stats(msg: Message, field: str) -> dict[str, int]:
    """A CacheStats message as plain counters (each at most 2^53; used <= capacity not
    required: a shrink is applied between two reports)."""
    out = {}
    for f in msg.DESCRIPTOR.fields:
        out[f.name] = counter(getattr(msg, f.name), f"{field}.{f.name}")
    return out


#: A reported task's message (the tail of its output the agent keeps).
MAX_TASK_MESSAGE_CHARS = 64 * 1024


def task_status(t: Message, i: int) -> None:
    """`tasks[i]` of a heartbeat or registration, before conversion: its message bounded, its
    usage and throttle measured, its cores counted. A node reports every task on every
    heartbeat, so a field's path is spelled only when a rule fails (each check below is the
    named rule's own condition, and the rule then raises)."""
    if len(t.message) > MAX_TASK_MESSAGE_CHARS:
        text(t.message, f"tasks[{i}].message", MAX_TASK_MESSAGE_CHARS)
    if t.HasField("usage"):
        measurements(t.usage, f"tasks[{i}].usage")
    if t.HasField("throttle"):
        throttle(t.throttle, f"tasks[{i}].throttle")
    if len(t.cores) > MAX_CORES_PER_NODE:
        count(t.cores, f"tasks[{i}].cores", MAX_CORES_PER_NODE)


def observed_task(job_id: int, attempt: int, p: Placement | None, i: int) -> None:
    """`tasks[i]` after conversion: plausible ids, and a placement `task_placement` accepts."""
    if job_id > MAX_COUNTER or attempt > MAX_COUNTER:
        counter(job_id, f"tasks[{i}].ref.job_id")
        counter(attempt, f"tasks[{i}].ref.attempt")
    if p is not None and not (0 <= p.cpus <= _FLOAT_MAX and 0 <= p.mem_gb <= _FLOAT_MAX  # False for NaN too
                              and p.gpus <= MAX_GPUS_PER_NODE):
        task_placement(p, f"tasks[{i}].placement")


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


#: cgroup modes an agent may report ("" = an agent that does not say).
CGROUP_MODES = ("", "v1", "v2", "none")
#: Where a memory-bandwidth figure comes from.
BANDWIDTH_SOURCES = ("resctrl", "estimate")


def cgroup_mode(value: str, field: str = "cgroup_mode") -> str:
    if value not in CGROUP_MODES:
        raise InvalidArgument(field, f"must be 'v1', 'v2' or 'none', got {_show(value)}")
    return value


def gpu_type(value: str, field: str = "gpu_type") -> str:
    """A node's GPU type: "" (untyped) or a type name (synergy.scheduler.gpu_type_names)."""
    problem = gpu_type_problem(value) if value else None
    if problem:
        raise InvalidArgument(field, problem)
    return value


def measurements(msg: Message, field: str) -> None:
    """Every number in a telemetry message (NodeTelemetry, ResourceUsage, nested) finite and
    >= 0, percentages <= 100, counts <= 2^53, a bandwidth figure with a known source.

    Walks the message's set fields, so fields added later are checked by the same rules.
    Each heartbeat walks its node's telemetry and every task's usage: which rule a field gets
    is worked out once per message type (`_measured_fields`), and a field's path is spelled
    only for a nested message or an error.
    """
    rules = _measured_fields(msg.DESCRIPTOR)
    for fd, value in msg.ListFields():
        rule = rules[fd.number]
        if rule is _Measured.NUMBER:
            if not (0 <= value <= _FLOAT_MAX):  # False for NaN too
                _non_negative(value, f"{field}.{fd.name}")
        elif rule is _Measured.PERCENT:
            if not 0 <= value <= 100:
                _non_negative(value, f"{field}.{fd.name}")
                raise InvalidArgument(f"{field}.{fd.name}", f"is a percentage, at most 100, got {value}")
        elif rule is _Measured.COUNT:
            if value < 0 or value > MAX_COUNTER:
                raise InvalidArgument(f"{field}.{fd.name}", f"{value} is out of range (0 to 2^53)")
        elif rule is _Measured.MESSAGE:
            measurements(value, f"{field}.{fd.name}")
        elif rule is _Measured.MESSAGES:
            for i, item in enumerate(value):
                measurements(item, f"{field}.{fd.name}[{i}]")
        elif rule is _Measured.SOURCE and value not in BANDWIDTH_SOURCES:
            raise InvalidArgument(f"{field}.{fd.name}", f"must be 'resctrl' or 'estimate', got {_show(value)}")
    if msg.DESCRIPTOR.name == "MemoryBandwidth" and msg.gb_per_s and not msg.source:
        raise InvalidArgument(f"{field}.source", "must say where the figure comes from ('resctrl' or 'estimate')")


class _Measured(enum.Enum):
    """The rule `measurements` applies to a field, by its type and name."""

    NUMBER = "finite, >= 0"
    PERCENT = "finite, 0 to 100"
    COUNT = "0 to 2^53"
    MESSAGE = "its fields by these rules"
    MESSAGES = "each item's fields by these rules"
    SOURCE = "a known bandwidth source"
    FREE = "no rule"


_FLOAT_MAX = sys.float_info.max


@functools.cache
def _measured_fields(descriptor: Any) -> dict[int, _Measured]:
    """Field number -> rule, for one message type (cached: a type's fields never change)."""
    rules = {}
    for fd in descriptor.fields:
        if fd.message_type is not None:
            rule = _Measured.MESSAGES if fd.is_repeated else _Measured.MESSAGE  # (fd.label: deprecated in protobuf 6)
        elif fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
            pct = fd.name.endswith("_pct") or fd.name.endswith("avg10")
            rule = _Measured.PERCENT if pct else _Measured.NUMBER
        elif fd.type in (fd.TYPE_UINT64, fd.TYPE_UINT32, fd.TYPE_INT64, fd.TYPE_INT32):
            rule = _Measured.COUNT
        else:
            rule = _Measured.SOURCE if fd.name == "source" else _Measured.FREE
        rules[fd.number] = rule
    return rules


def throttle(msg: Message, field: str) -> None:
    """A task's TaskThrottle: bounded text, a finite non-negative time (unset = not throttled)."""
    text(msg.action, f"{field}.action", 256)
    text(msg.reason, f"{field}.reason", 1024)
    measurements(msg, field)


def log_chunks(chunks: Sequence[Any]) -> None:
    """Bounded: at most MAX_LOG_CHUNKS chunks of LOG_CHUNK_BYTES, plausible offsets and refs."""
    count(chunks, "log_chunks", MAX_LOG_CHUNKS)
    for i, c in enumerate(chunks):
        if len(c.data) > LOG_CHUNK_BYTES:
            raise InvalidArgument(f"log_chunks[{i}].data", f"is {len(c.data)} bytes, at most {LOG_CHUNK_BYTES} allowed")
        text(c.error, f"log_chunks[{i}].error")
        counter(c.offset, f"log_chunks[{i}].offset")
        counter(c.ref.job_id, f"log_chunks[{i}].ref.job_id")
        counter(c.ref.attempt, f"log_chunks[{i}].ref.attempt")


def count(items: Iterable[object], field: str, limit: int) -> None:
    try:
        n = len(items)  # type: ignore[arg-type]
    except TypeError:  # an iterable without a length
        n = sum(1 for _ in items)
    if n > limit:
        raise InvalidArgument(field, f"has {n} entries, at most {limit} allowed")


def _non_negative(value: float, field: str) -> None:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(field, f"must be a finite number >= 0, got {value}")


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:37] + "...")

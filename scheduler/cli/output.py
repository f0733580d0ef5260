"""Rendering: rich tables for people, one JSON document for scripts.

Commands return a `Result` (plain data plus a renderable) and never print, so `--json`
is handled once in main and every command supports it by construction.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

#: Line width when stdout is not a terminal.
PIPE_WIDTH = 200


@dataclass(frozen=True)
class Result:
    """What a command produced: `data` for --json, `view` for the terminal."""

    data: Any
    view: RenderableType | str


def emit(result: Result, as_json: bool) -> None:
    if not as_json and isinstance(result.view, str) and not result.view:
        return  # the command wrote its output itself (`logs -f` streams it)
    if as_json:
        json.dump(result.data, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
        sys.stdout.flush()
        return
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # Piped into grep/less: do not fold rows to the 80 columns rich assumes.
        console = Console(width=PIPE_WIDTH)
    # Plain strings become Text: user data ("[x]" in a command) is never read as markup.
    view = Text(result.view) if isinstance(result.view, str) else result.view
    console.print(view)


# -- protobuf -> plain data ---------------------------------------------------------------------
def to_plain(msg: Message) -> dict[str, Any]:
    """A message as JSON-able data with every field present.

    Unlike json_format this keeps 64-bit integers as numbers and writes enums as the short
    lower-case word a user reads in tables (JOB_STATE_RUNNING -> "running"), so the JSON
    and the table speak the same vocabulary.
    """
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if _is_map(fd):
            value_fd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: _scalar(value_fd, v) for k, v in value.items()}
        elif _is_repeated(fd):
            out[fd.name] = [_scalar(fd, v) for v in value]
        elif fd.type == FieldDescriptor.TYPE_MESSAGE and _has_presence(fd) and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = _scalar(fd, value)
    return out


def enum_word(enum_type: Any, number: int) -> str:
    """JOB_STATE_RUNNING -> "running": the enum's type-name prefix removed."""
    value = enum_type.values_by_number.get(number)
    if value is None:
        return str(number)
    prefix = _enum_prefix(enum_type.name)
    name = value.name
    return (name[len(prefix):] if name.startswith(prefix) else name).lower()


def _enum_prefix(type_name: str) -> str:
    # JobState -> "JOB_STATE_"
    chars = []
    for i, ch in enumerate(type_name):
        if ch.isupper() and i:
            chars.append("_")
        chars.append(ch.upper())
    return "".join(chars) + "_"


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        return to_plain(value)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return enum_word(fd.enum_type, value)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return value.hex()
    return value


def _is_repeated(fd: FieldDescriptor) -> bool:
    return bool(fd.is_repeated)


def _is_map(fd: FieldDescriptor) -> bool:
    return (_is_repeated(fd) and fd.type == FieldDescriptor.TYPE_MESSAGE
            and fd.message_type.GetOptions().map_entry)


def _has_presence(fd: FieldDescriptor) -> bool:
    return getattr(fd, "has_presence", True)


# -- table helpers -----------------------------------------------------------------------------
def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for i, col in enumerate(columns):
        # Only the last column (reasons, free text) folds; ids and names stay whole.
        last = i == len(columns) - 1
        t.add_column(col, overflow="fold" if last else "ellipsis", no_wrap=not last)
    for row in rows:
        t.add_row(*(cell(v) for v in row))
    return t


def kv_table(rows: Iterable[tuple[str, Any]]) -> Table:
    """Two columns, key and value, no header: the layout of `describe` and `status`."""
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for key, value in rows:
        t.add_row(key, cell(value))
    return t


def cell(value: Any) -> Text:
    """A table cell; strings are wrapped in Text so rich never interprets them as markup."""
    if isinstance(value, Text):
        return value
    return Text("" if value is None else str(value))


#: Colour of a job or node state word wherever it is shown.
STATE_STYLES = {
    "running": "green", "queued": "yellow", "preempted": "yellow", "failed": "red",
    "cancelled": "dim", "succeeded": "blue",
    "ready": "green", "cordoned": "yellow", "draining": "yellow", "lost": "red",
}


def state_text(word: str) -> Text:
    return Text(word, style=STATE_STYLES.get(word, ""))


def fmt_num(x: float) -> str:
    """1.0 -> "1", 2.5 -> "2.5": resources read as they were typed."""
    return f"{x:.2f}".rstrip("0").rstrip(".") if x == x else "-"


def fmt_resources(gpus: float, cpus: float, mem_gb: float) -> str:
    return f"{fmt_num(gpus)} GPU, {fmt_num(cpus)} CPU, {fmt_num(mem_gb)} GB"


def fmt_time(unix_s: float) -> str:
    """Local wall time, or '-' for the zero value of an unset timestamp."""
    if not unix_s:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_s))


def fmt_age(unix_s: float, now_s: float | None = None) -> str:
    if not unix_s:
        return "-"
    secs = max(0.0, (time.time() if now_s is None else now_s) - unix_s)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs)}s"


# -- telemetry (ResourceUsage, MemoryBandwidth: common.proto) -------------------------------------
def fmt_bytes(n: float) -> str:
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{int(n)}B"


def fmt_bandwidth(bw: Any, peak: Any = None) -> str:
    """'3.1 GB/s (estimate)', or '3.1/12 GB/s (estimate)' with the peak: the source always shows."""
    if bw is None or not bw.source:
        return "-"
    if peak is not None and peak.source:
        return f"{bw.gb_per_s:.1f}/{peak.gb_per_s:.0f} GB/s ({bw.source})"
    return f"{bw.gb_per_s:.1f} GB/s ({bw.source})"


def fmt_pressure(usage: Any) -> str:
    """'cpu 3/0 mem 0/0 io 1/0' (some/full avg10 %) for the resources the kernel reports."""
    parts = [f"{name} {fmt_num(p.some_avg10)}/{fmt_num(p.full_avg10)}"
             for name, field in (("cpu", "cpu_pressure"), ("mem", "memory_pressure"), ("io", "io_pressure"))
             if usage.HasField(field) for p in [getattr(usage, field)]]
    return " ".join(parts) or "-"


def fmt_usage(usage: Any) -> str:
    """One line for a task's or node's usage: CPU, RSS, memory bandwidth with its source."""
    bw = usage.mem_bandwidth if usage.HasField("mem_bandwidth") else None
    return f"{fmt_num(usage.cpu_cores)} CPU, {fmt_bytes(usage.rss_bytes)} RSS, mem bw {fmt_bandwidth(bw)}"

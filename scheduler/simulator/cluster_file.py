"""`synergy-sim --cluster FILE`: a cluster of server groups, GPU types mixed.

The file (JSON, or YAML by a .yaml/.yml suffix) is a list of server groups::

    - {count: 8, gpus: 8, cpus: 24, mem_gb: 500, gpu_type: V100}
    - {count: 8, gpus: 4, cpus: 16, mem_gb: 256, gpu_type: T4}

`gpu_type` may be left out ("" = untyped). A group with `gpus: 0` is CPU servers (CODA's CPU
array). Errors name the file, the group (1-based) and the field.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from synergy.scheduler.model import Cluster, Resources, Server, ServerPool
from synergy.scheduler.gpu_type_names import gpu_type_problem
from synergy.scheduler.simulator.errors import SimInputError

FIELDS = ("count", "gpus", "cpus", "mem_gb", "gpu_type")


@dataclass(frozen=True)
class ServerGroup:
    count: int
    gpus: int
    cpus: float
    mem_gb: float
    gpu_type: str = ""


def load_cluster_file(path: str | Path) -> tuple[ServerGroup, ...]:
    """The groups of a cluster file; SimInputError naming the file, group and field."""
    where = f"--cluster {path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SimInputError(f"{where}: cannot read ({exc.strerror})") from None
    try:
        doc = yaml.safe_load(text) if str(path).endswith((".yaml", ".yml")) else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise SimInputError(f"{where}: not valid {'YAML' if str(path).endswith(('.yaml', '.yml')) else 'JSON'} "
                            f"({str(exc).splitlines()[0]})") from None
    return parse_groups(doc, where)


def parse_groups(doc: Any, where: str = "cluster") -> tuple[ServerGroup, ...]:
    if not isinstance(doc, list) or not doc:
        raise SimInputError(f"{where}: expected a non-empty list of server groups "
                            "({count, gpus, cpus, mem_gb, gpu_type})")
    groups = []
    for n, g in enumerate(doc, 1):
        at = f"{where}: group {n}"
        if not isinstance(g, dict):
            raise SimInputError(f"{at}: expected an object with {', '.join(FIELDS)}")
        unknown = sorted(set(g) - set(FIELDS))
        if unknown:
            raise SimInputError(f"{at}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
        for key in ("count", "gpus", "cpus", "mem_gb"):
            if key not in g:
                raise SimInputError(f"{at}: missing field {key!r}")
        count, gpus = g["count"], g["gpus"]
        if not _is_int(count) or count < 1:
            raise SimInputError(f"{at}: field 'count' must be a whole number >= 1, got {count!r}")
        if not _is_int(gpus) or gpus < 0:
            raise SimInputError(f"{at}: field 'gpus' must be a whole number >= 0, got {gpus!r}")
        for key in ("cpus", "mem_gb"):
            v = g[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise SimInputError(f"{at}: field {key!r} must be a positive number, got {v!r}")
        gpu_type = g.get("gpu_type", "")
        if not isinstance(gpu_type, str):
            raise SimInputError(f"{at}: field 'gpu_type' must be a string, got {gpu_type!r}")
        problem = gpu_type_problem(gpu_type) if gpu_type else None
        if problem:
            raise SimInputError(f"{at}: field 'gpu_type': {problem}")
        if gpus == 0 and gpu_type:
            raise SimInputError(f"{at}: field 'gpu_type' needs gpus >= 1 (a CPU server has no GPU type)")
        groups.append(ServerGroup(int(count), int(gpus), float(g["cpus"]), float(g["mem_gb"]), gpu_type))
    if not any(g.gpus for g in groups):
        raise SimInputError(f"{where}: no group has GPUs")
    return tuple(groups)


def build_servers(groups: Sequence[ServerGroup]) -> tuple[Server, ...]:
    """Servers named by type and number (`V100-0`, ...; `s0` untyped, `c0` CPU servers)."""
    servers: list[Server] = []
    seen: dict[str, int] = {}
    for g in groups:
        prefix = g.gpu_type or ("s" if g.gpus else "c")
        for _ in range(g.count):
            k = seen.get(prefix, 0)
            seen[prefix] = k + 1
            sid = f"{prefix}-{k}" if g.gpu_type else f"{prefix}{k}"
            pool = ServerPool.TRAINING if g.gpus else ServerPool.CPU_ONLY
            servers.append(Server(sid, Resources(g.gpus, g.cpus, g.mem_gb), pool=pool, gpu_type=g.gpu_type))
    return tuple(servers)


def describe_groups(groups: Sequence[ServerGroup]) -> str:
    return " + ".join(f"{g.count}x {g.gpus} {g.gpu_type or 'untyped'} GPUs ({g.cpus:g} CPUs, {g.mem_gb:g} GB)"
                      if g.gpus else f"{g.count}x CPU server ({g.cpus:g} CPUs, {g.mem_gb:g} GB)" for g in groups)


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)


def as_cluster(groups: Sequence[ServerGroup]) -> Cluster:
    return Cluster(build_servers(groups))

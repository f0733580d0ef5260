"""The sensitivity-profile format shared by users, the profiler and the scheduler.

A profile says how fast a model trains, relative to a reference allocation, for each
(CPUs per GPU, GB of memory per GPU) cell of a grid. The file format (see
docs/profiles.md) is JSON::

    {"format": "synergy-profile/v1",
     "models": {"resnet18": {
         "task": "image",
         "cpus_per_gpu":   [1, 2, 3, ...],          # row values, strictly increasing
         "mem_gb_per_gpu": [20, 31.25, 62.5, ...],  # column values, strictly increasing
         "throughput": [[...], ...],                # rows x columns, reference cell = 1.0
         "reference": {"cpus_per_gpu": 3, "mem_gb_per_gpu": 62.5},
         "iter_time_s": 0.25,                       # seconds per iteration at the reference
         "source": "where the numbers come from",
         "gpu_types": {"T4": {"speed": 0.45},       # optional: per GPU type (below)
                       "A100": {"speed": 2.1, "throughput": [[...], ...]}}}}}

Profiles are per GPU on purpose: the GPU-proportional share depends on the cluster's
shape, so the core derives it per cluster instead of baking one cluster into a profile.

GPU types (heterogeneous clusters, Synergy §6). The grid above is measured on a reference
GPU. `gpu_types` says how the model runs on other GPU models: `speed` is its throughput at
the reference cell relative to the reference GPU's, and an optional `throughput` grid (same
axes, relative to its own reference cell) gives that type's CPU and memory sensitivity,
since a faster GPU is hungrier for CPU. `SensitivityProfile.on(gpu_type)` is the profile a
job has on that type; the scheduler sizes and times jobs with it.
"""
from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from synergy.scheduler.gpu_type_names import gpu_type_problem

FORMAT = "synergy-profile/v1"
TASKS = ("image", "language", "speech")
#: §3.2: the best-case demand is the smallest (c, m) within 1% of the saturated throughput.
SATURATION_TOLERANCE = 0.01


class ProfileError(ValueError):
    """A profile file or entry is malformed; the message names the model and field."""


@dataclass(frozen=True)
class GpuTypeSpeed:
    """How a model runs on one GPU type, relative to the profile's reference GPU."""

    #: Throughput at the reference cell relative to the reference GPU's (T4 vs V100: ~0.45).
    speed: float
    #: The type's own sensitivity grid on the profile's axes, relative to its reference cell;
    #: None = the reference GPU's grid (the type only scales it).
    throughput: tuple[tuple[float, ...], ...] | None = None


@dataclass(frozen=True)
class SensitivityProfile:
    model: str
    task: str
    cpus_per_gpu: tuple[float, ...]
    mem_gb_per_gpu: tuple[float, ...]
    #: throughput[i][j] at (cpus_per_gpu[i], mem_gb_per_gpu[j]), relative to the reference.
    throughput: tuple[tuple[float, ...], ...]
    reference: tuple[float, float]
    iter_time_s: float
    source: str = ""
    #: (GPU type, how the model runs there), sorted by type; empty = one GPU type.
    gpu_types: tuple[tuple[str, GpuTypeSpeed], ...] = ()
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        self._validate()

    # -- queries -------------------------------------------------------------------------
    def speed(self, cpus_per_gpu: float, mem_gb_per_gpu: float) -> float:
        """Relative throughput at a per-GPU allocation (bilinear between grid points).

        Below the first CPU row throughput falls linearly to zero at zero CPUs; outside the
        memory columns it is clamped (a job never runs with less than its process memory).
        """
        # Looked up first by the exact arguments (redistributing leftovers asks millions of
        # times per simulation, and the rounding was half of it); the value is always the
        # one computed at the rounded point, so both keys give the same answer.
        exact = ("speed", cpus_per_gpu, mem_gb_per_gpu)
        hit = self._cache.get(exact)
        if hit is not None:
            return hit
        key = (round(cpus_per_gpu, 6), round(mem_gb_per_gpu, 6))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache[exact] = hit
            return hit
        rows, cols = self.cpus_per_gpu, self.mem_gb_per_gpu
        c, m = key
        scale = 1.0
        if c < rows[0]:
            scale = max(c, 0.0) / rows[0]
            c = rows[0]
        c = min(c, rows[-1])
        m = min(max(m, cols[0]), cols[-1])
        i, fi = _locate(rows, c)
        j, fj = _locate(cols, m)
        t = self.throughput
        top = t[i][j] * (1 - fj) + t[i][j + 1] * fj if fj else t[i][j]
        if fi:
            bot = t[i + 1][j] * (1 - fj) + t[i + 1][j + 1] * fj if fj else t[i + 1][j]
            top = top * (1 - fi) + bot * fi
        value = top * scale
        self._cache[key] = self._cache[exact] = value
        return value

    def on(self, gpu_type: str) -> SensitivityProfile:
        """The profile of this model on `gpu_type`: its grid (the type's own, or the
        reference one) scaled by the type's speed, so every other query (best case, OPT's
        cells, the proportional speed) works unchanged on it.

        An untyped server ("") or a type the profile does not list runs at the reference
        GPU's speed (factor 1.0): the profile itself is returned. Cached, so a job's profile
        on a type is one object (the mechanisms key memos on it).
        """
        if not gpu_type or not self.gpu_types:
            return self
        key = ("on", gpu_type)
        hit = self._cache.get(key)
        if hit is None:
            spec = dict(self.gpu_types).get(gpu_type)
            if spec is None:
                hit = self
            else:
                grid = spec.throughput if spec.throughput is not None else self.throughput
                hit = SensitivityProfile(
                    model=self.model, task=self.task, cpus_per_gpu=self.cpus_per_gpu,
                    mem_gb_per_gpu=self.mem_gb_per_gpu,
                    throughput=tuple(tuple(v * spec.speed for v in row) for row in grid),
                    reference=self.reference, iter_time_s=self.iter_time_s, source=self.source,
                )
            self._cache[key] = hit
        return hit

    def speed_on(self, gpu_type: str, cpus_per_gpu: float, mem_gb_per_gpu: float) -> float:
        """Relative throughput (1.0 = the reference cell on the reference GPU) on one GPU of
        `gpu_type` with (c, m) per GPU. Untyped ("") or unlisted types: factor 1.0."""
        return self.on(gpu_type).speed(cpus_per_gpu, mem_gb_per_gpu)

    @cached_property
    def saturated(self) -> float:
        """The highest throughput anywhere on the grid (cached: asked for every decision)."""
        return max(max(row) for row in self.throughput)

    @cached_property
    def saturating(self) -> tuple[float, float]:
        """`best_case()` with no floor (cached: leftover hand-outs ask it of every job twice
        a round)."""
        return self.best_case()

    def best_case(self, floor: float = 0.0) -> tuple[float, float]:
        """Smallest grid cell (fewest CPUs, then least memory) within 1% of saturation.

        `floor` lifts the target so that the demand never runs slower than a given speed
        (the scheduler passes the job's GPU-proportional speed on the current cluster, so a
        job whose curve is flat does not lose the last 1% by being handed less).
        """
        target = max(self.saturated * (1 - SATURATION_TOLERANCE), floor)
        key = ("best_case", round(target, 9))
        hit = self._cache.get(key)
        if hit is None:
            hit = next(
                ((c, m) for c, m, t in self.cells() if t >= target - 1e-12),
                (self.cpus_per_gpu[-1], self.mem_gb_per_gpu[-1]),
            )
            self._cache[key] = hit
        return hit

    def cells(self) -> list[tuple[float, float, float]]:
        """Every (cpus_per_gpu, mem_gb_per_gpu, throughput) grid cell."""
        return [
            (c, m, self.throughput[i][j])
            for i, c in enumerate(self.cpus_per_gpu)
            for j, m in enumerate(self.mem_gb_per_gpu)
        ]

    # -- (de)serialisation -----------------------------------------------------------------
    @classmethod
    def from_dict(cls, model: str, d: Mapping[str, Any]) -> SensitivityProfile:
        where = f"profile {model!r}"
        if not isinstance(d, Mapping):
            raise ProfileError(f"{where}: expected an object")
        for key in ("task", "cpus_per_gpu", "mem_gb_per_gpu", "throughput", "reference", "iter_time_s"):
            if key not in d:
                raise ProfileError(f"{where}: missing field {key!r}")
        ref = d["reference"]
        if not isinstance(ref, Mapping) or "cpus_per_gpu" not in ref or "mem_gb_per_gpu" not in ref:
            raise ProfileError(f"{where}: field 'reference' needs 'cpus_per_gpu' and 'mem_gb_per_gpu'")
        gpu_types = _parse_gpu_types(where, d.get("gpu_types", {}))
        try:
            return cls(
                model=model,
                task=str(d["task"]),
                cpus_per_gpu=tuple(float(x) for x in d["cpus_per_gpu"]),
                mem_gb_per_gpu=tuple(float(x) for x in d["mem_gb_per_gpu"]),
                throughput=tuple(tuple(float(x) for x in row) for row in d["throughput"]),
                reference=(float(ref["cpus_per_gpu"]), float(ref["mem_gb_per_gpu"])),
                iter_time_s=float(d["iter_time_s"]),
                source=str(d.get("source", "")),
                gpu_types=gpu_types,
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"{where}: non-numeric value ({exc})") from None

    def to_dict(self) -> dict[str, Any]:
        types: dict[str, Any] = {}
        for name, g in self.gpu_types:
            types[name] = {"speed": g.speed}
            if g.throughput is not None:
                types[name]["throughput"] = [list(r) for r in g.throughput]
        return {
            "task": self.task,
            "cpus_per_gpu": list(self.cpus_per_gpu),
            "mem_gb_per_gpu": list(self.mem_gb_per_gpu),
            "throughput": [list(r) for r in self.throughput],
            "reference": {"cpus_per_gpu": self.reference[0], "mem_gb_per_gpu": self.reference[1]},
            "iter_time_s": self.iter_time_s,
            "source": self.source,
            **({"gpu_types": types} if types else {}),
        }

    def _validate(self) -> None:
        where = f"profile {self.model!r}"
        if self.task not in TASKS:
            raise ProfileError(f"{where}: field 'task' must be one of {', '.join(TASKS)}, got {self.task!r}")
        for name in ("cpus_per_gpu", "mem_gb_per_gpu"):
            vals = getattr(self, name)
            if len(vals) < 2:
                raise ProfileError(f"{where}: field {name!r} needs at least two values")
            if any(not math.isfinite(v) or v <= 0 for v in vals):
                raise ProfileError(f"{where}: field {name!r} must hold positive numbers")
            if any(b <= a for a, b in zip(vals, vals[1:])):
                raise ProfileError(f"{where}: field {name!r} must be strictly increasing")
        if len(self.throughput) != len(self.cpus_per_gpu) or any(
            len(r) != len(self.mem_gb_per_gpu) for r in self.throughput
        ):
            raise ProfileError(
                f"{where}: field 'throughput' must be {len(self.cpus_per_gpu)} rows x "
                f"{len(self.mem_gb_per_gpu)} columns"
            )
        if any(not math.isfinite(v) or v < 0 for r in self.throughput for v in r):
            raise ProfileError(f"{where}: field 'throughput' must hold non-negative numbers")
        if not math.isfinite(self.iter_time_s) or self.iter_time_s <= 0:
            raise ProfileError(f"{where}: field 'iter_time_s' must be positive")
        rc, rm = self.reference
        if not (self.cpus_per_gpu[0] <= rc <= self.cpus_per_gpu[-1]) or not (
            self.mem_gb_per_gpu[0] <= rm <= self.mem_gb_per_gpu[-1]
        ):
            raise ProfileError(f"{where}: field 'reference' lies outside the grid")
        if self.saturated <= 0:
            raise ProfileError(f"{where}: field 'throughput' is all zero")
        for name, spec in self.gpu_types:
            field_ = f"gpu_types.{name}"
            if not name:
                raise ProfileError(f"{where}: field 'gpu_types' has an empty type name")
            if not math.isfinite(spec.speed) or spec.speed <= 0:
                raise ProfileError(f"{where}: field '{field_}.speed' must be a positive number")
            grid = spec.throughput
            if grid is None:
                continue
            if len(grid) != len(self.cpus_per_gpu) or any(len(r) != len(self.mem_gb_per_gpu) for r in grid):
                raise ProfileError(
                    f"{where}: field '{field_}.throughput' must be {len(self.cpus_per_gpu)} rows x "
                    f"{len(self.mem_gb_per_gpu)} columns, like 'throughput'"
                )
            if any(not math.isfinite(v) or v < 0 for r in grid for v in r) or max(max(r) for r in grid) <= 0:
                raise ProfileError(f"{where}: field '{field_}.throughput' must hold non-negative numbers, not all zero")


def _parse_gpu_types(where: str, raw: Any) -> tuple[tuple[str, GpuTypeSpeed], ...]:
    """The optional `gpu_types` object of a profile entry, sorted by type name."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{where}: field 'gpu_types' must be an object of GPU type -> {{\"speed\": ...}}")
    out = []
    for name, entry in sorted(raw.items()):
        field_ = f"gpu_types.{name}"
        problem = gpu_type_problem(str(name))
        if problem:
            raise ProfileError(f"{where}: field '{field_}': {problem}")
        if not isinstance(entry, Mapping) or "speed" not in entry:
            raise ProfileError(f"{where}: field '{field_}' needs 'speed'")
        unknown = set(entry) - {"speed", "throughput"}
        if unknown:
            raise ProfileError(f"{where}: field '{field_}' has unknown keys {', '.join(sorted(unknown))}")
        try:
            speed = float(entry["speed"])
            grid = entry.get("throughput")
            if grid is not None:
                grid = tuple(tuple(float(x) for x in row) for row in grid)
        except (TypeError, ValueError) as exc:
            raise ProfileError(f"{where}: field '{field_}' has a non-numeric value ({exc})") from None
        out.append((str(name), GpuTypeSpeed(speed, grid)))
    return tuple(out)


def _locate(values: tuple[float, ...], x: float) -> tuple[int, float]:
    """Index i and fraction f with x = values[i] + f * (values[i+1] - values[i])."""
    i = bisect.bisect_right(values, x) - 1
    if i >= len(values) - 1:
        return len(values) - 1, 0.0
    i = max(i, 0)
    lo, hi = values[i], values[i + 1]
    return i, (x - lo) / (hi - lo)


def read_profile_file(path: str | Path) -> Any:
    """A profile file's JSON document (models, and pairs for packing); ProfileError names
    the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def load_profiles(path: str | Path) -> dict[str, SensitivityProfile]:
    """Load a profile file; raises ProfileError naming the file and the bad field."""
    return parse_profiles(read_profile_file(path), origin=str(path))


def parse_profiles(doc: Any, origin: str = "profiles") -> dict[str, SensitivityProfile]:
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise ProfileError(f"{origin}: field 'format' must be {FORMAT!r}")
    models = doc.get("models")
    if not isinstance(models, Mapping) or not models:
        raise ProfileError(f"{origin}: field 'models' must be a non-empty object")
    out: dict[str, SensitivityProfile] = {}
    for name, entry in models.items():
        try:
            out[name] = SensitivityProfile.from_dict(name, entry)
        except ProfileError as exc:
            raise ProfileError(f"{origin}: {exc}") from None
    return out


def dump_profiles(profiles: Mapping[str, SensitivityProfile]) -> dict[str, Any]:
    return {"format": FORMAT, "models": {name: p.to_dict() for name, p in profiles.items()}}

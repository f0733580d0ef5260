"""The built-in sensitivity profiles (the ten models of the paper's Table 4).

`zoo.json` ships inside the package and is what the scheduler loads; it is generated from the
parameters in `zoo_models.py` by::

    python -m synergy.scheduler.profiles.zoo --write     # regenerate zoo.json
    python -m synergy.scheduler.profiles.zoo --check     # exit 1 if zoo.json is stale
    python -m synergy.scheduler.profiles.zoo             # print the zoo table

Shipping the generated file (rather than computing the zoo at import) keeps one format for
built-in and user profiles, and lets users copy an entry as the starting point of their own.
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from synergy.scheduler.profiles.format import (
    TASKS,
    ProfileError,
    SensitivityProfile,
    dump_profiles,
    load_profiles,
    parse_profiles,
)
from synergy.scheduler.profiles.minio import REFERENCE, build_profile
from synergy.scheduler.profiles.zoo_models import ZOO

ZOO_FILE = "zoo.json"
_PACKAGE = "synergy.scheduler.profiles"

#: Task -> model names, in Table 4's order (the workload generator draws from these).
MODELS_BY_TASK: dict[str, tuple[str, ...]] = {
    task: tuple(e.name for e in ZOO if e.task == task) for task in TASKS
}


def build_zoo() -> dict[str, SensitivityProfile]:
    """Sample every zoo model on the grid (what `--write` stores)."""
    return {e.name: build_profile(e.name, e.task, e.model, source=e.source) for e in ZOO}


def render(profiles: Mapping[str, SensitivityProfile]) -> str:
    """The profiles as profile-format JSON text: one line per matrix row, stable bytes."""
    return _dump(dump_profiles(profiles), 0) + "\n"


def default_profiles() -> dict[str, SensitivityProfile]:
    """The packaged zoo, by model name, parsed afresh on every call (about a millisecond);
    callers keep the dict for as long as they need it."""
    text = resources.files(_PACKAGE).joinpath(ZOO_FILE).read_text(encoding="utf-8")
    return parse_profiles(json.loads(text), origin=ZOO_FILE)


def get_profiles(path: str | None) -> dict[str, SensitivityProfile]:
    """The zoo with the profiles of a user file (if any) merged over it.

    A user entry replaces the zoo entry of the same name whole. Raises ProfileError naming
    the file and field when the file is unreadable or malformed.
    """
    profiles = default_profiles()
    if path is not None:
        profiles.update(load_profiles(path))
    return profiles


def summary(profiles: Mapping[str, SensitivityProfile], per_gpu: tuple[float, float] = REFERENCE) -> list[dict[str, Any]]:
    """Per model: best-case demand and its speedup over the proportional share `per_gpu`."""
    rows = []
    for name, p in profiles.items():
        prop = p.speed(*per_gpu)
        c, m = p.best_case(floor=prop)
        rows.append({
            "model": name, "task": p.task, "best_cpus_per_gpu": c, "best_mem_gb_per_gpu": m,
            "speedup": p.speed(c, m) / prop if prop > 0 else float("inf"),
            "iter_time_s": p.iter_time_s,
        })
    return rows


def _dump(obj: Any, level: int) -> str:
    """JSON with two-space indents, but lists of numbers kept on one line."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = (f"{inner}{json.dumps(k)}: {_dump(v, level + 1)}" for k, v in obj.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, list) and obj and all(isinstance(x, list) for x in obj):
        return "[\n" + ",\n".join(inner + _dump(x, level + 1) for x in obj) + f"\n{pad}]"
    return json.dumps(obj, ensure_ascii=False)


def _zoo_path() -> Path:
    return Path(__file__).with_name(ZOO_FILE)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m synergy.scheduler.profiles.zoo", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"regenerate {ZOO_FILE} from zoo_models.py")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {ZOO_FILE} differs from zoo_models.py")
    args = ap.parse_args(argv)
    text = render(build_zoo())
    path = _zoo_path()
    if args.write:
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
        return 0
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is stale: run python -m synergy.scheduler.profiles.zoo --write", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    print(f"{'model':15} {'task':9} {'best c/GPU':>10} {'best GB/GPU':>11} {'speedup':>8} {'s/iter':>7}")
    for r in summary(build_zoo()):
        print(f"{r['model']:15} {r['task']:9} {r['best_cpus_per_gpu']:>10g} {r['best_mem_gb_per_gpu']:>11g} "
              f"{r['speedup']:>7.2f}x {r['iter_time_s']:>7.3f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ProfileError as exc:
        sys.exit(f"error: {exc}")
